package database

import (
	"k8s.io/apimachinery/pkg/types"

	fleetv1alpha1 "github.com/fleetdb/fleetdb/apis/v1alpha1"
	"github.com/fleetdb/fleetdb/hub/internal/dbstatus"
	"github.com/fleetdb/fleetdb/internal/placement"
)

// standbyFinalBackup is the final backup step of a standby member of a
// PrimaryStandby Database whose primary member the same plan tears down
// (the Database is deleted): the primary member takes the final backup (see
// backupPrimary) and the standby's teardown holds until it succeeded; the
// standby's record is then Skipped, covered by it. ok is false when the
// member takes its own as before: it is no such standby, the primary member
// stays (a standby dropped from the placement: the data lives on there), or
// the primary member's backup ended without one (given up as unreachable):
// then a Required backup is still taken, from the standby.
func (r *memberSyncReconciler) standbyFinalBackup(key types.NamespacedName, cluster string, p *plan) (finalBackupStep, bool) {
	fb := p.finalBackup
	primary := placement.BackupPrimary(fb.db, cluster)
	if primary == "" || !p.teardown[primary] {
		return finalBackupStep{}, false
	}
	rec := dbstatus.BackupRecordFor(fb.db.Status.FinalBackups, primary)
	if res := r.state.resultsFor(key)[primary]; res != nil && res.FinalBackup != nil {
		rec = res.FinalBackup
	}
	switch phase := dbstatus.BackupPhase(rec); {
	case phase == fleetv1alpha1.BackupPhaseSucceeded:
		return finalBackupStep{record: &fleetv1alpha1.BackupRecord{Cluster: cluster, Phase: fleetv1alpha1.BackupPhaseSkipped,
			Message: "a standby member: the final backup of the primary member " + primary + " covers it"}}, true
	case dbstatus.BackupEnded(phase):
		return finalBackupStep{}, false
	}
	msg := "waiting for the final backup in the primary member " + primary + " (a dump of a standby can be cancelled by recovery conflicts)"
	return finalBackupStep{record: &fleetv1alpha1.BackupRecord{Cluster: cluster, Phase: fleetv1alpha1.BackupPhasePending, Message: msg},
		hold: true, waiting: msg, requeue: finalBackupPollMin}, true
}
