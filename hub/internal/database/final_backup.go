package database

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	fleetv1alpha1 "github.com/fleetdb/fleetdb/apis/v1alpha1"
	"github.com/fleetdb/fleetdb/member"
)

// unreachableBackupMessage is the record of a member given up as unreachable.
const unreachableBackupMessage = "member unreachable: no final backup taken there"

// finalBackupPlan is the final backup the teardowns of a plan take first.
type finalBackupPlan struct {
	policy fleetv1alpha1.FinalBackupPolicy
	// db is the Database as the plan saw it: what the Job renders, and
	// status.finalBackups (a backup recorded as taken is not taken again).
	db *fleetv1alpha1.Database
	// id is the backup's ID in a member that has no final backup Job yet.
	id string
}

// finalBackupFor is the final backup policy of a teardown with the given
// deletion policy. A final backup is taken only where the teardown deletes
// the data (Delete): spec.backup.finalBackup, Required when unset. Retain and
// Orphan keep the data, so they take none. For a deleted Database this is
// Database.EffectiveFinalBackup; for a member dropped from placement with
// spec.teardown.onPlacementRemoval Delete it is Required by default too.
func finalBackupFor(db *fleetv1alpha1.Database, policy fleetv1alpha1.DeletionPolicy) fleetv1alpha1.FinalBackupPolicy {
	if policy != fleetv1alpha1.DeletionPolicyDelete && policy != "" {
		return fleetv1alpha1.FinalBackupSkip
	}
	if db.Spec.Backup != nil && db.Spec.Backup.FinalBackup != "" {
		return db.Spec.Backup.FinalBackup
	}
	return fleetv1alpha1.FinalBackupRequired
}

// newFinalBackupPlan is the final backup part of a plan that tears members
// down with policy; nil when no backup applies and none was recorded. The
// backup of a deleted Database is "final-<uid>"; the one of a member dropped
// from placement carries the generation, so that a member placed again and
// dropped again later gets a new backup.
func newFinalBackupPlan(db *fleetv1alpha1.Database, policy fleetv1alpha1.DeletionPolicy, teardown map[string]bool) *finalBackupPlan {
	if len(teardown) == 0 {
		return nil
	}
	fp := finalBackupFor(db, policy)
	if fp == fleetv1alpha1.FinalBackupSkip && len(db.Status.FinalBackups) == 0 {
		return nil
	}
	id := member.FinalBackupID(string(db.UID))
	if db.DeletionTimestamp.IsZero() {
		id += "-g" + strconv.FormatInt(db.Generation, 10)
	}
	return &finalBackupPlan{policy: fp, db: db.DeepCopy(), id: id}
}

