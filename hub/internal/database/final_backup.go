package database

import (
	"strconv"

	corev1 "k8s.io/api/core/v1"

	fleetv1alpha1 "github.com/fleetdb/fleetdb/apis/v1alpha1"
	"github.com/fleetdb/fleetdb/hub/internal/dbstatus"
	"github.com/fleetdb/fleetdb/member"
)

// finalBackupPlan is the final backup the teardowns of a plan take first.
type finalBackupPlan struct {
	policy fleetv1alpha1.FinalBackupPolicy
	// db is the Database as the plan saw it: what the Job renders, and
	// status.finalBackups (a backup recorded as taken is not taken again).
	db *fleetv1alpha1.Database
	// id is the backup's ID in a member that has no final backup Job yet.
	id string
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
	fp := dbstatus.FinalBackupFor(db, policy)
	if fp == fleetv1alpha1.FinalBackupSkip && len(db.Status.FinalBackups) == 0 {
		return nil
	}
	id := member.FinalBackupID(string(db.UID))
	if db.DeletionTimestamp.IsZero() {
		id += "-g" + strconv.FormatInt(db.Generation, 10)
	}
	return &finalBackupPlan{policy: fp, db: db.DeepCopy(), id: id}
}

// finalBackupEvents records an Event when a member's final backup
// succeeded, failed (each failed attempt) or was skipped for an unreachable member.
func (r *databaseReconciler) finalBackupEvents(db *fleetv1alpha1.Database, next []fleetv1alpha1.BackupRecord) {
	for _, rec := range next {
		prev := dbstatus.BackupRecordFor(db.Status.FinalBackups, rec.Cluster)
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
		case rec.Phase == fleetv1alpha1.BackupPhaseSkipped && rec.Message == dbstatus.UnreachableBackupMessage && (prev == nil || prev.Phase != rec.Phase):
			r.recorder.Eventf(db, nil, corev1.EventTypeWarning, "FinalBackupSkipped", "FinalBackup", "member %s: %s", rec.Cluster, rec.Message)
		}
	}
}

// noFinalBackupEvent: a Database that asked for a final backup
// (spec.backup.finalBackup Required or BestEffort) but is deleted with a
// policy that keeps its data (Retain, Orphan) gets none; an Event says so
// as it goes (its status goes with it).
func (r *databaseReconciler) noFinalBackupEvent(db *fleetv1alpha1.Database) {
	policy := db.TeardownPolicy()
	if db.Spec.Backup == nil || db.Spec.Backup.FinalBackup == "" || db.Spec.Backup.FinalBackup == fleetv1alpha1.FinalBackupSkip ||
		policy == fleetv1alpha1.DeletionPolicyDelete {
		return
	}
	r.recorder.Eventf(db, nil, corev1.EventTypeNormal, "FinalBackupNotTaken", "FinalBackup",
		"no final backup taken: deletionPolicy %s keeps the data in the members (spec.backup.finalBackup %s applies only where the data is deleted)",
		policy, db.Spec.Backup.FinalBackup)
}
