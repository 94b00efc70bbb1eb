package dbstatus

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	fleetv1alpha1 "github.com/fleetdb/fleetdb/apis/v1alpha1"
	"github.com/fleetdb/fleetdb/internal/statusmsg"
)

// BackupMessageMax bounds a BackupRecord's message (the CRD's MaxLength: a
// longer one fails the whole status write, again at every retry).
const BackupMessageMax = 512

// UnreachableBackupMessage is the record of a member given up as unreachable.
const UnreachableBackupMessage = "member unreachable: no final backup taken there"

// FinalBackupFor is the final backup policy of a teardown with the given
// deletion policy. A final backup is taken only where the teardown deletes
// the data (Delete): spec.backup.finalBackup, Required when unset. Retain and
// Orphan keep the data, so they take none. For a deleted Database this is
// Database.EffectiveFinalBackup; for a member dropped from placement with
// spec.teardown.onPlacementRemoval Delete it is Required by default too.
func FinalBackupFor(db *fleetv1alpha1.Database, policy fleetv1alpha1.DeletionPolicy) fleetv1alpha1.FinalBackupPolicy {
	if policy != fleetv1alpha1.DeletionPolicyDelete && policy != "" {
		return fleetv1alpha1.FinalBackupSkip
	}
	if db.Spec.Backup != nil && db.Spec.Backup.FinalBackup != "" {
		return db.Spec.Backup.FinalBackup
	}
	return fleetv1alpha1.FinalBackupRequired
}

// FinalBackupRecords is status.finalBackups: the records written before,
// updated by the member syncs' results; a member placed (again) and not
// being torn down loses its record; skipped are the members given up as
// unreachable. Sorted by member.
func FinalBackupRecords(db *fleetv1alpha1.Database, results map[string]*Result, targets, teardown map[string]bool,
	skipped map[string]bool) []fleetv1alpha1.BackupRecord {
	recs := map[string]fleetv1alpha1.BackupRecord{}
	for _, rec := range db.Status.FinalBackups {
		if !targets[rec.Cluster] || teardown[rec.Cluster] {
			recs[rec.Cluster] = rec
		}
	}
	applies := FinalBackupFor(db, db.TeardownPolicy()) != fleetv1alpha1.FinalBackupSkip
	for name, res := range results {
		switch {
		case res.FinalBackup != nil:
			recs[name] = *res.FinalBackup
		case applies && teardown[name] && res.Unreachable && !BackupEnded(recs[name].Phase):
			recs[name] = fleetv1alpha1.BackupRecord{Cluster: name, Phase: fleetv1alpha1.BackupPhasePending,
				Message: "member unreachable: its final backup waits for it (up to spec.teardown.unreachableTimeout)"}
		}
	}
	for name := range skipped {
		if recs[name].Phase != fleetv1alpha1.BackupPhaseSucceeded {
			recs[name] = fleetv1alpha1.BackupRecord{Cluster: name, Phase: fleetv1alpha1.BackupPhaseSkipped, Message: UnreachableBackupMessage}
		}
	}
	out := make([]fleetv1alpha1.BackupRecord, 0, len(recs))
	for _, rec := range recs {
		out = append(out, rec)
	}
	slices.SortFunc(out, func(a, b fleetv1alpha1.BackupRecord) int { return strings.Compare(a.Cluster, b.Cluster) })
	if len(out) == 0 {
		return nil
	}
	return out
}

// BackupEnded reports Succeeded or Skipped (a Failed backup may still be retried).
func BackupEnded(phase string) bool {
	return phase == fleetv1alpha1.BackupPhaseSucceeded || phase == fleetv1alpha1.BackupPhaseSkipped
}

// BackupPhase is rec's phase ("" without a record).
func BackupPhase(rec *fleetv1alpha1.BackupRecord) string {
	if rec == nil {
		return ""
	}
	return rec.Phase
}