// finalBackupRecords is status.finalBackups: the records written before,
// updated by the member syncs' results; a member placed (again) and not
// being torn down loses its record; skipped are the members given up as
// unreachable. Sorted by member.
func finalBackupRecords(db *fleetv1alpha1.Database, results map[string]*memberResult, targets, teardown map[string]bool,
	skipped map[string]bool) []fleetv1alpha1.BackupRecord {
	recs := map[string]fleetv1alpha1.BackupRecord{}
	for _, rec := range db.Status.FinalBackups {
		if !targets[rec.Cluster] || teardown[rec.Cluster] {
			recs[rec.Cluster] = rec
		}
	}
	applies := finalBackupFor(db, teardownPolicy(db)) != fleetv1alpha1.FinalBackupSkip
	for name, res := range results {
		switch {
		case res.FinalBackup != nil:
			recs[name] = *res.FinalBackup
		case applies && teardown[name] && res.Unreachable && !backupEnded(recs[name].Phase):
			recs[name] = fleetv1alpha1.BackupRecord{Cluster: name, Phase: fleetv1alpha1.BackupPhasePending,
				Message: "member unreachable: its final backup waits for it (up to spec.teardown.unreachableTimeout)"}
		}
	}
	for name := range skipped {
		if recs[name].Phase != fleetv1alpha1.BackupPhaseSucceeded {
			recs[name] = fleetv1alpha1.BackupRecord{Cluster: name, Phase: fleetv1alpha1.BackupPhaseSkipped, Message: unreachableBackupMessage}
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

// backupEnded: Succeeded or Skipped (a Failed backup may still be retried).
func backupEnded(phase string) bool {
	return phase == fleetv1alpha1.BackupPhaseSucceeded || phase == fleetv1alpha1.BackupPhaseSkipped
}

func backupPhase(rec *fleetv1alpha1.BackupRecord) string {
	if rec == nil {
		return ""
	}
	return rec.Phase
}

// setFinalBackupCondition: while members are torn down with a final backup
// (or, on a deleted Database, once one was recorded), False while one runs
// or waits (FinalBackupRunning) or a Required one failed
// (FinalBackupFailed: those members' teardown waits), True once each ended
// (FinalBackupsTaken). Absent otherwise.
func setFinalBackupCondition(st *fleetv1alpha1.DatabaseStatus, db *fleetv1alpha1.Database, teardown map[string]bool) {
	policy := finalBackupFor(db, teardownPolicy(db))
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
		setCondition(st, fleetv1alpha1.ConditionFinalBackup, metav1.ConditionFalse, fleetv1alpha1.ReasonFinalBackupFailed, fmt.Sprintf(
			"the Required final backup failed in %s (%s); nothing is deleted there until a retry succeeds, or set spec.backup.finalBackup to BestEffort or Skip",
			names(failed), firstFailure))
	case len(held) > 0:
		setCondition(st, fleetv1alpha1.ConditionFinalBackup, metav1.ConditionFalse, fleetv1alpha1.ReasonFinalBackupNoWorkload, fmt.Sprintf(
			"the Required final backup cannot be taken in %s: the Database's workload is gone there but its data volume claims remain; "+
				"nothing is deleted there until the workload is back (the backup then runs), or set spec.backup.finalBackup to BestEffort or Skip to let the claims go",
			names(held)))
	case len(running) > 0 || (policy != fleetv1alpha1.FinalBackupSkip && len(missingRecords(st.FinalBackups, teardown)) > 0):
		setCondition(st, fleetv1alpha1.ConditionFinalBackup, metav1.ConditionFalse, fleetv1alpha1.ReasonFinalBackupRunning,
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
		setCondition(st, fleetv1alpha1.ConditionFinalBackup, metav1.ConditionTrue, fleetv1alpha1.ReasonFinalBackupsTaken,
			"final backups: "+strings.Join(parts, "; "))
	}
}

// missingRecords are the members being torn down without a record yet.
func missingRecords(recs []fleetv1alpha1.BackupRecord, teardown map[string]bool) []string {
	var out []string
	for _, name := range sortedKeys(teardown) {
		if backupRecordFor(recs, name) == nil {
			out = append(out, name)
		}
	}
	return out
}

// finalBackupEvents records an Event when a member's final backup
// succeeded, failed (each failed attempt) or was skipped for an unreachable member.
func (r *databaseReconciler) finalBackupEvents(db *fleetv1alpha1.Database, next []fleetv1alpha1.BackupRecord) {
	for _, rec := range next {
		prev := backupRecordFor(db.Status.FinalBackups, rec.Cluster)
		if prev != nil && prev.Phase == rec.Phase && prev.Finished.Equal(rec.Finished) && prev.Message == rec.Message {
			continue
		}
		switch {
		case rec.Phase == fleetv1alpha1.BackupPhaseFailed && (prev == nil || prev.Phase != rec.Phase || !prev.Finished.Equal(rec.Finished)):
			r.recorder.Eventf(db, nil, corev1.EventTypeWarning, fleetv1alpha1.ReasonFinalBackupFailed, "FinalBackup",
				"member %s: %s", rec.Cluster, rec.Message)
		case rec.Phase == fleetv1alpha1.BackupPhaseSucceeded && (prev == nil || prev.Phase != rec.Phase):
			size := "size unknown"
			if rec.SizeBytes != nil {
				size = strconv.FormatInt(*rec.SizeBytes, 10) + " bytes"
			}
			r.recorder.Eventf(db, nil, corev1.EventTypeNormal, "FinalBackupSucceeded", "FinalBackup",
				"member %s: final backup at %s (%s)", rec.Cluster, rec.Location, size)
		case rec.Phase == fleetv1alpha1.BackupPhaseSkipped && rec.Message == unreachableBackupMessage && (prev == nil || prev.Phase != rec.Phase):
			r.recorder.Eventf(db, nil, corev1.EventTypeWarning, "FinalBackupSkipped", "FinalBackup", "member %s: %s", rec.Cluster, rec.Message)
		}
	}
}

// noFinalBackupEvent: a Database that asked for a final backup
// (spec.backup.finalBackup Required or BestEffort) but is deleted with a
// policy that keeps its data (Retain, Orphan) gets none; an Event says so
// as it goes (its status goes with it).
func (r *databaseReconciler) noFinalBackupEvent(db *fleetv1alpha1.Database) {
	policy := teardownPolicy(db)
	if db.Spec.Backup == nil || db.Spec.Backup.FinalBackup == "" || db.Spec.Backup.FinalBackup == fleetv1alpha1.FinalBackupSkip ||
		policy == fleetv1alpha1.DeletionPolicyDelete {
		return
	}
	r.recorder.Eventf(db, nil, corev1.EventTypeNormal, "FinalBackupNotTaken", "FinalBackup",
		"no final backup taken: deletionPolicy %s keeps the data in the members (spec.backup.finalBackup %s applies only where the data is deleted)",
		policy, db.Spec.Backup.FinalBackup)
}
