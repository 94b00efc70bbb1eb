package v1alpha1

import (
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// FinalBackupPolicy says whether the hub backs a Database up in each member
// before it deletes its data there.
// +kubebuilder:validation:Enum=Required;BestEffort;Skip
type FinalBackupPolicy string

// Final backup policies.
const (
	// FinalBackupRequired: a member is torn down only after its final
	// backup Job succeeded; a failed backup holds that member's teardown
	// (condition FinalBackup False, an Event) until it succeeds or the policy
	// is changed. The default when deletionPolicy is Delete.
	FinalBackupRequired FinalBackupPolicy = "Required"
	// FinalBackupBestEffort: the hub runs the backup, records a failure, and tears down anyway.
	FinalBackupBestEffort FinalBackupPolicy = "BestEffort"
	// FinalBackupSkip: no final backup (the default when deletionPolicy is
	// Retain or Orphan, which keep the data).
	FinalBackupSkip FinalBackupPolicy = "Skip"
)

// BackupSpec says where a Database's backups go in each member and whether
// it gets a final backup before deletion.
type BackupSpec struct {
	// FinalBackup is Required, BestEffort or Skip. When empty: Required if
	// spec.deletionPolicy is Delete, Skip otherwise (see
	// Database.EffectiveFinalBackup).
	// +optional
	FinalBackup FinalBackupPolicy `json:"finalBackup,omitempty"`

	// Volume is the PersistentVolumeClaim backups are written to in each
	// member (named <database>-backups). It is not owned by the Database and
	// outlives it: the hub never deletes it (a DatabaseBackup's finalizer
	// removes only its own files).
	// +optional
	Volume BackupVolumeSpec `json:"volume,omitempty"`

	// S3 additionally uploads every backup to an S3-compatible bucket.
	// +optional
	S3 *S3BackupSpec `json:"s3,omitempty"`
}

// BackupVolumeSpec is the backup volume claim in each member.
type BackupVolumeSpec struct {
	// Size of the claim; spec.storage.size when empty.
	// +optional
	// +kubebuilder:validation:XIntOrString
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:XValidation:rule="quantity(string(self)).isGreaterThan(quantity('0')) && quantity(string(self)).compareTo(quantity('64Ti')) <= 0",message="spec.backup.volume.size must be greater than 0 and at most 64Ti"
	Size *resource.Quantity `json:"size,omitempty"`
	// StorageClassName of the claim; the member's default class when empty.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$`
	StorageClassName string `json:"storageClassName,omitempty"`
}

// S3BackupSpec is an S3-compatible bucket backups are copied to.
type S3BackupSpec struct {
	// Endpoint URL of the S3 API, such as https://s3.eu-west-1.amazonaws.com.
	// +required
	// +kubebuilder:validation:MaxLength=512
	// +kubebuilder:validation:Pattern=`^https?://[^\s]+$`
	Endpoint string `json:"endpoint"`
	// Bucket name.
	// +required
	// +kubebuilder:validation:MinLength=3
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9][a-z0-9.-]*[a-z0-9]$`
	Bucket string `json:"bucket"`
	// Prefix of the object keys; <namespace>/<database>/ is appended.
	// +optional
	// +kubebuilder:validation:MaxLength=256
	// +kubebuilder:validation:Pattern=`^[-_./a-zA-Z0-9]*$`
	Prefix string `json:"prefix,omitempty"`
	// Region of the bucket.
	// +optional
	// +kubebuilder:validation:MaxLength=64
	Region string `json:"region,omitempty"`
	// CredentialsSecretName names a Secret in the Database's namespace on
	// the MEMBER (keys AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY) that the
	// platform team provides there; the hub never copies or reads it.
	// +required
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$`
	CredentialsSecretName string `json:"credentialsSecretName"`
}

