package dbstatus

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	fleetv1alpha1 "github.com/fleetdb/fleetdb/apis/v1alpha1"
	"github.com/fleetdb/fleetdb/internal/statusmsg"
)

// restoreReasonOrder ranks the reasons of members that have not restored:
// the Restored condition names the most serious one.
var restoreReasonOrder = []string{
	fleetv1alpha1.ReasonBackupUnusable, fleetv1alpha1.ReasonRestoreFailed, fleetv1alpha1.ReasonWaitingForBackup, fleetv1alpha1.ReasonRestoring,
}

// ApplyRestore sets status.restore (one record per placed member, from
// the member syncs' reports or, for a member not observed since the hub
// started, the record the status had) and the Restored condition. A backup
// that cannot be used (failed, or not in the member) also stalls the
// Database: retrying cannot fix it.
func ApplyRestore(st *fleetv1alpha1.DatabaseStatus, db *fleetv1alpha1.Database, results map[string]*Result, targets []string) {
	if db.Spec.RestoreFrom == nil || !db.DeletionTimestamp.IsZero() {
		st.Restore = db.Status.Restore
		return
	}
	prev := map[string]fleetv1alpha1.BackupRecord{}
	for _, rec := range db.Status.Restore {
		prev[rec.Cluster] = rec
	}
	reasons := map[string][]string{}
	var restored []string
	st.Restore = nil
	for _, name := range slices.Sorted(slices.Values(targets)) {
		rec, ok := prev[name]
		if !ok {
			rec = fleetv1alpha1.BackupRecord{Cluster: name, Phase: fleetv1alpha1.BackupPhasePending}
		}
		reason := fleetv1alpha1.ReasonRestoring
		if res := results[name]; res != nil && res.Restore.Active {
			rec = restoreRecord(name, res.Restore, rec)
			reason = res.Restore.Reason
		}
		st.Restore = append(st.Restore, rec)
		if rec.Phase == fleetv1alpha1.BackupPhaseSucceeded {
			restored = append(restored, name)
			continue
		}
		reasons[reason] = append(reasons[reason], name)
	}
	setRestoredCondition(st, db, restored, reasons)
}

// setRestoredCondition: True once every placed member restored; False
// with the most serious reason of the others, their members named.
func setRestoredCondition(st *fleetv1alpha1.DatabaseStatus, db *fleetv1alpha1.Database, restored []string, reasons map[string][]string) {
	if len(reasons) == 0 && len(restored) > 0 {
		SetCondition(st, fleetv1alpha1.ConditionRestored, metav1.ConditionTrue, fleetv1alpha1.ReasonRestored,
			fmt.Sprintf("restored DatabaseBackup %s in %s", db.Spec.RestoreFrom.BackupName, names(restored)))
		return
	}
	var parts []string
	first := fleetv1alpha1.ReasonRestoring
	for _, reason := range restoreReasonOrder {
		if members := reasons[reason]; len(members) > 0 {
			if len(parts) == 0 {
				first = reason
			}
			parts = append(parts, reason+": "+names(members))
		}
	}
	msg := fmt.Sprintf("restoring DatabaseBackup %s; restored: %s; %s", db.Spec.RestoreFrom.BackupName, statusmsg.NamesOrNone(restored), strings.Join(parts, "; "))
	SetCondition(st, fleetv1alpha1.ConditionRestored, metav1.ConditionFalse, first, msg)
	if first == fleetv1alpha1.ReasonBackupUnusable {
		setStalledCondition(st, first, msg)
		// Compute cleared Stalled and set Reconciling: a status that
		// stays stalled keeps its transition times (no write per pass).
		keepTransitionTimes(st, db.Status.Conditions, fleetv1alpha1.ConditionStalled, fleetv1alpha1.ConditionReconciling, fleetv1alpha1.ConditionReady)
		st.Phase = phaseOf(st.Conditions)
	}
}

// keepTransitionTimes gives the conditions of types that have the same
// status as in prev the transition time they had there, and keeps the
// conditions in prev's order (Stalled, removed and added again, would
// otherwise move to the end).
func keepTransitionTimes(st *fleetv1alpha1.DatabaseStatus, prev []metav1.Condition, types ...string) {
	for _, t := range types {
		was, now := meta.FindStatusCondition(prev, t), meta.FindStatusCondition(st.Conditions, t)
		if was != nil && now != nil && was.Status == now.Status {
			now.LastTransitionTime = was.LastTransitionTime
		}
	}
	pos := func(t string) int {
		for i, c := range prev {
			if c.Type == t {
				return i
			}
		}
		return len(prev)
	}
	slices.SortStableFunc(st.Conditions, func(a, b metav1.Condition) int { return pos(a.Type) - pos(b.Type) })
}

// restoreRecord is a member's status.restore record from its report,
// keeping the previous record's times when they did not change.
func restoreRecord(cluster string, rep RestoreReport, prev fleetv1alpha1.BackupRecord) fleetv1alpha1.BackupRecord {
	rec := fleetv1alpha1.BackupRecord{Cluster: cluster, Phase: rep.Phase, Location: rep.Location, Message: statusmsg.Bound(rep.Message)}
	rec.Started = timeOf(rep.Started, prev.Started)
	rec.Finished = timeOf(rep.Finished, prev.Finished)
	return rec
}

func timeOf(unix int64, prev *metav1.Time) *metav1.Time {
	if unix == 0 {
		return nil
	}
	if prev != nil && prev.Unix() == unix {
		return prev
	}
	t := metav1.NewTime(time.Unix(unix, 0).UTC())
	return &t
}
