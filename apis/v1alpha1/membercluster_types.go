package v1alpha1

import (
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// SecretKeyRef points at one key of a Secret in the hub's namespace.
//
// The Secret is always in the namespace the hub runs in (--hub-namespace,
// fleetdb-system by default): a MemberCluster can never make the hub read a
// Secret elsewhere. The namespace is a deploy-time value the CRD cannot know,
// so the field is not a choice: the API server refuses a new namespace (CEL),
// and the hub refuses one other than its own on objects written before this
// rule (Joined=False, reason SecretNamespaceNotAllowed).
//
// +kubebuilder:validation:XValidation:rule="!has(self.namespace) || size(self.namespace) == 0 || (oldSelf.hasValue() && has(oldSelf.value().namespace) && oldSelf.value().namespace == self.namespace)",message="spec.kubeconfigSecretRef.namespace must be omitted: the kubeconfig Secret is always in the hub's namespace",fieldPath=".namespace",optionalOldSelf=true
type SecretKeyRef struct {
	// Namespace is deprecated and must be omitted: the Secret is in the hub's
	// namespace. Objects that still carry it keep it (it cannot be changed);
	// the hub refuses any namespace but its own.
	// +optional
	// +kubebuilder:validation:MaxLength=63
	Namespace string `json:"namespace,omitempty"`
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

	// Drain moves Databases off the member (`kubectl fleetdb drain`): it
	// gets no new placement, and every existing one is dropped, so a
	// Database chosen by its clusterSelector moves to another matching
	// member and one that names it in clusterNames loses it. What happens
	// to the data left there is each Database's
	// spec.placement.onPlacementRemoval (Retain by default: volumes and
	// credentials stay). The primary of a PrimaryStandby Database is never
	// dropped by a drain: switch it over first; it stays placed until then.
	// +optional
	Drain bool `json:"drain,omitempty"`

	// NamespaceSelector says which hub namespaces may place Databases on
	// this member, by the namespaces' labels. Unset (the default) allows no
	// namespace: a platform team opens a member to tenants explicitly; {}
	// allows every namespace. A Database naming a member its namespace may
	// not use is Stalled; a clusterSelector never selects such a member.
	// +optional
	NamespaceSelector *metav1.LabelSelector `json:"namespaceSelector,omitempty"`
	// Connection opts in to kubeconfig settings the hub refuses by default.
	// +optional
	Connection ConnectionPolicy `json:"connection,omitempty"`
	// Replication says how the other members reach this member's databases
	// for streaming replication (spec.topology.mode PrimaryStandby). A
	// PrimaryStandby Database placed on a member without it waits (reason
	// WaitingForReplicationEndpoint) until it is set.
	// +optional
	Replication *ReplicationEndpoint `json:"replication,omitempty"`
	// NodeMaintenance lets node drains through in this member while the
	// platform team maintains its nodes. A CloudNativePG Cluster of one
	// instance has a PodDisruptionBudget that blocks every drain of its
	// node; with nodeMaintenance.inProgress the hub renders every
	// CloudNativePG Cluster in this member with
	// nodeMaintenanceWindow {inProgress: true, reusePVC: true}, so
	// CloudNativePG drops those budgets (a single instance's too) and an
	// evicted instance comes back on its own volume when it can be
	// scheduled again. Never reusePVC false: that would let CloudNativePG
	// replace a volume. The instance is down while its node is drained;
	// no data is moved or deleted. Set it back to false when done.
	// +optional
	NodeMaintenance *NodeMaintenance `json:"nodeMaintenance,omitempty"`
}

// NodeMaintenance is a member's node maintenance switch.
type NodeMaintenance struct {
	// InProgress lets node drains through (see MemberClusterSpec.NodeMaintenance).
	// +optional
	InProgress bool `json:"inProgress,omitempty"`
}

// NodeMaintenanceInProgress reports whether the member's node maintenance is on.
func (m *MemberCluster) NodeMaintenanceInProgress() bool {
	return m.Spec.NodeMaintenance != nil && m.Spec.NodeMaintenance.InProgress
}

// ReplicationEndpoint is the address at which other members reach the
// primary ("<name>-rw" Service) of a Database in this member: a DNS name
// that the platform team routes there (a LoadBalancer Service's DNS record,
// a mesh or a cross-cluster service name), the same for every Database but
// for its name and namespace.
type ReplicationEndpoint struct {
	// HostTemplate is the host name, with $(DATABASE) and $(NAMESPACE)
	// replaced by the Database's name and namespace, e.g.
	// "$(DATABASE)-rw.$(NAMESPACE).member-1.example.net". Both placeholders
	// are required: two Databases must never share an address (a standby
	// would stream from the wrong primary). The host is also put in the
	// member's server certificate (one of the DNS names the hub issues it
	// for), which standbys verify (sslmode verify-full).
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=200
	// +kubebuilder:validation:XValidation:rule="self.contains('$(DATABASE)') && self.contains('$(NAMESPACE)')",message="spec.replication.hostTemplate must contain $(DATABASE) and $(NAMESPACE)"
	// +kubebuilder:validation:XValidation:rule="self.replace('$(DATABASE)', 'd').replace('$(NAMESPACE)', 'n').matches('^[a-z0-9]([-a-z0-9]*[a-z0-9])?([.][a-z0-9]([-a-z0-9]*[a-z0-9])?)*$')",message="spec.replication.hostTemplate must be a DNS name (lower case) once $(DATABASE) and $(NAMESPACE) are replaced"
	HostTemplate string `json:"hostTemplate"`
	// Port is the TCP port at that host (5432 by default).
	// +optional
	// +kubebuilder:default=5432
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=65535
	Port int32 `json:"port,omitempty"`
}

// Placeholders of ReplicationEndpoint.HostTemplate.
const (
	ReplicationHostDatabase  = "$(DATABASE)"
	ReplicationHostNamespace = "$(NAMESPACE)"
	// DefaultReplicationPort is ReplicationEndpoint.Port when unset.
	DefaultReplicationPort int32 = 5432
)

// Host is the replication host of the Database namespace/name in this member.
func (e *ReplicationEndpoint) Host(namespace, name string) string {
	return strings.NewReplacer(ReplicationHostDatabase, name, ReplicationHostNamespace, namespace).Replace(e.HostTemplate)
}

// EffectivePort is Port, or DefaultReplicationPort when unset.
func (e *ReplicationEndpoint) EffectivePort() int32 {
	if e.Port == 0 {
		return DefaultReplicationPort
	}
	return e.Port
}

// ConnectionPolicy lists the weaker ways to reach a member that the hub
// accepts only when asked to. A kubeconfig that uses one without its opt-in
// is refused (Joined=False, reason InsecureKubeconfig).
type ConnectionPolicy struct {
	// AllowInsecureSkipTLSVerify accepts insecure-skip-tls-verify: the hub
	// then does not verify the member's certificate (anyone on the path can
	// impersonate the member and read the hub's token).
	// +optional
	AllowInsecureSkipTLSVerify bool `json:"allowInsecureSkipTLSVerify,omitempty"`
	// AllowProxyURL accepts a proxy-url: the hub's traffic to the member goes
	// through that proxy.
	// +optional
	AllowProxyURL bool `json:"allowProxyURL,omitempty"`
	// AllowHTTP accepts a server address that is not https: no TLS at all,
	// credentials travel in the clear. For local test fleets only.
	// +optional
	AllowHTTP bool `json:"allowHTTP,omitempty"`
}

// MaxKubernetesVersionLength bounds status.kubernetesVersion: the hub stores
// at most this many bytes of what a member's /version reports.
const MaxKubernetesVersionLength = 64

// MemberClusterStatus is what the hub's probes observe of a member.
type MemberClusterStatus struct {
	// Conditions: Joined and Ready.
	// +optional
	// +listType=map
	// +listMapKey=type
	// +kubebuilder:validation:MaxItems=8
	Conditions []metav1.Condition `json:"conditions,omitempty"`
	// KubernetesVersion the member's API server reports (its /version
	// gitVersion, cut to MaxKubernetesVersionLength: a member is not trusted).
	// +optional
	// +kubebuilder:validation:MaxLength=64
	KubernetesVersion string `json:"kubernetesVersion,omitempty"`
	// Backends are the Database backends the member offers, as the hub's
	// probes discovered them (StatefulSet always; CloudNativePG when the
	// member serves CloudNativePG's Cluster API).
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=8
	Backends []Backend `json:"backends,omitempty"`
	// LastProbeTime is when the probe that last changed this status ran. A
	// probe that finds nothing changed writes nothing (a steady fleet makes
	// no writes), so on a healthy member this can be long ago while probes
	// go on: the Ready condition is the latest probe's verdict.
	// +optional
	LastProbeTime *metav1.Time `json:"lastProbeTime,omitempty"`
	// ClusterID is the member cluster's identity as the hub read it: the
	// uid of its kube-system Namespace. Two MemberClusters with the same
	// ClusterID are one cluster registered twice: the older registration
	// (creationTimestamp, then name) is used, the other is not Ready
	// (reason DuplicateCluster) and the hub writes nothing through it.
	// +optional
	// +kubebuilder:validation:MaxLength=128
	ClusterID string `json:"clusterID,omitempty"`
}

// ReasonDuplicateCluster means the member's cluster is registered already under
// another MemberCluster (the same kube-system Namespace uid), which the hub
// uses; it does not connect through this one.
const ReasonDuplicateCluster = "DuplicateCluster"

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
// +kubebuilder:printcolumn:name="Drain",type=boolean,JSONPath=`.spec.drain`,priority=1
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