// RestoreSource says which backup a new Database starts from.
type RestoreSource struct {
	// BackupName is a DatabaseBackup in the Database's namespace; each member
	// restores the backup that DatabaseBackup took in that member, or, for a
	// member it did not cover, the one taken in FromCluster.
	// +required
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$`
	BackupName string `json:"backupName"`
	// FromCluster picks the member whose backup every member restores; by
	// default each member restores its own.
	// +optional
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	FromCluster string `json:"fromCluster,omitempty"`
}

// BackupRecord is the result of one backup in one member.
type BackupRecord struct {
	// Cluster is the MemberCluster name.
	Cluster string `json:"cluster"`
	// Phase is Pending, Running, Succeeded, Failed or Skipped.
	// +kubebuilder:validation:Enum=Pending;Running;Succeeded;Failed;Skipped
	Phase string `json:"phase"`
	// BackupID names the backup (its directory on the member's backup
	// volume, under /backups/<namespace>/<database>/).
	// +optional
	// +kubebuilder:validation:MaxLength=63
	BackupID string `json:"backupID,omitempty"`
	// Location is where the backup is (the claim and path, and the S3 URL when copied there).
	// +optional
	// +kubebuilder:validation:MaxLength=1024
	Location string `json:"location,omitempty"`
	// SizeBytes of the backup when known.
	// +optional
	SizeBytes *int64 `json:"sizeBytes,omitempty"`
	// Started and Finished bound the backup Job.
	// +optional
	Started *metav1.Time `json:"started,omitempty"`
	// +optional
	Finished *metav1.Time `json:"finished,omitempty"`
	// Message explains a failure or a skip (never a credential).
	// +optional
	// +kubebuilder:validation:MaxLength=512
	Message string `json:"message,omitempty"`
}

// DatabaseBackupSpec asks for an on-demand backup of a Database.
type DatabaseBackupSpec struct {
	// DatabaseName is the Database (in the same namespace) to back up.
	// +required
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="spec.databaseName is immutable"
	// +kubebuilder:validation:MaxLength=40
	// +kubebuilder:validation:Pattern=`^[a-z]([-a-z0-9]*[a-z0-9])?$`
	DatabaseName string `json:"databaseName"`
	// ClusterNames limits the backup to these members; every member the
	// Database is placed on when empty.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="spec.clusterNames is immutable"
	// +kubebuilder:validation:items:MaxLength=63
	// +kubebuilder:validation:items:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	ClusterNames []string `json:"clusterNames,omitempty"`
	// DeletionPolicy says what deleting the DatabaseBackup does to its files
	// in the members: Delete (the default) removes them, Retain keeps them.
	// +optional
	// +kubebuilder:default=Delete
	// +kubebuilder:validation:Enum=Delete;Retain
	DeletionPolicy string `json:"deletionPolicy,omitempty"`
}

// DatabaseBackupStatus reports the backup in each member.
type DatabaseBackupStatus struct {
	// ObservedGeneration is the generation the hub acted on.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// Phase is Pending, Running, Succeeded (every member), PartiallyFailed or Failed.
	// +optional
	// +kubebuilder:validation:Enum=Pending;Running;Succeeded;PartiallyFailed;Failed
	Phase string `json:"phase,omitempty"`
	// Conditions: Ready (every member's backup succeeded), Stalled.
	// +optional
	// +listType=map
	// +listMapKey=type
	// +kubebuilder:validation:MaxItems=8
	Conditions []metav1.Condition `json:"conditions,omitempty"`
	// Clusters has one record per member.
	// +optional
	// +listType=map
	// +listMapKey=cluster
	// +kubebuilder:validation:MaxItems=512
	Clusters []BackupRecord `json:"clusters,omitempty"`
}

// DatabaseBackup is an on-demand backup of a Database, taken in each member
// as a Job and kept until the DatabaseBackup is deleted.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=fdbbackup,categories=fleetdb
// +kubebuilder:printcolumn:name="Database",type=string,JSONPath=`.spec.databaseName`
// +kubebuilder:printcolumn:name="Phase",type=string,JSONPath=`.status.phase`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type DatabaseBackup struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// +required
	Spec   DatabaseBackupSpec   `json:"spec"`
	Status DatabaseBackupStatus `json:"status,omitempty"`
}

// DatabaseBackupList is a list of DatabaseBackups.
//
// +kubebuilder:object:root=true
type DatabaseBackupList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []DatabaseBackup `json:"items"`
}

// Values of LabelBackupKind on member backup Jobs.
const (
	// BackupKindFinal: the backup taken before a member's data is deleted.
	BackupKindFinal = "final"
	// BackupKindOnDemand: a backup a DatabaseBackup asked for.
	BackupKindOnDemand = "on-demand"
)

// Phases of a BackupRecord.
const (
	BackupPhasePending   = "Pending"
	BackupPhaseRunning   = "Running"
	BackupPhaseSucceeded = "Succeeded"
	BackupPhaseFailed    = "Failed"
	BackupPhaseSkipped   = "Skipped"
)

// BackupPhasePartiallyFailed (a DatabaseBackup's status.phase, beside the
// record phases Pending, Running, Succeeded and Failed): some members'
// backups succeeded, others failed.
const BackupPhasePartiallyFailed = "PartiallyFailed"

// DatabaseBackup deletion policies (spec.deletionPolicy).
const (
	BackupDeletionDelete = "Delete"
	BackupDeletionRetain = "Retain"
)

// Finished reports a DatabaseBackup whose every member record is final: a
// finished DatabaseBackup is never acted on again (but for its deletion).
func (b *DatabaseBackup) Finished() bool {
	switch b.Status.Phase {
	case BackupPhaseSucceeded, BackupPhasePartiallyFailed, BackupPhaseFailed:
		return b.Status.ObservedGeneration == b.Generation
	}
	return false
}

// Record is the status record of cluster, nil when there is none.
func (b *DatabaseBackup) Record(cluster string) *BackupRecord {
	for i := range b.Status.Clusters {
		if b.Status.Clusters[i].Cluster == cluster {
			return &b.Status.Clusters[i]
		}
	}
	return nil
}
