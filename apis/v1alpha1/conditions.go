package v1alpha1

import "time"

// Finalizers, labels and annotations fleetdb puts on objects.
const (
	// TeardownFinalizer is added to a Database before anything is created in a
	// member and removed once every member object is gone (SPEC 4.5).
	TeardownFinalizer = "fleetdb.io/teardown"

	// LabelManagedBy is set to ManagedByValue on every member object fleetdb owns.
	LabelManagedBy = "app.kubernetes.io/managed-by"
	// ManagedByValue is the value of LabelManagedBy on fleetdb's objects.
	ManagedByValue = "fleetdb"
	// LabelDatabaseNamespace names the hub Database's namespace on member objects.
	LabelDatabaseNamespace = "fleetdb.io/database-namespace"
	// LabelDatabaseName names the hub Database on member objects.
	LabelDatabaseName = "fleetdb.io/database-name"
	// LabelDatabaseUID carries the hub Database's UID on member objects.
	LabelDatabaseUID = "fleetdb.io/database-uid"
	// LabelName is the app.kubernetes.io/name label (the engine).
	LabelName = "app.kubernetes.io/name"
	// LabelInstance is the app.kubernetes.io/instance label (the Database name).
	LabelInstance = "app.kubernetes.io/instance"

	// LabelHubID names, on every member object, the hub that wrote it (the
	// hub identity, see HubIdentityConfigMap). A hub never changes, tears
	// down or sweeps an object carrying another hub's identity.
	LabelHubID = "fleetdb.io/hub-id"
	// HubIdentityConfigMap is the ConfigMap in the hub namespace that keeps
	// the hub's identity (key HubIdentityKey), generated once at first start.
	HubIdentityConfigMap = "fleetdb-hub-identity"
	// HubIdentityKey is the key of the identity in HubIdentityConfigMap.
	HubIdentityKey = "id"
	// TombstonesConfigMap is the ConfigMap in the hub namespace where the hub
	// records, before releasing a Database, the members whose teardown it
	// skipped and the policy to collect them with on reconnect.
	TombstonesConfigMap = "fleetdb-hub-tombstones"
	// JobsConfigMap is the ConfigMap in the hub namespace where the hub
	// records, before creating it, each Job it runs in a member (its name
	// and pod): the Jobs it trusts after a spec change and the only ones it
	// deletes.
	JobsConfigMap = "fleetdb-hub-jobs"

	// AnnotationGeneration records the hub generation that last wrote a member object.
	AnnotationGeneration = "fleetdb.io/generation"
	// AnnotationReportRequest is set on a member's CloudNativePG Cluster
	// while the hub waits on a report of it that CloudNativePG publishes only
	// when it reconciles the Cluster (an instance's timeline after a
	// restartpoint, an instance it could not read): a changed value is a
	// Cluster update, which makes the operator reconcile it (see
	// docs/cloudnativepg.md). The value means nothing beyond changing.
	AnnotationReportRequest = "fleetdb.io/report-request"
	// AnnotationTraceparent records the W3C traceparent of the change that last wrote a member object.
	AnnotationTraceparent = "fleetdb.io/traceparent"
	// AnnotationAppliedHash records, on every member object fleetdb applies,
	// the hash of the rendered object it applied (traceparent left out): a
	// restarted hub that renders the same hash, and finds the object holding
	// what it would apply, sends nothing for it.
	AnnotationAppliedHash = "fleetdb.io/applied-hash"
	// AnnotationConfigHash is set on a member StatefulSet's pod template to a hash
	// of the rendered engine configuration, so that a configuration change rolls
	// the pods (and nothing else does).
	AnnotationConfigHash = "fleetdb.io/config-hash"

	// AnnotationDeletionPolicy records the Database's deletionPolicy on member
	// objects, for people reading them. The hub never acts on it: the
	// reconnect sweep uses the policy it recorded itself (TombstonesConfigMap).
	AnnotationDeletionPolicy = "fleetdb.io/deletion-policy"
	// AnnotationReleasedUID records, on a member object a teardown released
	// (fleetdb's labels stripped), the Database UID it was labelled with:
	// what AnnotationAdoptCredentials is matched against.
	AnnotationReleasedUID = "fleetdb.io/released-database-uid"
	// AnnotationAdoptCredentials on a Database names the UID of an earlier
	// Database of the same namespace/name whose credentials (and so its
	// data) it is to take over when the hub has no record of that one's
	// Retain teardown: a hub rebuilt from Git or a backup, a record evicted.
	// Only a member copy labelled with that UID (or released from it), in a
	// member the Database is placed on, is taken. It also lets the
	// Database's new workload start on volume claims of that UID
	// (ReasonRetainedDataFound).
	AnnotationAdoptCredentials = "fleetdb.io/adopt-credentials-of"

	// AnnotationBackend is the hub's record, on the Database, of the backend
	// its members run: written together with the teardown finalizer at the
	// first placement, so that a later default never moves a running
	// Database to another backend (see EffectiveBackend).
	AnnotationBackend = "fleetdb.io/backend"
	// AnnotationClusterID on a MemberCluster is the uid of the member's
	// kube-system Namespace, recorded by `kubectl fleetdb join`: join refuses
	// to register a cluster a second time under another name (two
	// registrations of one cluster would write its objects twice, and a
	// placement removal under one could delete volumes the other still uses).
	AnnotationClusterID = "fleetdb.io/cluster-id"
	// AnnotationRotateCredentials on a Database requests a credential
	// rotation: set it to a new value (any token up to 253 characters, e.g. a
	// date) and the hub rotates the database password in every member; the
	// token is reported in status.credentials.rotatedToken once done. An
	// unchanged value does nothing; a rotation that started always finishes.
	AnnotationRotateCredentials = "fleetdb.io/rotate-credentials"
	// LabelRotation names, on a member rotation Job, a hash of the rotation token it runs.
	LabelRotation = "fleetdb.io/rotation"
	// AnnotationRotationAttempt numbers the attempts of a member rotation Job (1, 2, ...).
	AnnotationRotationAttempt = "fleetdb.io/rotation-attempt"

	// LabelComponent is app.kubernetes.io/component; ComponentBackup marks
	// the backup volume claims and backup Jobs fleetdb writes in members.
	LabelComponent = "app.kubernetes.io/component"
	// ComponentBackup is the LabelComponent value of backup objects.
	ComponentBackup = "backup"
	// LabelBackupOfNamespace and LabelBackupOfName name, on a member backup
	// volume claim and backup Job, the hub Database backed up. They are not
	// LabelDatabaseNamespace / LabelDatabaseName on purpose: nothing that
	// finds a Database's member objects (teardown, prune, the reconnect
	// sweep) ever finds the backups, so no teardown deletes them.
	LabelBackupOfNamespace = "fleetdb.io/backup-of-namespace"
	// LabelBackupOfName: see LabelBackupOfNamespace.
	LabelBackupOfName = "fleetdb.io/backup-of-name"
	// LabelBackupVolume ("true") marks a backup volume claim; the member's
	// admission policy (deploy/member) refuses the hub's identity deleting
	// a claim that carries it.
	LabelBackupVolume = "fleetdb.io/backup-volume"
	// LabelBackupID names, on a backup Job, the backup it takes (the
	// directory under /backups/<namespace>/<database>/ on the volume).
	LabelBackupID = "fleetdb.io/backup-id"
	// LabelBackupKind is BackupKindFinal or BackupKindOnDemand on a backup Job.
	LabelBackupKind = "fleetdb.io/backup-kind"
	// AnnotationBackupAttempt numbers the attempts of a member backup Job (1, 2, ...).
	AnnotationBackupAttempt = "fleetdb.io/backup-attempt"
	// LabelTestFailBackup is TEST-ONLY: a Database carrying it ("true")
	// gets it on the pods of its backup Jobs, where the local fleet's kwok
	// Stage (hack/kwok) fails them. Real kubelets ignore it: it cannot make
	// a real backup fail or succeed.
	LabelTestFailBackup = "fleetdb.io/test-fail-backup"

	// BackupFinalizer is added to a DatabaseBackup before its first Job is
	// created and removed once its files are removed from every member
	// (deletionPolicy Delete), or left there (Retain), or the members that
	// stayed unreachable were given up on.
	BackupFinalizer = "fleetdb.io/backup-cleanup"
	// LabelRestore names, on a member restore Job, a hash of the restoring
	// Database's UID.
	LabelRestore = "fleetdb.io/restore"
	// AnnotationRestoreAttempt numbers the attempts of a member restore Job (1, 2, ...).
	AnnotationRestoreAttempt = "fleetdb.io/restore-attempt"
	// AnnotationRestored on a member's credentials Secret records that the
	// member restored spec.restoreFrom (value: the DatabaseBackup's name and
	// the member whose backup it restored). A member that carries it never
	// runs a restore again: its database may have taken traffic.
	AnnotationRestored = "fleetdb.io/restored"

	// FieldManager is the server-side apply field manager of every fleetdb write.
	FieldManager = "fleetdb"
)

