package v1alpha1

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Engine is the database engine a Database runs.
// +kubebuilder:validation:Enum=postgres;mysql
type Engine string

// Supported engines.
const (
	EnginePostgres Engine = "postgres"
	EngineMySQL    Engine = "mysql"
)

// Backend is how a Database runs in each member cluster.
// +kubebuilder:validation:Enum=CloudNativePG;StatefulSet
type Backend string

// Backends.
const (
	// BackendCloudNativePG runs a CloudNativePG Cluster in each member: a
	// primary and streaming standbys (postgres only; the default for postgres).
	BackendCloudNativePG Backend = "CloudNativePG"
	// BackendStatefulSet runs one database server per member in a StatefulSet
	// (mysql, and postgres when asked for).
	BackendStatefulSet Backend = "StatefulSet"
)

// DeletionPolicy says what happens to the member objects when a Database is deleted.
// +kubebuilder:validation:Enum=Delete;Retain;Orphan
type DeletionPolicy string

// Deletion policies (SPEC 4.5).
const (
	// DeletionPolicyDelete removes every member object, PersistentVolumeClaims included.
	DeletionPolicyDelete DeletionPolicy = "Delete"
	// DeletionPolicyRetain removes the workload but keeps PersistentVolumeClaims and the credentials Secret.
	DeletionPolicyRetain DeletionPolicy = "Retain"
	// DeletionPolicyOrphan leaves every member object in place and strips fleetdb's labels.
	DeletionPolicyOrphan DeletionPolicy = "Orphan"
)

// Major version changes (transition rules; the defaults '17' and '8.4' are
// DefaultPostgresVersion and DefaultMySQLVersion). The data files of a major
// are not readable by an older one: CloudNativePG's webhook refuses a major
// downgrade, and a major upgrade to a version before 16
// (validateImageChange in internal/webhook/v1/cluster_webhook.go,
// CloudNativePG v1.30.0). A major upgrade on CloudNativePG is an offline
// pg_upgrade that each Cluster runs on its own (docs/src/postgres_upgrades.md,
// v1.30.0): a PrimaryStandby standby member, a replica Cluster, cannot follow
// its primary across it, so it is refused there. The StatefulSet backend has
// no pg_upgrade: a postgres server does not start on another major's data
// directory (ValidatePgVersion, src/backend/utils/init/miscinit.c), so a
// postgres major change is refused there; mysqld upgrades its data dictionary
// in place on start (8.0 to 8.4) but cannot go back.

