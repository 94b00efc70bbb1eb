// Package v1alpha1 holds the fleetdb.io/v1alpha1 API: Database (namespaced,
// on the hub) and MemberCluster (cluster-scoped, the hub's cluster registry).
//
// +kubebuilder:object:generate=true
// +groupName=fleetdb.io
package v1alpha1

import (
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/scheme"
)

var (
	// GroupVersion is the group and version of every type in this package.
	GroupVersion = schema.GroupVersion{Group: "fleetdb.io", Version: "v1alpha1"}

	// SchemeBuilder registers this package's types with a runtime.Scheme.
	SchemeBuilder = &scheme.Builder{GroupVersion: GroupVersion}

	// AddToScheme adds this package's types to a runtime.Scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)
