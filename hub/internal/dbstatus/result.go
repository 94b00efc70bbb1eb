package dbstatus

import (
	"time"

	apiequality "k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/types"

	fleetv1alpha1 "github.com/fleetdb/fleetdb/apis/v1alpha1"
	"github.com/fleetdb/fleetdb/internal/statusmsg"
	"github.com/fleetdb/fleetdb/member"
)

// Result is what the last member sync observed for one Database in one member.
type Result struct {
	// Status is the member's entry for Database.status.clusters.
	Status fleetv1alpha1.ClusterStatus
	// HasWorkload is true when the member has the Database's StatefulSet.
	HasWorkload bool
	// TornDown is true when a teardown finished in this member.
	TornDown bool
	// Unreachable is true when the member could not be reached.
	Unreachable bool
	// Rotation is what the member sync found about a credential rotation.
	Rotation RotationReport
	// Restore is what the member sync found about spec.restoreFrom.
	Restore RestoreReport
	// FinalBackup is the member's final backup before its teardown (nil: none).
	FinalBackup *fleetv1alpha1.BackupRecord
	// Replication is what the member's CloudNativePG Cluster says about its
	// place in a PrimaryStandby topology; nil otherwise, and when the last
	// sync could not observe it.
	Replication *member.ReplicationStatus
	// At is when the result was recorded.
	At time.Time
}

// Fresh is true for a member with nothing of the Database in it yet.
func (r *Result) Fresh() bool {
	return !r.Unreachable && !r.HasWorkload && r.Status.Phase == fleetv1alpha1.ClusterPhasePending
}

// SameAs compares everything but timestamps.
func (r *Result) SameAs(o *Result) bool {
	if o == nil {
		return false
	}
	a, b := r.Status, o.Status
	a.LastSyncTime, b.LastSyncTime = nil, nil
	return a == b && r.HasWorkload == o.HasWorkload && r.TornDown == o.TornDown && r.Unreachable == o.Unreachable &&
		r.Rotation == o.Rotation && r.Restore == o.Restore && apiequality.Semantic.DeepEqual(r.FinalBackup, o.FinalBackup) &&
		SameReplication(r.Replication, o.Replication)
}

// RotationReport is what a member sync found about the rotation in its member.
type RotationReport struct {
	// Token is the rotation the member worked on ("" when none runs).
	Token string
	// Switched: the member's databases and Secret moved to the pending password.
	Switched bool
	// Current: the member Secret holds exactly the hub credentials.
	Current bool
	// Failed says why the member's latest rotation Job failed (it is retried).
	Failed string
	// Waiting says what the member waits for before it can switch.
	Waiting string
}

// RestoreReport is what a member sync found about spec.restoreFrom in its
// member; the Database controller turns it into status.restore and the
// Restored condition. Comparable, so an unchanged report is no change.
type RestoreReport struct {
	// Active: the Database has spec.restoreFrom.
	Active bool
	// Phase is a BackupRecord phase: Pending, Running, Succeeded or Failed.
	Phase string
	// Reason is the member's reason while not restored (Restoring,
	// RestoreFailed, WaitingForBackup, BackupUnusable).
	Reason   string
	Message  string
	Location string
	// Started and Finished are Unix seconds (0: unknown).
	Started, Finished int64
	// UID is the Database's the report is about.
	UID types.UID
}

// ApplyReport puts the report on the member's status entry: a member that
// has not restored is Provisioning (never Ready: its client Service does
// not exist) with the restore's reason.
func ApplyReport(st *fleetv1alpha1.ClusterStatus, rep RestoreReport) {
	if !rep.Active || rep.Phase == fleetv1alpha1.BackupPhaseSucceeded {
		return
	}
	switch st.Phase {
	case fleetv1alpha1.ClusterPhaseConflict, fleetv1alpha1.ClusterPhaseDegraded, fleetv1alpha1.ClusterPhaseUnreachable:
		return
	}
	st.Phase, st.Reason, st.Message = fleetv1alpha1.ClusterPhaseProvisioning, rep.Reason, statusmsg.Bound(rep.Message)
}

// SameReplication compares two observations.
func SameReplication(a, b *member.ReplicationStatus) bool {
	if a == nil || b == nil {
		return a == b
	}
	return apiequality.Semantic.DeepEqual(*a, *b)
}
