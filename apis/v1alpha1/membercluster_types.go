package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// SecretKeyRef points at one key of a Secret on the hub.
type SecretKeyRef struct {
	// Namespace of the Secret.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	Namespace string `json:"namespace"`
	// Name of the Secret.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$`
	Name string `json:"name"`
	// Key in the Secret's data that holds the kubeconfig.
	// +optional
	// +kubebuilder:default=kubeconfig
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[-._a-zA-Z0-9]+$`
	Key string `json:"key,omitempty"`
}

// MemberClusterSpec registers a member cluster with the hub.
type MemberClusterSpec struct {
	// KubeconfigSecretRef points at the kubeconfig the hub uses to reach the member.
	// +required
	KubeconfigSecretRef SecretKeyRef `json:"kubeconfigSecretRef"`

	// Unschedulable cordons the member: no new placements, existing ones stay.
	// +optional
	Unschedulable bool `json:"unschedulable,omitempty"`

	// NamespaceSelector says which hub namespaces may place Databases on
	// this member, by the namespaces' labels. Unset (the default) allows no
	// namespace: a platform team opens a member to tenants explicitly; {}
	// allows every namespace. A Database naming a member its namespace may
	// not use is Stalled; a clusterSelector never selects such a member.
	// +optional
	NamespaceSelector *metav1.LabelSelector `json:"namespaceSelector,omitempty"`
}

// MemberClusterStatus is what the hub's probes observe of a member.
type MemberClusterStatus struct {
	// Conditions: Joined and Ready.
	// +optional
	// +listType=map
	// +listMapKey=type
	// +kubebuilder:validation:MaxItems=8
	Conditions []metav1.Condition `json:"conditions,omitempty"`
	// KubernetesVersion the member's API server reports.
	// +optional
	KubernetesVersion string `json:"kubernetesVersion,omitempty"`
	// Backends are the Database backends the member offers, as the hub's
	// probes discovered them (StatefulSet always; CloudNativePG when the
	// member serves CloudNativePG's Cluster API).
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=8
	Backends []Backend `json:"backends,omitempty"`
	// LastProbeTime is when the hub last probed the member.
	// +optional
	LastProbeTime *metav1.Time `json:"lastProbeTime,omitempty"`
}

// MemberCluster is a member cluster in the hub's registry.
//
// +kubebuilder:object:root=true
// +kubebuilder:resource:scope=Cluster,shortName=mc,categories=fleetdb
// +kubebuilder:subresource:status
// +kubebuilder:validation:XValidation:rule="self.metadata.name.matches('^[a-z0-9]([-a-z0-9]*[a-z0-9])?$') && size(self.metadata.name) <= 63",message="metadata.name must be a DNS label of at most 63 characters"
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Version",type=string,JSONPath=`.status.kubernetesVersion`
// +kubebuilder:printcolumn:name="Backends",type=string,JSONPath=`.status.backends`,priority=1
// +kubebuilder:printcolumn:name="Unschedulable",type=boolean,JSONPath=`.spec.unschedulable`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type MemberCluster struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// +required
	Spec   MemberClusterSpec   `json:"spec"`
	Status MemberClusterStatus `json:"status,omitempty"`
}

// MemberClusterList is a list of MemberClusters.
//
// +kubebuilder:object:root=true
type MemberClusterList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []MemberCluster `json:"items"`
}