// Database condition types (SPEC 3.3). All are kstatus compatible: Ready is
// the summary; Reconciling and Stalled are kstatus' abnormal-true types.
const (
	// ConditionReady is True when every placed member runs the current
	// generation with all replicas ready.
	ConditionReady = "Ready"
	// ConditionPlaced is True when placement selected at least one member.
	ConditionPlaced = "Placed"
	// ConditionReconciling is True while members move to the current
	// generation or are being removed (kstatus' in-progress condition); it is
	// absent otherwise, and False beside Stalled.
	ConditionReconciling = "Reconciling"
	// ConditionProgressing is no longer set (it repeated Reconciling): fleetdb
	// removes it from the status of Databases written by earlier versions.
	ConditionProgressing = "Progressing"
	// ConditionDegraded is True when a member failed, conflicted or is unreachable; the message names which.
	ConditionDegraded = "Degraded"
	// ConditionStalled is True on a terminal error that retrying cannot fix.
	ConditionStalled = "Stalled"
	// ConditionDeleting is True while the Database is being torn down.
	ConditionDeleting = "Deleting"
	// ConditionCredentialsRotated reports the credential rotation requested
	// with AnnotationRotateCredentials: True once the last requested token is
	// rotated everywhere, False while one runs or fails. Absent until a
	// rotation is first requested.
	ConditionCredentialsRotated = "CredentialsRotated"
	// ConditionTopologyStable (PrimaryStandby only) is True when the primary
	// is spec.topology.primaryCluster and every reachable standby follows
	// it; False while a switchover or forced promotion runs (reason
	// SwitchingOver / FailingOver), when it stopped (SwitchoverStepTimedOut,
	// TargetUnhealthy) or when the primary is lost (PrimaryUnreachable).
	// `kubectl wait --for=condition=TopologyStable` waits for a switchover.
	ConditionTopologyStable = "TopologyStable"
	// ConditionFinalBackup (while Deleting, when a final backup applies) is
	// True once every member's final backup succeeded or was skipped by
	// policy, False while one runs or when a Required backup failed (reason
	// FinalBackupFailed: that member's teardown waits).
	ConditionFinalBackup = "FinalBackup"
	// ConditionRestored (with spec.restoreFrom) is True once every member
	// restored the backup, False while a restore runs or failed.
	ConditionRestored = "Restored"
)