// DatabaseSpec is the desired state of a Database across the fleet.
//
// +kubebuilder:validation:XValidation:rule="!has(self.overrides) || self.overrides.all(o, o.clusterNames.all(n, self.overrides.exists_one(p, n in p.clusterNames)))",message="spec.overrides: a cluster name may appear in only one override"
// +kubebuilder:validation:XValidation:rule="!((has(self.backend) && self.backend == 'StatefulSet') || self.engine == 'mysql') || ((!has(self.replicas) || self.replicas <= 1) && (!has(self.overrides) || self.overrides.all(o, !has(o.replicas) || o.replicas <= 1)))",message="the StatefulSet backend (and mysql, which runs on it) runs one independent instance per member: replicas (and override replicas) must be 1; for replicated postgres use backend CloudNativePG"
// +kubebuilder:validation:XValidation:rule="self.engine != 'mysql' || !has(self.backend) || self.backend == 'StatefulSet'",message="spec.backend: mysql runs on the StatefulSet backend only"
// +kubebuilder:validation:XValidation:rule="!has(oldSelf.backend) || (has(self.backend) && self.backend == oldSelf.backend)",message="spec.backend is immutable once set (another backend would start an empty database)"
// +kubebuilder:validation:XValidation:rule="!has(self.topology) || self.topology.mode != 'PrimaryStandby' || (self.engine == 'postgres' && (!has(self.backend) || self.backend == 'CloudNativePG'))",message="spec.topology: PrimaryStandby needs engine postgres on backend CloudNativePG"
// +kubebuilder:validation:XValidation:rule="(has(self.topology) ? self.topology.mode : 'Independent') == (has(oldSelf.topology) ? oldSelf.topology.mode : 'Independent')",message="spec.topology.mode is immutable (create a new Database to change it)"
// +kubebuilder:validation:XValidation:rule="!has(self.topology) || !has(self.topology.link) || !has(self.topology.link.walKeepSize) || quantity(string(self.topology.link.walKeepSize)).isLessThan(quantity(string(self.storage.size)))",message="spec.topology.link.walKeepSize must be smaller than spec.storage.size (every member keeps that much WAL on its volume)"
// +kubebuilder:validation:XValidation:rule="!has(self.restoreFrom) || !has(self.topology) || self.topology.mode != 'PrimaryStandby'",message="spec.restoreFrom is not supported with topology PrimaryStandby yet (standbys copy the primary; restore into an Independent Database)"
// +kubebuilder:validation:XValidation:rule="has(self.restoreFrom) == has(oldSelf.restoreFrom) && (!has(self.restoreFrom) || self.restoreFrom == oldSelf.restoreFrom)",message="spec.restoreFrom is immutable (it applies when the Database is created)"
// +kubebuilder:validation:XValidation:rule="self.engine != 'postgres' || int((has(self.version) ? string(self.version) : '17').split('.')[0]) >= int((has(oldSelf.version) ? string(oldSelf.version) : '17').split('.')[0])",message="spec.version: a postgres major version cannot go down (the data files are in the newer major's format; CloudNativePG refuses it too): to run an older major, create a new Database on it and restore a backup of this one into it"
// +kubebuilder:validation:XValidation:rule="self.engine != 'postgres' || int((has(self.version) ? string(self.version) : '17').split('.')[0]) <= int((has(oldSelf.version) ? string(oldSelf.version) : '17').split('.')[0]) || int((has(self.version) ? string(self.version) : '17').split('.')[0]) >= 16",message="spec.version: a postgres major upgrade must go to 16 or later (CloudNativePG's pg_upgrade refuses older targets)"
// +kubebuilder:validation:XValidation:rule="self.engine != 'postgres' || !has(self.topology) || self.topology.mode != 'PrimaryStandby' || int((has(self.version) ? string(self.version) : '17').split('.')[0]) <= int((has(oldSelf.version) ? string(oldSelf.version) : '17').split('.')[0])",message="spec.version: a PrimaryStandby Database cannot change its postgres major in place (each member would run pg_upgrade on its own and the standby members cannot follow the primary across majors): take a DatabaseBackup, create a new Independent Database on the new major with spec.restoreFrom that backup, and move the clients to it"
// +kubebuilder:validation:XValidation:rule="self.engine != 'postgres' || !has(self.backend) || self.backend != 'StatefulSet' || int((has(self.version) ? string(self.version) : '17').split('.')[0]) == int((has(oldSelf.version) ? string(oldSelf.version) : '17').split('.')[0])",message="spec.version: the StatefulSet backend cannot change the postgres major (it has no pg_upgrade, and postgres does not start on another major's data files): take a DatabaseBackup and restore it into a new Database on the new major (or use backend CloudNativePG)"
// +kubebuilder:validation:XValidation:rule="self.engine != 'mysql' || int((has(self.version) ? string(self.version) : '8.4').split('.')[0]) > int((has(oldSelf.version) ? string(oldSelf.version) : '8.4').split('.')[0]) || (int((has(self.version) ? string(self.version) : '8.4').split('.')[0]) == int((has(oldSelf.version) ? string(oldSelf.version) : '8.4').split('.')[0]) && (size((has(self.version) ? string(self.version) : '8.4').split('.')) < 2 || size((has(oldSelf.version) ? string(oldSelf.version) : '8.4').split('.')) < 2 || int((has(self.version) ? string(self.version) : '8.4').split('.')[1]) >= int((has(oldSelf.version) ? string(oldSelf.version) : '8.4').split('.')[1])))",message="spec.version: a mysql version cannot go back to an older series (mysqld upgraded the data dictionary in place): to run an older version, create a new Database on it and restore a backup of this one into it"
type DatabaseSpec struct {
	// Engine is the database engine. It cannot be changed after creation.
	// +required
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="spec.engine is immutable"
	Engine Engine `json:"engine"`

	// Backend is how the Database runs in each member: CloudNativePG (a
	// CloudNativePG Cluster with a primary and streaming standbys; postgres
	// only) or StatefulSet (one independent server per member, so replicas
	// must be 1). When empty the hub decides once, at the first placement, and
	// records it in the fleetdb.io/backend annotation: CloudNativePG for
	// postgres, StatefulSet for mysql; for a Database placed before backends
	// existed (or whose annotation was removed), the backend its members run,
	// read there: never a guess (see Database.KnownBackend).
	// +optional
	Backend Backend `json:"backend,omitempty"`

	// Version is the engine version, such as "17" or "8.4". When empty the hub
	// uses the engine's default (postgres 17, mysql 8.4). The API server
	// refuses a major downgrade, a postgres major upgrade to before 16, and a
	// postgres major change of a PrimaryStandby Database or on the
	// StatefulSet backend (see docs/cloudnativepg.md).
	// +optional
	// +kubebuilder:validation:XIntOrString
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:Pattern=`^[0-9]+(\.[0-9]+){0,2}$`
	Version string `json:"version,omitempty"`

	// Replicas is the number of database instances in each member cluster.
	// +optional
	// +kubebuilder:default=1
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=9
	Replicas int32 `json:"replicas,omitempty"`

	// Storage is the persistent volume each instance gets.
	// +required
	Storage StorageSpec `json:"storage"`

	// Resources are the compute requests and limits of each instance.
	// +optional
	Resources *ResourceSpec `json:"resources,omitempty"`

	// Placement chooses the member clusters.
	// +required
	Placement PlacementSpec `json:"placement"`

	// Overrides change settings for some member clusters.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=16
	Overrides []OverrideSpec `json:"overrides,omitempty"`

	// Rollout controls how a spec change reaches the members.
	// +optional
	// +kubebuilder:default={}
	Rollout RolloutSpec `json:"rollout,omitempty"`

	// DeletionPolicy says what happens to member objects when the Database is deleted.
	// +optional
	// +kubebuilder:default=Delete
	DeletionPolicy DeletionPolicy `json:"deletionPolicy,omitempty"`

	// Teardown tunes deletion.
	// +optional
	// +kubebuilder:default={}
	Teardown TeardownSpec `json:"teardown,omitempty"`

	// DeletionProtection, when true, makes the API server refuse to delete the
	// Database (the ValidatingAdmissionPolicy fleetdb-deletion-protection in
	// deploy/hub) and the hub refuse to tear it down. Set it to false first to
	// delete the Database. The same policy refuses turning it on once the
	// Database's deletion has begun; where the policy is absent, the hub holds
	// every further teardown while it is true (what was removed stays removed).
	// +optional
	DeletionProtection bool `json:"deletionProtection,omitempty"`

	// Topology says whether the members run one database (a primary member
	// and standby members, PrimaryStandby) or one each (Independent, the
	// default).
	// +optional
	Topology *TopologySpec `json:"topology,omitempty"`

	// Backup says where backups go in each member and whether the Database
	// gets a final backup before its data is deleted.
	// +optional
	Backup *BackupSpec `json:"backup,omitempty"`

	// RestoreFrom makes a new Database start from a backup: each member runs
	// a restore Job before the workload takes traffic. Immutable.
	// +optional
	RestoreFrom *RestoreSource `json:"restoreFrom,omitempty"`
}

