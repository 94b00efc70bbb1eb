package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// PlacementRole says what the owner of a member does for one Database there.
// +kubebuilder:validation:Enum=Apply;Hold;Teardown
type PlacementRole string

const (
	// PlacementRoleApply renders and applies the current generation, then observes.
	PlacementRoleApply PlacementRole = "Apply"
	// PlacementRoleHold observes only: the rollout has not reached the member yet.
	PlacementRoleHold PlacementRole = "Hold"
	// PlacementRoleTeardown removes the Database from the member per its deletion policy.
	PlacementRoleTeardown PlacementRole = "Teardown"
)

// LabelPlacementCluster names the member of a DatabasePlacement.
const LabelPlacementCluster = "fleetdb.io/cluster"

// DatabaseRef names a hub Database and the incarnation (UID) a placement belongs to.
type DatabaseRef struct {
	// Namespace of the Database.
	// +kubebuilder:validation:MaxLength=63
	Namespace string `json:"namespace"`
	// Name of the Database.
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`
	// UID of the Database.
	// +kubebuilder:validation:MaxLength=64
	UID string `json:"uid"`
}

// DatabasePlacementSpec is the hub's plan for one Database in one member,
// written by the hub replica that writes the Database's status (the elected
// leader) and read by the replica that owns the member (--sharding). It holds
// no secret: credentials stay in their hub Secret.
type DatabasePlacementSpec struct {
	// Database this placement belongs to.
	Database DatabaseRef `json:"database"`
	// Cluster is the member (MemberCluster name).
	// +kubebuilder:validation:MaxLength=253
	Cluster string `json:"cluster"`
	// Role is what the member's owner does.
	Role PlacementRole `json:"role"`
	// Generation of the Database the plan was made for.
	Generation int64 `json:"generation"`
	// DeletionPolicy applied on teardown.
	// +optional
	DeletionPolicy DeletionPolicy `json:"deletionPolicy,omitempty"`
	// FinalBackup is true when the teardown must take a final backup first:
	// an owner that cannot take it holds the teardown (data safety).
	// +optional
	FinalBackup bool `json:"finalBackup,omitempty"`
	// Traceparent is the W3C traceparent of the change the plan belongs to.
	// +optional
	// +kubebuilder:validation:MaxLength=128
	Traceparent string `json:"traceparent,omitempty"`
	// InstanceCertificate is the SHA-256 (hex) of the server certificate the
	// instances serve (a StatefulSet-backend postgres Database): the owner
	// renders the certificate of the Database's hub Secret only when it is
	// this one, and a renewal changes the placement, which wakes the owner.
	// +optional
	// +kubebuilder:validation:MaxLength=64
	InstanceCertificate string `json:"instanceCertificate,omitempty"`
	// NodeMaintenance is the member's MemberCluster spec.nodeMaintenance.inProgress
	// as the leader read it.
	// +optional
	NodeMaintenance bool `json:"nodeMaintenance,omitempty"`
}

// DatabasePlacementStatus is what the member's owner last observed, written
// only when it changed.
type DatabasePlacementStatus struct {
	// Cluster is the member's entry for Database.status.clusters (without lastSyncTime).
	// +optional
	Cluster *ClusterStatus `json:"cluster,omitempty"`
	// HasWorkload is true when the member runs the Database's workload.
	// +optional
	HasWorkload bool `json:"hasWorkload,omitempty"`
	// TornDown is true when the teardown finished in the member.
	// +optional
	TornDown bool `json:"tornDown,omitempty"`
	// Unreachable is true when the owner could not reach the member.
	// +optional
	Unreachable bool `json:"unreachable,omitempty"`
	// DatabaseUID is the Database incarnation the report is about: a
	// report about another one than spec.database.uid is ignored.
	// +optional
	// +kubebuilder:validation:MaxLength=64
	DatabaseUID string `json:"databaseUID,omitempty"`
	// Reporter is the hub replica that wrote this status (the member's owner).
	// +optional
	// +kubebuilder:validation:MaxLength=253
	Reporter string `json:"reporter,omitempty"`
}

// DatabasePlacement is one Database in one member, kept in the hub's own
// namespace (never the tenant's, so an application team cannot forge a
// member's report). Used by a sharded hub (--sharding): the spec is the plan,
// the status the member's owner's last observation.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=dbp,categories=fleetdb
// +kubebuilder:printcolumn:name="Database",type=string,JSONPath=`.spec.database.name`
// +kubebuilder:printcolumn:name="Cluster",type=string,JSONPath=`.spec.cluster`
// +kubebuilder:printcolumn:name="Role",type=string,JSONPath=`.spec.role`
// +kubebuilder:printcolumn:name="Phase",type=string,JSONPath=`.status.cluster.phase`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type DatabasePlacement struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   DatabasePlacementSpec   `json:"spec,omitempty"`
	Status DatabasePlacementStatus `json:"status,omitempty"`
}

// +kubebuilder:object:root=true

// DatabasePlacementList is a list of DatabasePlacements.
type DatabasePlacementList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []DatabasePlacement `json:"items"`
}