// MemberCluster condition types.
const (
	// MemberConditionJoined is True once the hub built a working client from the kubeconfig.
	MemberConditionJoined = "Joined"
	// MemberConditionReady is True while the member's /readyz probe passes.
	MemberConditionReady = "Ready"
)

// Condition reasons.
const (
	// ReasonReady: every placed member is ready on the current generation.
	ReasonReady = "Ready"
	// ReasonProgressing: members are still moving to the current generation.
	ReasonProgressing = "Progressing"
	// ReasonRollingOut: a spec change is being rolled out a few members at a time.
	ReasonRollingOut = "RollingOut"
	// ReasonPlaced: placement selected members.
	ReasonPlaced = "Placed"
	// ReasonPrimaryHeld (Placed True): a member left the placement (no
	// longer named or selected, over maxClusters, its tenancy changed) but
	// holds the primary of a PrimaryStandby Database, or an end of a
	// switchover under way: it stays placed, nothing is torn down there,
	// until the primary is switched over to another member.
	ReasonPrimaryHeld = "PrimaryHeld"
	// ReasonNoMatchingClusters: placement selected no member.
	ReasonNoMatchingClusters = "NoMatchingClusters"
	// ReasonMembersDegraded: at least one member is unreachable, conflicted or failed.
	ReasonMembersDegraded = "MembersDegraded"
	// ReasonAsExpected: the condition holds no problem.
	ReasonAsExpected = "AsExpected"
	// ReasonProtectedNamespace: the Database lives in a namespace fleetdb refuses to manage.
	ReasonProtectedNamespace = "ProtectedNamespace"
	// ReasonInvalidSpec: the spec cannot be acted on (something the CRD could not check).
	ReasonInvalidSpec = "InvalidSpec"
	// ReasonTeardown: member objects are being removed.
	ReasonTeardown = "Teardown"
	// ReasonWaitingForUnreachable: teardown waits for an unreachable member.
	ReasonWaitingForUnreachable = "WaitingForUnreachableMember"
	// ReasonWaitingForCredentials: the hub credentials Secret is missing and a
	// member that may hold the password cannot be read now; the hub waits
	// for it instead of generating a new password.
	ReasonWaitingForCredentials = "WaitingForCredentials"
	// ReasonCredentialsLost: the hub credentials Secret of a Database that
	// ran is missing and no member holds a copy; it must be restored.
	ReasonCredentialsLost = "CredentialsLost"
	// ReasonNamespaceNotAllowed: the placement names a member whose
	// spec.namespaceSelector does not admit the Database's namespace.
	ReasonNamespaceNotAllowed = "NamespaceNotAllowed"
	// ReasonForbidden (on a status.clusters entry): the member's RBAC refused
	// the hub's request; terminal for that member until the Database or its
	// registration changes (and rechecked at a slow pace for RBAC changes).
	ReasonForbidden = "Forbidden"
	// ReasonRetainedDataFound (on a status.clusters entry, phase Conflict):
	// the member holds volume claims the Database's new workload would start
	// on (a StatefulSet's data-<name>-<n>, CloudNativePG's orphan claims of
	// the Cluster's name) that belong to another Database UID or name none,
	// and no Retain record of this hub for this Database vouches for them,
	// nor AnnotationAdoptCredentials names their UID. The workload is not
	// created and the claims are never touched; the message names them.
	ReasonRetainedDataFound = "RetainedDataFound"
	// ReasonMemberRemoved (Event): a member left the registry while the
	// Database was placed on it; its objects were left in place.
	ReasonMemberRemoved = "MemberRemoved"

	// ReasonBackendMissing: a member does not offer the Database's backend
	// (e.g. CloudNativePG's CRDs are not installed there); terminal for that
	// member until the member offers it (the hub's probes notice) or the
	// Database changes.
	ReasonBackendMissing = "BackendMissing"
	// ReasonBackendChanged: spec.backend, or a fleetdb.io/backend annotation
	// changed after the first placement, names another backend than the one
	// the members run; fleetdb does not move data between backends and keeps
	// running the recorded one.
	ReasonBackendChanged = "BackendChanged"
	// ReasonBackendUnknown: the hub cannot tell which backend the members run
	// a Database that was placed on (the fleetdb.io/backend annotation was
	// removed and the status names none): it writes to no member, reads the
	// members until one shows what it runs, and records that; it never
	// guesses. The message says what it waits for.
	ReasonBackendUnknown = "BackendUnknown"

	// ReasonRotating: a credential rotation is under way; the message says
	// which members switched and which still run or wait.
	ReasonRotating = "Rotating"
	// ReasonRotationFailed: a member's rotation Job failed; it is retried with
	// backoff and every Secret keeps the password its database accepts.
	ReasonRotationFailed = "RotationFailed"
	// ReasonRotated: the requested rotation completed on every member.
	ReasonRotated = "Rotated"
	// ReasonInvalidRotationToken: the rotate-credentials annotation is too long.
	ReasonInvalidRotationToken = "InvalidRotationToken"

	// ReasonJoined: the hub built a client for the member.
	ReasonJoined = "Joined"
	// ReasonConnecting: the hub is connecting to the member for the first time
	// with its current kubeconfig; Joined and Ready are Unknown meanwhile.
	ReasonConnecting = "Connecting"
	// ReasonProbeSucceeded: the member's /readyz answered ok.
	ReasonProbeSucceeded = "ProbeSucceeded"
	// ReasonSecretNotFound: the kubeconfig Secret or its key is missing.
	ReasonSecretNotFound = "KubeconfigSecretNotFound"
	// ReasonSecretUnreadable: the hub could not read the kubeconfig Secret
	// of a member it had not connected to yet (a hub API error); retried.
	ReasonSecretUnreadable = "KubeconfigSecretUnreadable"
	// ReasonInvalidKubeconfig: the kubeconfig cannot be parsed.
	ReasonInvalidKubeconfig = "InvalidKubeconfig"
	// ReasonUnauthorized: the member rejected the credentials (401/403).
	ReasonUnauthorized = "Unauthorized"
	// ReasonUnreachable: the member's API server did not answer.
	ReasonUnreachable = "Unreachable"
	// ReasonTLSError: the TLS handshake with the member failed.
	ReasonTLSError = "TLSError"
	// ReasonNotReady: the member answered /readyz with an error.
	ReasonNotReady = "NotReady"
	// ReasonSecretNamespaceNotAllowed: kubeconfigSecretRef names a Secret
	// outside the hub's namespace; the hub does not read it.
	ReasonSecretNamespaceNotAllowed = "SecretNamespaceNotAllowed"
	// ReasonInsecureKubeconfig: the kubeconfig skips TLS verification, uses a
	// proxy or a server that is not https, and the MemberCluster's
	// spec.connection does not allow it.
	ReasonInsecureKubeconfig = "InsecureKubeconfig"

	// ReasonFinalBackupRunning: the final backup Jobs run; the members
	// wait for them before they are torn down.
	ReasonFinalBackupRunning = "FinalBackupRunning"
	// ReasonFinalBackupFailed: a member's Required final backup failed;
	// nothing is deleted there until a retry succeeds or
	// spec.backup.finalBackup is set to BestEffort or Skip.
	ReasonFinalBackupFailed = "FinalBackupFailed"
	// ReasonFinalBackupNoWorkload: a member's Required final backup cannot
	// be taken: the Database's workload (StatefulSet or CloudNativePG
	// Cluster) is gone there but its data volume claims are not; nothing is
	// deleted there until the workload is back (the backup then runs) or
	// spec.backup.finalBackup is set to BestEffort or Skip.
	ReasonFinalBackupNoWorkload = "FinalBackupNoWorkload"
	// ReasonFinalBackupsTaken: every member's final backup succeeded or was
	// skipped (BestEffort failures and unreachable members are in
	// status.finalBackups).
	ReasonFinalBackupsTaken = "FinalBackupsTaken"
	// ReasonPrimaryNotPlaced (Stalled): spec.topology.primaryCluster is not
	// one of the members the placement selects.
	ReasonPrimaryNotPlaced = "PrimaryNotPlaced"
	// ReasonWaitingForReplicationEndpoint: a PrimaryStandby Database is
	// placed on a member whose MemberCluster has no spec.replication (the
	// other members could not reach it); it waits until one is set.
	ReasonWaitingForReplicationEndpoint = "WaitingForReplicationEndpoint"
	// ReasonTopologyCertificates (Stalled): the hub Secret that keeps a
	// PrimaryStandby Database's certificates exists and is not the
	// Database's, or holds a CA the hub cannot read.
	ReasonTopologyCertificates = "TopologyCertificates"
	// ReasonInstanceCertificates (Stalled): the hub Secret that keeps a
	// StatefulSet-backend postgres Database's instance certificates
	// ("<name>-instance-pki") exists and is not the Database's, or holds a
	// CA the hub cannot read.
	ReasonInstanceCertificates = "InstanceCertificates"
	// ReasonTopologyStable (TopologyStable True): the primary is
	// status.topology.primaryCluster, healthy, and every reachable standby
	// follows it.
	ReasonTopologyStable = "Stable"
	// ReasonSwitchingOver: a switchover runs (status.topology.switchover.step says where).
	ReasonSwitchingOver = "SwitchingOver"
	// ReasonFailingOver: a forced promotion (spec.topology.failover) runs.
	ReasonFailingOver = "FailingOver"
	// ReasonPrimaryUnreachable: the primary member cannot be reached; the hub
	// does not fail over on its own (see spec.topology.failover).
	ReasonPrimaryUnreachable = "PrimaryUnreachable"
	// ReasonPrimaryNotReady: the primary member's Cluster does not report
	// itself primary and healthy (yet).
	ReasonPrimaryNotReady = "PrimaryNotReady"
	// ReasonStandbyNotFollowing: a reachable standby's Cluster does not
	// follow the primary (yet).
	ReasonStandbyNotFollowing = "StandbyNotFollowing"
	// ReasonCommitsWaiting: durability Synchronous and no standby in another
	// member that the primary's commits may wait for is reachable and
	// healthy: commits on the primary wait (they finish when one streams
	// again).
	ReasonCommitsWaiting = "CommitsWaiting"
	// ReasonSwitchoverStepTimedOut: a switchover step did not finish within
	// spec.topology.stepTimeout; the hub changes nothing more (see
	// docs/topology.md: abort by setting primaryCluster back before the promotion).
	ReasonSwitchoverStepTimedOut = "SwitchoverStepTimedOut"
	// ReasonTargetUnhealthy: the switchover target was not a healthy standby
	// of the primary streaming from it (same system identifier and timeline)
	// within spec.topology.stepTimeout; nothing was changed.
	ReasonTargetUnhealthy = "TargetUnhealthy"
	// ReasonFenced: an old primary replaced by a forced promotion has not yet
	// come back as a healthy standby of the new primary that streams from it
	// (same system identifier and timeline); the message names it and what
	// to do when it cannot.
	ReasonFenced = "Fenced"
	// ReasonSwitchoverRefused: a switchover or forced promotion was stopped
	// before anything was promoted because the hub replica that runs the
	// Database (the leader, --sharding) does not own every member it
	// involves; nothing more is changed.
	ReasonSwitchoverRefused = "SwitchoverRefused"
	// ReasonAbortWaitingForDemotion: spec.topology.primaryCluster was set
	// back to the old primary while CloudNativePG was still demoting it
	// (its Cluster's status.switchReplicaClusterStatus.inProgress):
	// CloudNativePG's webhook refuses changing its role back until the
	// demotion finished, so the abort is taken once it reports it did.
	ReasonAbortWaitingForDemotion = "AbortWaitingForDemotion"
	// ReasonSwitchoverAborted (Event): spec.topology.primaryCluster was set
	// back before the promotion; the old primary stays primary.
	ReasonSwitchoverAborted = "SwitchoverAborted"
	// ReasonSwitchoverSucceeded (Event): a switchover or forced promotion finished.
	ReasonSwitchoverSucceeded = "SwitchoverSucceeded"
	// ReasonSwitchoverStarted (Event): a switchover or forced promotion began.
	ReasonSwitchoverStarted = "SwitchoverStarted"

	// DatabaseBackup reasons (conditions Ready and Stalled).

	// ReasonBackupSucceeded: every member's backup succeeded.
	ReasonBackupSucceeded = "BackupSucceeded"
	// ReasonBackupRunning: backups are pending or running in members.
	ReasonBackupRunning = "BackupRunning"
	// ReasonBackupFailed: every member's backup failed (or none could run).
	ReasonBackupFailed = "BackupFailed"
	// ReasonBackupPartiallyFailed: some members' backups failed, others succeeded.
	ReasonBackupPartiallyFailed = "PartiallyFailed"
	// ReasonDatabaseNotFound: the DatabaseBackup names a Database that does
	// not exist; it waits for one to be created.
	ReasonDatabaseNotFound = "DatabaseNotFound"
	// ReasonDatabaseDeleting: the Database was being deleted before the
	// backup could run in a member.
	ReasonDatabaseDeleting = "DatabaseDeleting"
	// ReasonNoMembers: none of the members to back up is placed.
	ReasonNoMembers = "NoMembers"
	// ReasonShardedHub: the hub runs with --sharding, which does not take
	// DatabaseBackups (docs/sharding.md); a hub without it takes the backup
	// up from where it stands.
	ReasonShardedHub = "ShardedHub"

	// Restore reasons (spec.restoreFrom; condition Restored and the
	// reason of a member's status.clusters entry).

	// ReasonRestoring: a member's restore Job runs (or waits for the
	// workload); the member's client Service is withheld meanwhile.
	ReasonRestoring = "Restoring"
	// ReasonRestoreFailed: a member's restore Job failed; it is retried with
	// backoff, and the member stays Provisioning without its client Service.
	ReasonRestoreFailed = "RestoreFailed"
	// ReasonWaitingForBackup: the DatabaseBackup named in spec.restoreFrom
	// does not exist or has not succeeded in the member yet.
	ReasonWaitingForBackup = "WaitingForBackup"
	// ReasonBackupUnusable: the DatabaseBackup failed, or holds no
	// successful backup for a member (or spec.restoreFrom.fromCluster names
	// another member: a backup on a member's volume cannot be read in
	// another member); terminal until the Database is recreated.
	ReasonBackupUnusable = "BackupUnusable"
	// ReasonRestored: every member restored the backup.
	ReasonRestored = "Restored"

	// ReasonDeletionProtected: the Database is being deleted while
	// spec.deletionProtection is true; the hub tears nothing down until it is
	// set to false.
	ReasonDeletionProtected = "DeletionProtected"
)