// StorageSpec is the persistent storage of each instance.
type StorageSpec struct {
	// Size of each instance's volume; must be greater than zero.
	// +required
	// +kubebuilder:validation:XValidation:rule="quantity(string(self)).isGreaterThan(quantity('0'))",message="spec.storage.size must be greater than 0"
	// +kubebuilder:validation:XValidation:rule="quantity(string(self)).compareTo(quantity('64Ti')) <= 0",message="spec.storage.size must be at most 64Ti"
	// +kubebuilder:validation:XValidation:rule="quantity(string(self)).compareTo(quantity(string(oldSelf))) >= 0",message="spec.storage.size cannot shrink: volume claims only grow (CloudNativePG's webhook refuses a smaller size too, validateStorageConfigurationChange in internal/webhook/v1/cluster_webhook.go, v1.30.0)"
	// +kubebuilder:validation:XIntOrString
	// +kubebuilder:validation:MaxLength=32
	Size resource.Quantity `json:"size"`

	// StorageClassName of the volume claims; the member's default class when empty.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$`
	StorageClassName string `json:"storageClassName,omitempty"`
}

// ResourceSpec holds the compute requests and limits of an instance. The API
// server refuses negative quantities, quantities above the bounds (cpu 256,
// memory and ephemeral-storage 4Ti) and a limit below its request.
//
// +kubebuilder:validation:XValidation:rule="!has(self.requests) || !has(self.limits) || ((!has(self.requests.cpu) || !has(self.limits.cpu) || quantity(string(self.limits.cpu)).compareTo(quantity(string(self.requests.cpu))) >= 0) && (!has(self.requests.memory) || !has(self.limits.memory) || quantity(string(self.limits.memory)).compareTo(quantity(string(self.requests.memory))) >= 0) && (!has(self.requests.ephemeral__dash__storage) || !has(self.limits.ephemeral__dash__storage) || quantity(string(self.limits.ephemeral__dash__storage)).compareTo(quantity(string(self.requests.ephemeral__dash__storage))) >= 0))",message="limits must be greater than or equal to requests",fieldPath=".limits"
type ResourceSpec struct {
	// Requests are the minimum resources of each instance.
	// +optional
	Requests *ComputeResources `json:"requests,omitempty"`
	// Limits are the maximum resources of each instance.
	// +optional
	Limits *ComputeResources `json:"limits,omitempty"`
}