// SetFinalBackupCondition sets FinalBackup: while members are torn down with a final backup
// (or, on a deleted Database, once one was recorded), False while one runs
// or waits (FinalBackupRunning) or a Required one failed
// (FinalBackupFailed: those members' teardown waits), True once each ended
// (FinalBackupsTaken). Absent otherwise.
func SetFinalBackupCondition(st *fleetv1alpha1.DatabaseStatus, db *fleetv1alpha1.Database, teardown map[string]bool) {
	policy := FinalBackupFor(db, db.TeardownPolicy())
	deleting := !db.DeletionTimestamp.IsZero()
	if (policy == fleetv1alpha1.FinalBackupSkip || len(teardown) == 0) && (!deleting || len(st.FinalBackups) == 0) {
		meta.RemoveStatusCondition(&st.Conditions, fleetv1alpha1.ConditionFinalBackup)
		return
	}
	var failed, held, running, ok, skipped, bestEffort []string
	firstFailure := ""
	for _, rec := range st.FinalBackups {
		switch {
		case heldForClaims(rec) && policy == fleetv1alpha1.FinalBackupRequired && teardown[rec.Cluster]:
			held = append(held, rec.Cluster)
		case rec.Phase == fleetv1alpha1.BackupPhaseFailed && policy == fleetv1alpha1.FinalBackupRequired && teardown[rec.Cluster]:
			failed = append(failed, rec.Cluster)
			if firstFailure == "" {
				firstFailure = rec.Message
			}
		case rec.Phase == fleetv1alpha1.BackupPhaseFailed:
			bestEffort = append(bestEffort, rec.Cluster)
		case rec.Phase == fleetv1alpha1.BackupPhaseSucceeded:
			ok = append(ok, rec.Cluster)
		case rec.Phase == fleetv1alpha1.BackupPhaseSkipped:
			skipped = append(skipped, rec.Cluster)
		default:
			running = append(running, rec.Cluster)
		}
	}
	switch {
	case len(failed) > 0:
		SetCondition(st, fleetv1alpha1.ConditionFinalBackup, metav1.ConditionFalse, fleetv1alpha1.ReasonFinalBackupFailed, fmt.Sprintf(
			"the Required final backup failed in %s (%s); nothing is deleted there until a retry succeeds, or set spec.backup.finalBackup to BestEffort or Skip",
			names(failed), firstFailure))
	case len(held) > 0:
		SetCondition(st, fleetv1alpha1.ConditionFinalBackup, metav1.ConditionFalse, fleetv1alpha1.ReasonFinalBackupNoWorkload, fmt.Sprintf(
			"the Required final backup cannot be taken in %s: the Database's workload is gone there but its data volume claims remain; "+
				"nothing is deleted there until the workload is back (the backup then runs), or set spec.backup.finalBackup to BestEffort or Skip to let the claims go",
			names(held)))
	case len(running) > 0 || (policy != fleetv1alpha1.FinalBackupSkip && len(missingRecords(st.FinalBackups, teardown)) > 0):
		SetCondition(st, fleetv1alpha1.ConditionFinalBackup, metav1.ConditionFalse, fleetv1alpha1.ReasonFinalBackupRunning,
			"final backups running or waiting in: "+names(append(running, missingRecords(st.FinalBackups, teardown)...)))
	default:
		var parts []string
		for _, p := range []struct {
			what  string
			names []string
		}{{"succeeded in", ok}, {"skipped in", skipped}, {"failed (BestEffort, not retried) in", bestEffort}} {
			if len(p.names) > 0 {
				parts = append(parts, p.what+" "+names(p.names))
			}
		}
		SetCondition(st, fleetv1alpha1.ConditionFinalBackup, metav1.ConditionTrue, fleetv1alpha1.ReasonFinalBackupsTaken,
			"final backups: "+strings.Join(parts, "; "))
	}
}

// missingRecords are the members being torn down without a record yet.
func missingRecords(recs []fleetv1alpha1.BackupRecord, teardown map[string]bool) []string {
	var out []string
	for _, name := range slices.Sorted(maps.Keys(teardown)) {
		if BackupRecordFor(recs, name) == nil {
			out = append(out, name)
		}
	}
	return out
}

// BackupRecordFor is the record of cluster in records (nil: none).
func BackupRecordFor(records []fleetv1alpha1.BackupRecord, cluster string) *fleetv1alpha1.BackupRecord {
	for i := range records {
		if records[i].Cluster == cluster {
			rec := records[i]
			return &rec
		}
	}
	return nil
}

// noWorkloadPrefix starts the record of a member whose Required final
// backup holds its teardown: no workload to back up from, data claims left.
const noWorkloadPrefix = "no workload to back up from, but data volume claims remain: "

// NoWorkloadMessage says which claims hold the teardown and what the user can do.
func NoWorkloadMessage(claims []string) string {
	shown := claims
	if len(shown) > 3 {
		shown = shown[:3]
	}
	more := ""
	if n := len(claims) - len(shown); n > 0 {
		more = fmt.Sprintf(" and %d more", n)
	}
	return statusmsg.Truncate(noWorkloadPrefix+strings.Join(shown, ", ")+more+
		"; nothing is deleted here until the workload is back (the final backup then runs) or spec.backup.finalBackup is BestEffort or Skip", BackupMessageMax)
}

// heldForClaims: rec is a member's record of a Required final backup held by NoWorkloadMessage.
func heldForClaims(rec fleetv1alpha1.BackupRecord) bool {
	return rec.Phase == fleetv1alpha1.BackupPhasePending && strings.HasPrefix(rec.Message, noWorkloadPrefix)
}
