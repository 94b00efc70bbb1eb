package backup

import (
	"fmt"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	fleetv1alpha1 "github.com/fleetdb/fleetdb/apis/v1alpha1"
	"github.com/fleetdb/fleetdb/internal/statusmsg"
)

// foldBackupStatus derives the phase and the conditions of a DatabaseBackup
// from its member records. gone: the Database is deleted or being deleted.
func foldBackupStatus(st *fleetv1alpha1.DatabaseBackupStatus, gone bool) {
	var succeeded, failed, skipped, running, pending []string
	for _, rec := range st.Clusters {
		switch rec.Phase {
		case fleetv1alpha1.BackupPhaseSucceeded:
			succeeded = append(succeeded, rec.Cluster)
		case fleetv1alpha1.BackupPhaseFailed:
			failed = append(failed, rec.Cluster)
		case fleetv1alpha1.BackupPhaseSkipped:
			skipped = append(skipped, rec.Cluster)
		case fleetv1alpha1.BackupPhaseRunning:
			running = append(running, rec.Cluster)
		default:
			pending = append(pending, rec.Cluster)
		}
	}
	stalled := false
	switch {
	case len(running) > 0 || len(pending) > 0:
		st.Phase = fleetv1alpha1.BackupPhasePending
		if len(running) > 0 {
			st.Phase = fleetv1alpha1.BackupPhaseRunning
		}
		setBackupCondition(st, fleetv1alpha1.ConditionReady, false, fleetv1alpha1.ReasonBackupRunning,
			fmt.Sprintf("%d of %d member(s) backed up; running: %s; pending: %s", len(succeeded), len(st.Clusters), statusmsg.NamesOrNone(running), statusmsg.NamesOrNone(pending)))
	case len(succeeded) == 0:
		st.Phase = fleetv1alpha1.BackupPhaseFailed
		reason, msg := fleetv1alpha1.ReasonBackupFailed, "failed: "+statusmsg.NamesOrNone(failed)
		switch {
		case len(failed) == 0:
			reason, msg = fleetv1alpha1.ReasonNoMembers, "none of the members to back up is placed (skipped: "+statusmsg.NamesOrNone(skipped)+")"
		case gone:
			reason = fleetv1alpha1.ReasonDatabaseDeleting
			msg = "the Database was deleted before the backup ran; " + msg
		}
		setBackupCondition(st, fleetv1alpha1.ConditionReady, false, reason, msg)
		setBackupStalled(st, reason, msg)
		stalled = true
	case len(failed) > 0:
		st.Phase = fleetv1alpha1.BackupPhasePartiallyFailed
		setBackupCondition(st, fleetv1alpha1.ConditionReady, false, fleetv1alpha1.ReasonBackupPartiallyFailed,
			fmt.Sprintf("succeeded: %s; failed: %s", statusmsg.Names(succeeded), statusmsg.Names(failed)))
	default:
		st.Phase = fleetv1alpha1.BackupPhaseSucceeded
		msg := "backed up in " + statusmsg.Names(succeeded)
		if len(skipped) > 0 {
			msg += "; skipped: " + statusmsg.Names(skipped)
		}
		setBackupCondition(st, fleetv1alpha1.ConditionReady, true, fleetv1alpha1.ReasonBackupSucceeded, msg)
	}
	if !stalled {
		meta.RemoveStatusCondition(&st.Conditions, fleetv1alpha1.ConditionStalled)
	}
}

// setBackupCondition sets a condition at the status' observedGeneration.
func setBackupCondition(st *fleetv1alpha1.DatabaseBackupStatus, condType string, ok bool, reason, msg string) {
	status := metav1.ConditionFalse
	if ok {
		status = metav1.ConditionTrue
	}
	meta.SetStatusCondition(&st.Conditions, metav1.Condition{
		Type: condType, Status: status, Reason: reason, Message: statusmsg.Bound(msg), ObservedGeneration: st.ObservedGeneration,
	})
}

// setBackupStalled sets Stalled: nothing retries until something changes.
func setBackupStalled(st *fleetv1alpha1.DatabaseBackupStatus, reason, msg string) {
	setBackupCondition(st, fleetv1alpha1.ConditionStalled, true, reason, msg)
}