// ComputeResources are the amounts of each resource of an instance. Quantities
// are bounded in length so that the API server can afford to check them.
type ComputeResources struct {
	// CPU in cores, such as 500m or 2; between 0 and 256.
	// +optional
	// +kubebuilder:validation:XIntOrString
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:XValidation:rule="!quantity(string(self)).isLessThan(quantity('0'))",message="cpu must not be negative"
	// +kubebuilder:validation:XValidation:rule="quantity(string(self)).compareTo(quantity('256')) <= 0",message="cpu must be at most 256"
	CPU *resource.Quantity `json:"cpu,omitempty"`
	// Memory, such as 512Mi; between 0 and 4Ti.
	// +optional
	// +kubebuilder:validation:XIntOrString
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:XValidation:rule="!quantity(string(self)).isLessThan(quantity('0'))",message="memory must not be negative"
	// +kubebuilder:validation:XValidation:rule="quantity(string(self)).compareTo(quantity('4Ti')) <= 0",message="memory must be at most 4Ti"
	Memory *resource.Quantity `json:"memory,omitempty"`
	// EphemeralStorage is local scratch space, such as 1Gi; between 0 and 4Ti.
	// +optional
	// +kubebuilder:validation:XIntOrString
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:XValidation:rule="!quantity(string(self)).isLessThan(quantity('0'))",message="ephemeral-storage must not be negative"
	// +kubebuilder:validation:XValidation:rule="quantity(string(self)).compareTo(quantity('4Ti')) <= 0",message="ephemeral-storage must be at most 4Ti"
	EphemeralStorage *resource.Quantity `json:"ephemeral-storage,omitempty"`
}

// List returns the amounts as a core ResourceList; nil when c is nil or empty.
func (c *ComputeResources) List() corev1.ResourceList {
	if c == nil {
		return nil
	}
	out := corev1.ResourceList{}
	for name, q := range map[corev1.ResourceName]*resource.Quantity{
		corev1.ResourceCPU: c.CPU, corev1.ResourceMemory: c.Memory, corev1.ResourceEphemeralStorage: c.EphemeralStorage,
	} {
		if q != nil {
			out[name] = q.DeepCopy()
		}
	}
	if len(out) == 0 {
		return nil
	}
	return out
}

