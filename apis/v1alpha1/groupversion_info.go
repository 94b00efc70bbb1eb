// Package v1alpha1 holds the fleetdb.io/v1alpha1 API: Database (namespaced,
// on the hub) and MemberCluster (cluster-scoped, the hub's cluster registry).
//
// +kubebuilder:object:generate=true
// +groupName=fleetdb.io
package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

var (
	// GroupVersion is the group and version of every type in this package.
	GroupVersion = schema.GroupVersion{Group: "fleetdb.io", Version: "v1alpha1"}

	// SchemeBuilder registers this package's types with a runtime.Scheme.
	SchemeBuilder = runtime.NewSchemeBuilder(addKnownTypes)

	// AddToScheme adds this package's types to a runtime.Scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)

func addKnownTypes(s *runtime.Scheme) error {
	s.AddKnownTypes(GroupVersion, &Database{}, &DatabaseList{}, &MemberCluster{}, &MemberClusterList{}, &DatabaseBackup{}, &DatabaseBackupList{},
		&DatabasePlacement{}, &DatabasePlacementList{})
	metav1.AddToGroupVersion(s, GroupVersion)
	return nil
}