// LabelManagedNamespace marks the member namespaces fleetdb created (value
// ManagedByValue). The member's ValidatingAdmissionPolicy
// (deploy/member) lets the hub's identity write only in namespaces that carry
// it, and create a namespace only with it.
const LabelManagedNamespace = "fleetdb.io/managed-namespace"

// Database phases.
const (
	PhasePending      Phase = "Pending"
	PhaseProvisioning Phase = "Provisioning"
	PhaseReady        Phase = "Ready"
	PhaseDegraded     Phase = "Degraded"
	PhaseDeleting     Phase = "Deleting"
	PhaseFailed       Phase = "Failed"
)

// Per-member phases.
const (
	ClusterPhasePending      ClusterPhase = "Pending"
	ClusterPhaseProvisioning ClusterPhase = "Provisioning"
	ClusterPhaseReady        ClusterPhase = "Ready"
	ClusterPhaseDegraded     ClusterPhase = "Degraded"
	ClusterPhaseUnreachable  ClusterPhase = "Unreachable"
	ClusterPhaseConflict     ClusterPhase = "Conflict"
	ClusterPhaseDeleting     ClusterPhase = "Deleting"
)

// Engine defaults.
const (
	// DefaultPostgresVersion is used when spec.version is empty for postgres.
	DefaultPostgresVersion = "17"
	// DefaultMySQLVersion is used when spec.version is empty for mysql.
	DefaultMySQLVersion = "8.4"
)