// PlacementSpec chooses member clusters: the union of ClusterNames and the
// clusters matching ClusterSelector, capped by MaxClusters.
//
// +kubebuilder:validation:XValidation:rule="(has(self.clusterNames) && size(self.clusterNames) > 0) || has(self.clusterSelector)",message="spec.placement needs at least one of clusterNames or clusterSelector"
// +kubebuilder:validation:XValidation:rule="!has(self.clusterSelector) || !has(self.clusterSelector.matchExpressions) || self.clusterSelector.matchExpressions.all(e, e.operator in ['In', 'NotIn', 'Exists', 'DoesNotExist'] && ((e.operator in ['In', 'NotIn']) == (has(e.values) && size(e.values) > 0)))",message="clusterSelector.matchExpressions: operator must be In, NotIn (both with values), Exists or DoesNotExist (without values)",fieldPath=".clusterSelector.matchExpressions"
type PlacementSpec struct {
	// ClusterNames are MemberCluster names to place on.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=256
	// +kubebuilder:validation:items:MaxLength=63
	// +kubebuilder:validation:items:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	ClusterNames []string `json:"clusterNames,omitempty"`

	// ClusterSelector selects MemberClusters by label.
	// +optional
	ClusterSelector *metav1.LabelSelector `json:"clusterSelector,omitempty"`

	// MaxClusters caps the number of chosen clusters. The choice is
	// deterministic: named clusters first, then the rest by name.
	// +optional
	// +kubebuilder:validation:Minimum=1
	MaxClusters *int32 `json:"maxClusters,omitempty"`
}

// OverrideSpec changes settings for the named member clusters.
//
// +kubebuilder:validation:XValidation:rule="has(self.replicas) || has(self.resources) || has(self.storageClassName)",message="an override must change at least one of replicas, resources or storageClassName"
type OverrideSpec struct {
	// ClusterNames are the member clusters this override applies to.
	// +required
	// +listType=set
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:items:MaxLength=63
	// +kubebuilder:validation:items:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	ClusterNames []string `json:"clusterNames"`

	// Replicas replaces spec.replicas in these clusters.
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=9
	Replicas *int32 `json:"replicas,omitempty"`

	// Resources replaces spec.resources in these clusters.
	// +optional
	Resources *ResourceSpec `json:"resources,omitempty"`

	// StorageClassName replaces spec.storage.storageClassName in these clusters.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$`
	StorageClassName *string `json:"storageClassName,omitempty"`
}

// RolloutSpec controls how a spec change reaches the members.
type RolloutSpec struct {
	// MaxUnavailable is how many member clusters are changed at once.
	// +optional
	// +kubebuilder:default=1
	// +kubebuilder:validation:Minimum=1
	MaxUnavailable int32 `json:"maxUnavailable,omitempty"`
}

// TeardownSpec tunes deletion.
type TeardownSpec struct {
	// UnreachableTimeout is how long an unreachable member may block deletion
	// before the hub lets the Database go and cleans that member when it
	// comes back.
	// +optional
	// +kubebuilder:default="10m"
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('0s') && duration(self) <= duration('168h')",message="spec.teardown.unreachableTimeout must be between 0s and 168h"
	UnreachableTimeout *metav1.Duration `json:"unreachableTimeout,omitempty"`

	// OnPlacementRemoval says what happens to a member's objects when the
	// member is dropped from the placement while the Database lives on (a
	// relabel, a placement edit, a cordon is not one): Retain (the default)
	// removes the workload but keeps the PersistentVolumeClaims and the
	// credentials Secret; Delete removes them too. Deleting the Database
	// follows spec.deletionPolicy instead; a MemberCluster removed from the
	// registry is never cleaned (see status.leftBehind).
	// +optional
	// +kubebuilder:default=Retain
	OnPlacementRemoval PlacementRemovalPolicy `json:"onPlacementRemoval,omitempty"`
}

