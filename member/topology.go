package member

// This file is the contract between the hub's topology phase (which decides,
// per member, whom its CloudNativePG Cluster follows and when it is promoted)
// and the member renderer (which turns that into the Cluster's replica,
// externalClusters, bootstrap and certificates fields).

import (
	"encoding/base64"
	"encoding/json"
	"strconv"
)

// Topology is the PrimaryStandby wiring of one member's CloudNativePG
// Cluster, decided by the hub. Nil for an Independent Database.
type Topology struct {
	// Self is this member's name: its entry in externalClusters and
	// replica.self.
	Self string
	// Primary is the member this Cluster treats as the primary
	// (replica.primary): Self on the primary, the primary member on a
	// standby. Setting it to another member on the current primary demotes
	// it (CloudNativePG then publishes status.demotionToken).
	Primary string
	// PromotionToken is set only on the member being promoted in a planned
	// switchover, in the same write that sets Primary to Self
	// (replica.promotionToken). Empty for a forced promotion.
	PromotionToken string
	// SynchronousStandbys are the other members whose standbys a commit on
	// this member's primary waits for (any one of them), by member name;
	// empty for asynchronous commits. Rendered on every member (a standby
	// promoted by a switchover commits synchronously from its first
	// transaction); the hub leaves out members fenced by a forced failover.
	SynchronousStandbys []string
	// Peers are every placed member (Self included), by name, with the
	// address a standby in another member uses to reach its primary.
	Peers []Peer
	// Certificates are the PEM certificates (and this member's keys) the
	// Cluster uses for replication between the members, issued by the hub
	// from one CA per Database. The CA's private key is never here.
	Certificates TopologyCertificates
	// ReportRequest, when not empty, is rendered as the Cluster's
	// fleetdb.io/report-request annotation: the hub waits on a report
	// CloudNativePG publishes only when it reconciles the Cluster, and a new
	// value makes it reconcile (fleetv1alpha1.AnnotationReportRequest).
	ReportRequest string
}

// TopologyCertificates are the PEM data Render writes into the member's
// certificate Secrets (see TopologyCASecretName and the others).
type TopologyCertificates struct {
	// CACert is the Database's CA certificate: it signed every member's
	// server certificate and the replication client certificate.
	CACert []byte
	// ServerCert and ServerKey are this member's server certificate (for
	// its peer host and its in-cluster Service names) and private key.
	ServerCert, ServerKey []byte
	// ReplicationCert and ReplicationKey are the client certificate of the
	// streaming_replica user and its private key.
	ReplicationCert, ReplicationKey []byte
}

// Peer is one member of a PrimaryStandby topology as the others reach it.
type Peer struct {
	// Name is the MemberCluster name (the externalClusters entry name).
	Name string
	// Host and Port reach the member's primary from other members.
	Host string
	Port int32
}