// DefaultUnreachableTimeout is spec.teardown.unreachableTimeout when unset
// (the CRD defaults it too; Go clients that send the struct get it here).
const DefaultUnreachableTimeout = 10 * time.Minute

// EffectiveUnreachableTimeout is spec.teardown.unreachableTimeout, or its default.
func (d *Database) EffectiveUnreachableTimeout() time.Duration {
	if t := d.Spec.Teardown.UnreachableTimeout; t != nil {
		return t.Duration
	}
	return DefaultUnreachableTimeout
}

// EffectiveBackend is the backend the members run: KnownBackend's, or,
// when that is unknown, StatefulSet (what a Database placed before backends
// existed runs). The hub writes to no member of a Database whose backend is
// unknown: it first reads what the members run and records it (a removed
// annotation must not move a CloudNativePG Database to an empty StatefulSet).
func (d *Database) EffectiveBackend() Backend {
	if b, ok := d.KnownBackend(); ok {
		return b
	}
	return BackendStatefulSet
}

// KnownBackend is the backend the members run, as far as the Database
// itself tells:
//
//   - the one the hub recorded in AnnotationBackend at the first placement;
//   - else (the annotation was removed by hand) the one the members report
//     in status.clusters;
//   - else, for a Database not placed yet (no teardown finalizer),
//     DesiredBackend (the first placement records it).
//
// ok is false for a Database that was placed (it carries the teardown
// finalizer) but tells neither: its annotation was removed while the status
// names no backend (written while the members were unreachable), or it was
// placed by a fleetdb that had only the StatefulSet backend. Only its
// members can tell then.
//
// The record is immutable once the members run it: an annotation changed
// afterwards to another backend than the one the members report in
// status.clusters is not followed (that would start an empty database on
// the other backend behind the client Service); the members' backend is,
// and BackendAnnotationChanged says so (issue 42, item 4b).
func (d *Database) KnownBackend() (b Backend, ok bool) {
	if reported := d.reportedBackend(); reported != "" {
		return reported, true
	}
	switch b := Backend(d.Annotations[AnnotationBackend]); b {
	case BackendCloudNativePG, BackendStatefulSet:
		return b, true
	}
	for _, f := range d.Finalizers {
		if f == TeardownFinalizer {
			return "", false
		}
	}
	return d.DesiredBackend(), true
}