// PlacementRemovalPolicy says what happens to a member's objects when the
// member leaves a live Database's placement.
// +kubebuilder:validation:Enum=Retain;Delete
type PlacementRemovalPolicy string

// Placement removal policies.
const (
	// PlacementRemovalRetain removes the workload but keeps PersistentVolumeClaims and the credentials Secret.
	PlacementRemovalRetain PlacementRemovalPolicy = "Retain"
	// PlacementRemovalDelete removes every member object, PersistentVolumeClaims included.
	PlacementRemovalDelete PlacementRemovalPolicy = "Delete"
)

// Phase is the summary phase of a Database.
// +kubebuilder:validation:Enum=Pending;Provisioning;Ready;Degraded;Deleting;Failed
type Phase string

// ClusterPhase is the phase of a Database in one member cluster.
// +kubebuilder:validation:Enum=Pending;Provisioning;Ready;Degraded;Unreachable;Conflict;Deleting
type ClusterPhase string

// DatabaseStatus is the observed state of a Database, folded from what the members report.
type DatabaseStatus struct {
	// ObservedGeneration is the generation the last successful pass acted on.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// LastChangeTraceID is the trace id of the hub's work on the current
	// generation (the reconcile that first acted on it, the member syncs that
	// carried it out): find the change in a trace backend when the hub
	// exports traces, and in the hub's logs (traceID=...) either way.
	// `kubectl fleetdb explain` shows it.
	// +optional
	LastChangeTraceID string `json:"lastChangeTraceID,omitempty"`

	// Phase summarises the conditions.
	// +optional
	Phase Phase `json:"phase,omitempty"`

	// ReadyClusters counts placed members that run the current generation with all replicas ready.
	// +optional
	ReadyClusters int32 `json:"readyClusters"`

	// TargetClusters counts the placed members.
	// +optional
	TargetClusters int32 `json:"targetClusters"`

	// ReadySummary is "ready/target" for the printer column.
	// +optional
	ReadySummary string `json:"readySummary,omitempty"`

	// Conditions: Ready, Placed, Reconciling, Degraded, Stalled, Deleting,
	// CredentialsRotated.
	// +optional
	// +listType=map
	// +listMapKey=type
	// +kubebuilder:validation:MaxItems=16
	Conditions []metav1.Condition `json:"conditions,omitempty"`

	// Credentials reports credential rotations (see the
	// fleetdb.io/rotate-credentials annotation); never any credential value.
	// +optional
	Credentials *CredentialsStatus `json:"credentials,omitempty"`

	// Clusters has one entry per placed (or still being torn down) member.
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=512
	Clusters []ClusterStatus `json:"clusters,omitempty"`

	// LeftBehind lists members that left the registry while the Database
	// was placed on them: the hub could not remove anything there, and says
	// what it left and where. An entry goes when the member is registered
	// and placed again, or with the Database.
	// +optional
	// +listType=map
	// +listMapKey=cluster
	// +kubebuilder:validation:MaxItems=64
	LeftBehind []LeftBehind `json:"leftBehind,omitempty"`

	// Topology is the observed topology of a PrimaryStandby Database.
	// +optional
	Topology *TopologyStatus `json:"topology,omitempty"`

	// FinalBackups has the final backup taken (or not) in each member while
	// the Database is deleted.
	// +optional
	// +listType=map
	// +listMapKey=cluster
	// +kubebuilder:validation:MaxItems=512
	FinalBackups []BackupRecord `json:"finalBackups,omitempty"`

	// Restore reports the restore of spec.restoreFrom in each member.
	// +optional
	// +listType=map
	// +listMapKey=cluster
	// +kubebuilder:validation:MaxItems=512
	Restore []BackupRecord `json:"restore,omitempty"`
}