// ReplicationStatus is what a member's CloudNativePG Cluster says about its
// place in a PrimaryStandby topology (read by the hub's topology phase).
type ReplicationStatus struct {
	// Primary is the Cluster's spec.replica.primary as the member has it.
	Primary string
	// DemotionToken is status.demotionToken (set once a demoted primary shut down cleanly).
	DemotionToken string
	// LastPromotionToken is status.lastPromotionToken (the token of the last promotion it completed).
	LastPromotionToken string
	// SwitchInProgress is status.switchReplicaClusterStatus.inProgress.
	SwitchInProgress bool
	// Healthy: phase "Cluster in healthy state", every instance ready, Ready not False.
	Healthy bool
	// CurrentPrimary is status.currentPrimary (the instance).
	CurrentPrimary string
	// RunsPrimary: an instance reports itself a primary (not in recovery):
	// status.instancesReportedState[*].isPrimary, which CloudNativePG fills
	// from every instance's pg_is_in_recovery() at each reconcile
	// (updateClusterStatusThatRequiresInstancesState in
	// internal/controller/cluster_status.go, GetStatus in
	// pkg/management/postgres/probes.go, v1.30.0). A designated primary of a
	// replica cluster is in recovery: false once a demotion finished.
	RunsPrimary bool
	// UnreadInstances are the Cluster's instances whose state CloudNativePG
	// could not read in its last report: an instance of
	// status.instanceNames (every instance that has a volume claim, so may
	// run PostgreSQL: EnrichStatus in pkg/reconciler/persistentvolumeclaim/
	// status.go, v1.30.0) without an entry in instancesReportedState (its
	// pod is not active: pending, being deleted, e.g. on a lost node, or
	// gone; only active pods are asked, GetStatusFromInstances in
	// pkg/management/postgres/webserver/client/remote/instance.go), or with
	// timeLineID 0 (the instance manager did not answer: CloudNativePG
	// records such an instance with isPrimary false and timeLineID 0,
	// updateClusterStatusThatRequiresInstancesState in
	// internal/controller/cluster_status.go; a readable instance always
	// reports a timeline of 1 or more). isPrimary false says nothing of
	// those: each may still run a primary, and CloudNativePG does not even
	// start demoting a Cluster none of whose instances it sees as primary
	// (containsPrimaryInstance in pkg/reconciler/replicaclusterswitch/
	// reconciler.go, v1.30.0).
	UnreadInstances []string
	// SystemID is status.systemID: the PostgreSQL system identifier every
	// reporting instance agrees on, "" when they do not or none reported
	// (same file, v1.30.0). A standby cloned with pg_basebackup has its
	// primary's.
	SystemID string
	// TimelineID is the timeline the Cluster's current (or designated)
	// primary instance reports, status.instancesReportedState[currentPrimary].timeLineID
	// (pg_control_checkpoint()'s timeline_id, fillStatusFromPrimary and
	// fillStatusFromReplica in pkg/management/postgres/probes.go, v1.30.0);
	// 0 when it has not reported. Not status.timelineID: CloudNativePG
	// updates that one only from an instance that is a primary, so on a
	// replica cluster it keeps the value from before a demotion.
	TimelineID int64
}

// NoPrimaryProven reports whether the Cluster's last report proves that
// none of its instances runs as a primary: every instance CloudNativePG
// knows of was read, and none is a primary. An instance it could not read
// leaves the question open (see UnreadInstances).
func (r ReplicationStatus) NoPrimaryProven() bool {
	return !r.RunsPrimary && len(r.UnreadInstances) == 0
}

// StreamsFrom reports whether the Cluster that reported r can be streaming
// from the one that reported primary: both report the same system
// identifier and the same timeline. CloudNativePG's Cluster status does not
// say whether the WAL receiver is connected (isWalReceiverActive is only in
// the instance status endpoint, pkg/postgres/status.go, v1.30.0): a standby
// on the primary's timeline whose receiver is down passes this check; one
// left on an older timeline (a former primary that diverged: CloudNativePG
// demotes without pg_rewind) or cloned from another system does not.
// A standby reports the timeline of its last restartpoint, so after a
// promotion it may report the older one for up to a checkpoint_timeout:
// a check that fails waits, it never acts.
func (r *ReplicationStatus) StreamsFrom(primary *ReplicationStatus) bool {
	if r == nil || primary == nil {
		return false
	}
	return r.SystemID != "" && r.SystemID == primary.SystemID && r.TimelineID != 0 && r.TimelineID == primary.TimelineID
}

// DemotionTokenCheckpoint reads the system identifier and the timeline of
// the shutdown checkpoint a CloudNativePG demotion token records: base64 of
// a JSON object with databaseSystemIdentifier and
// latestCheckpointTimelineID, the pg_controldata of the demoted primary
// once it shut down (PgControldataTokenContent and ParsePgControldataToken
// in pkg/utils/parser.go, generateDemotionToken in
// pkg/reconciler/replicaclusterswitch/shutdown_wal.go, v1.30.0). ok is
// false for anything else.
func DemotionTokenCheckpoint(token string) (systemID string, timeline int64, ok bool) {
	raw, err := base64.StdEncoding.DecodeString(token)
	if err != nil {
		return "", 0, false
	}
	var content struct {
		SystemID string `json:"databaseSystemIdentifier"`
		Timeline string `json:"latestCheckpointTimelineID"`
	}
	if err := json.Unmarshal(raw, &content); err != nil {
		return "", 0, false
	}
	tl, err := strconv.ParseInt(content.Timeline, 10, 64)
	if err != nil || tl <= 0 || content.SystemID == "" {
		return "", 0, false
	}
	return content.SystemID, tl, true
}
