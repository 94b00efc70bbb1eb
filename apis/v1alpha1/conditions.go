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

	// AnnotationGeneration records the hub generation that last wrote a member object.
	AnnotationGeneration = "fleetdb.io/generation"
	// AnnotationTraceparent records the W3C traceparent of the change that last wrote a member object.
	AnnotationTraceparent = "fleetdb.io/traceparent"
	// AnnotationConfigHash is set on a member StatefulSet's pod template to a hash
	// of the rendered engine configuration, so that a configuration change rolls
	// the pods (and nothing else does).
	AnnotationConfigHash = "fleetdb.io/config-hash"

	// AnnotationDeletionPolicy records the Database's deletionPolicy on member
	// objects, so leftovers collected after the hub object is gone honour it.
	AnnotationDeletionPolicy = "fleetdb.io/deletion-policy"

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
	// ConditionProgressing is True while members move to the current generation.
	ConditionProgressing = "Progressing"
	// ConditionReconciling mirrors Progressing under kstatus' name.
	ConditionReconciling = "Reconciling"
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
)

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