// LeftBehind is what the hub left in a member it can no longer reach.
type LeftBehind struct {
	// Cluster is the MemberCluster name.
	Cluster string `json:"cluster"`
	// Message says what was left (workload, PersistentVolumeClaims, credentials Secret) and why.
	// +kubebuilder:validation:MaxLength=512
	Message string `json:"message"`
	// Since is when the hub noticed.
	Since metav1.Time `json:"since"`
}

// CredentialsStatus reports credential rotations. A rotation is requested by
// setting the fleetdb.io/rotate-credentials annotation to a new token.
type CredentialsStatus struct {
	// RotatingToken is the token of the rotation under way, if any, until
	// every member Secret holds its password.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	RotatingToken string `json:"rotatingToken,omitempty"`
	// RotatedToken is the token of the last rotation that completed: every
	// member's database and Secret, and the hub Secret, hold its password.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	RotatedToken string `json:"rotatedToken,omitempty"`
}

// ClusterStatus is what one member reports for a Database.
type ClusterStatus struct {
	// Name of the MemberCluster.
	Name string `json:"name"`
	// Phase of the Database in this member.
	Phase ClusterPhase `json:"phase"`
	// Backend the member runs the Database on.
	// +optional
	Backend Backend `json:"backend,omitempty"`
	// Role of the member in a PrimaryStandby topology.
	// +optional
	Role MemberRole `json:"role,omitempty"`
	// Reason is a machine-readable cause of a phase other than Ready, such
	// as BackendMissing, or Forbidden (the member's RBAC refused the hub; not
	// retried until the Database, the member's registration or, at a slow
	// pace, its RBAC changes).
	// +optional
	// +kubebuilder:validation:MaxLength=64
	Reason string `json:"reason,omitempty"`
	// Replicas the member's StatefulSet (or CloudNativePG Cluster) wants.
	// +optional
	Replicas int32 `json:"replicas"`
	// Primary is the instance CloudNativePG reports as the current primary.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	Primary string `json:"primary,omitempty"`
	// ReadyReplicas the member's StatefulSet (or CloudNativePG Cluster) reports.
	// +optional
	ReadyReplicas int32 `json:"readyReplicas"`
	// Version of the engine running there.
	// +optional
	Version string `json:"version,omitempty"`
	// ObservedGeneration is the hub generation this member runs.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// Endpoint is the in-cluster address of the client Service.
	// +optional
	Endpoint string `json:"endpoint,omitempty"`
	// LastSyncTime is when the hub last synced this member successfully.
	// +optional
	LastSyncTime *metav1.Time `json:"lastSyncTime,omitempty"`
	// Message explains a phase other than Ready; bounded in length.
	// +optional
	// +kubebuilder:validation:MaxLength=512
	Message string `json:"message,omitempty"`
}

// Database is a database that fleetdb runs on a set of member clusters.
//
// Setting the annotation fleetdb.io/rotate-credentials to a new token rotates
// the database password in every member (AnnotationRotateCredentials); the
// CredentialsRotated condition and status.credentials report the progress.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=fdb;fdbs,categories=fleetdb
// +kubebuilder:validation:XValidation:rule="self.metadata.name.matches('^[a-z]([-a-z0-9]*[a-z0-9])?$') && size(self.metadata.name) <= 40",message="metadata.name must be a DNS-1035 label of at most 40 characters (it names Services and StatefulSets in the members)"
// +kubebuilder:printcolumn:name="Engine",type=string,JSONPath=`.spec.engine`
// +kubebuilder:printcolumn:name="Backend",type=string,JSONPath=`.spec.backend`,priority=1
// +kubebuilder:printcolumn:name="Replicas",type=integer,JSONPath=`.spec.replicas`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.readySummary`
// +kubebuilder:printcolumn:name="Phase",type=string,JSONPath=`.status.phase`
// +kubebuilder:printcolumn:name="Primary",type=string,JSONPath=`.status.topology.primaryCluster`,priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type Database struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// +required
	Spec   DatabaseSpec   `json:"spec"`
	Status DatabaseStatus `json:"status,omitempty"`
}

// DatabaseList is a list of Databases.
//
// +kubebuilder:object:root=true
type DatabaseList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []Database `json:"items"`
}