// reportedBackend is the backend the members report running the Database
// on in status.clusters, "" when none names one. Should they disagree (never
// written by one hub), the recorded annotation settles it when it names one
// of theirs, else the first member's.
func (d *Database) reportedBackend() Backend {
	var first Backend
	recorded := Backend(d.Annotations[AnnotationBackend])
	for _, c := range d.Status.Clusters {
		if c.Backend != BackendCloudNativePG && c.Backend != BackendStatefulSet {
			continue
		}
		if c.Backend == recorded {
			return recorded
		}
		if first == "" {
			first = c.Backend
		}
	}
	return first
}

// BackendAnnotationChanged is the backend the fleetdb.io/backend annotation
// names when it is not the one the members report running (status.clusters):
// the annotation was changed after the first placement. "" when it agrees,
// is absent, or no member reports a backend.
func (d *Database) BackendAnnotationChanged() Backend {
	annotated := Backend(d.Annotations[AnnotationBackend])
	reported := d.reportedBackend()
	if annotated == "" || reported == "" || annotated == reported {
		return ""
	}
	return annotated
}

// DesiredBackend is spec.backend, or the engine's default: CloudNativePG for
// postgres, StatefulSet for mysql.
func (d *Database) DesiredBackend() Backend {
	if d.Spec.Backend != "" {
		return d.Spec.Backend
	}
	if d.Spec.Engine == EngineMySQL {
		return BackendStatefulSet
	}
	return BackendCloudNativePG
}

// EffectiveVersion is the engine version a Database runs: spec.version, or the engine's default.
func (d *Database) EffectiveVersion() string {
	if d.Spec.Version != "" {
		return d.Spec.Version
	}
	if d.Spec.Engine == EngineMySQL {
		return DefaultMySQLVersion
	}
	return DefaultPostgresVersion
}

// PlacementRemovalDeletionPolicy is the teardown policy for a member dropped
// from a live Database's placement: spec.teardown.onPlacementRemoval as a
// DeletionPolicy, Retain when unset.
func (d *Database) PlacementRemovalDeletionPolicy() DeletionPolicy {
	if d.Spec.Teardown.OnPlacementRemoval == PlacementRemovalDelete {
		return DeletionPolicyDelete
	}
	return DeletionPolicyRetain
}

// TeardownPolicy is the policy a member's teardown uses now: the deletion
// policy for a Database being deleted (Delete when unset), else
// spec.teardown.onPlacementRemoval (PlacementRemovalDeletionPolicy).
func (d *Database) TeardownPolicy() DeletionPolicy {
	if d.DeletionTimestamp.IsZero() {
		return d.PlacementRemovalDeletionPolicy()
	}
	if d.Spec.DeletionPolicy == "" {
		return DeletionPolicyDelete
	}
	return d.Spec.DeletionPolicy
}

// EffectiveFinalBackup is spec.backup.finalBackup, or its default: Required
// when spec.deletionPolicy is Delete (the data is about to go), Skip when the
// policy keeps the data (Retain, Orphan).
func (d *Database) EffectiveFinalBackup() FinalBackupPolicy {
	if d.Spec.Backup != nil && d.Spec.Backup.FinalBackup != "" {
		return d.Spec.Backup.FinalBackup
	}
	if d.Spec.DeletionPolicy == DeletionPolicyRetain || d.Spec.DeletionPolicy == DeletionPolicyOrphan {
		return FinalBackupSkip
	}
	return FinalBackupRequired
}

// TopologyMode is spec.topology.mode, Independent when unset.
func (d *Database) TopologyMode() TopologyMode {
	if d.Spec.Topology == nil || d.Spec.Topology.Mode == "" {
		return TopologyIndependent
	}
	return d.Spec.Topology.Mode
}

// TopologyDurability is spec.topology.durability, Synchronous when unset.
func (d *Database) TopologyDurability() TopologyDurability {
	if d.Spec.Topology == nil || d.Spec.Topology.Durability == "" {
		return DurabilitySynchronous
	}
	return d.Spec.Topology.Durability
}

// DefaultSwitchoverStepTimeout is spec.topology.stepTimeout when unset.
const DefaultSwitchoverStepTimeout = 5 * time.Minute

// DefaultLinkTimeout is spec.topology.link.timeout when unset.
const DefaultLinkTimeout = 30 * time.Second

// EffectiveLinkTimeout is the replication connection's timeout between the
// members of a PrimaryStandby Database (spec.topology.link.timeout).
func (d *Database) EffectiveLinkTimeout() time.Duration {
	if t := d.Spec.Topology; t != nil && t.Link != nil && t.Link.Timeout != nil {
		return t.Link.Timeout.Duration
	}
	return DefaultLinkTimeout
}

// EffectiveWALKeepSize is the WAL every member of a PrimaryStandby Database
// keeps for a standby that fell behind, in bytes
// (spec.topology.link.walKeepSize; unset: a quarter of spec.storage.size,
// between 512Mi and 4Gi).
func (d *Database) EffectiveWALKeepSize() int64 {
	if t := d.Spec.Topology; t != nil && t.Link != nil && t.Link.WALKeepSize != nil {
		return t.Link.WALKeepSize.Value()
	}
	return min(max(d.Spec.Storage.Size.Value()/4, 512<<20), 4<<30)
}

// EffectiveStepTimeout is spec.topology.stepTimeout, or its default.
func (d *Database) EffectiveStepTimeout() time.Duration {
	if d.Spec.Topology != nil && d.Spec.Topology.StepTimeout != nil {
		return d.Spec.Topology.StepTimeout.Duration
	}
	return DefaultSwitchoverStepTimeout
}
