package database

import (
	"fmt"
	"regexp"
	"slices"

	batchv1 "k8s.io/api/batch/v1"

	fleetv1alpha1 "github.com/fleetdb/fleetdb/apis/v1alpha1"
	"github.com/fleetdb/fleetdb/hub/internal/memberjob"
	"github.com/fleetdb/fleetdb/internal/statusmsg"
	"github.com/fleetdb/fleetdb/member"
)

// Which Jobs in a member count as a Database's final backup. Labels are no
// proof: whoever may create Jobs in the namespace can copy them (the hub
// identity and the backup id are on objects any reader sees), and a Job
// running "true" completes for real. So a Job counts only when
//   - its backup id is this Database's (final-<uid>, or final-<uid>-g<n> of
//     a dropped member): a Job of an earlier Database of the same name is
//     not this one's backup (ignored, and not deleted);
//   - its name is the one the hub gives that id and attempt; and
//   - its pod runs what the hub renders for it: the same containers (image,
//     command, environment, mounts) and volumes. A Job that passes ran the
//     backup script into this Database's backup directory, whoever created it.
// A Job of this Database's id that fails the check is not trusted: the
// teardown of a Required backup holds (nothing deleted), the record says
// which Job, and deleting that Job lets the hub run its own.

// ownsBackupID: id is a final backup id of the Database with this UID.
func ownsBackupID(db *fleetv1alpha1.Database, id string) bool {
	return finalIDPattern(db).MatchString(id)
}

func finalIDPattern(db *fleetv1alpha1.Database) *regexp.Regexp {
	return regexp.MustCompile(`^` + regexp.QuoteMeta(member.FinalBackupID(string(db.UID))) + `(-g[0-9]+)?$`)
}

// thisDatabaseJobs keeps the Jobs of the Database's own backup ids, named as
// the hub names them.
func thisDatabaseJobs(db *fleetv1alpha1.Database, jobs []*batchv1.Job) []*batchv1.Job {
	return slices.DeleteFunc(slices.Clone(jobs), func(j *batchv1.Job) bool {
		id := j.Labels[fleetv1alpha1.LabelBackupID]
		return !ownsBackupID(db, id) || j.Name != member.BackupJobName(db.Name, id, backupAttempt(j))
	})
}

// finalBackupSpec is the final backup Job machine of fb's Database in
// cluster, starting attempts of backup id. A listed Job is checked against
// what the hub renders for its own id and attempt (a Job of another
// Database's id is none of the hub's: ignored).
func (r *memberSyncReconciler) finalBackupSpec(cluster string, fb *finalBackupPlan, id string) *memberjob.Spec {
	render := func(id string, attempt int) (*batchv1.Job, error) {
		return member.BackupJob(member.BackupParams{
			Database: fb.db, Cluster: cluster, Kind: fleetv1alpha1.BackupKindFinal, ID: id, Attempt: attempt,
			HubID: r.opts.HubID, ImageRepository: r.opts.ImageRepository,
		})
	}
	labels := member.BackupObjectLabels(fb.db, r.opts.HubID)
	labels[fleetv1alpha1.LabelBackupKind] = fleetv1alpha1.BackupKindFinal
	return &memberjob.Spec{
		What: "final backup", Namespace: fb.db.Namespace, Labels: labels, HubID: r.opts.HubID,
		AttemptKey: fleetv1alpha1.AnnotationBackupAttempt, Base: finalBackupRetryBase, Limit: finalBackupRetryMax, Cluster: cluster, Ledger: r.jobs,
		Render: func(attempt int) (*batchv1.Job, error) { return render(id, attempt) },
		RenderFor: func(j *batchv1.Job) (*batchv1.Job, error) {
			jid := j.Labels[fleetv1alpha1.LabelBackupID]
			if !ownsBackupID(fb.db, jid) {
				return nil, fmt.Errorf("backup id %q is not this Database's", jid)
			}
			return render(jid, backupAttempt(j))
		},
	}
}

// untrustedBackupJob is the step of a member where a Job of this
// Database's backup is not the one the hub runs: Required holds (nothing is
// deleted), BestEffort records it as a failed backup and goes on.
func (r *memberSyncReconciler) untrustedBackupJob(cluster string, fb *finalBackupPlan, job *batchv1.Job) finalBackupStep {
	id := job.Labels[fleetv1alpha1.LabelBackupID]
	if !ownsBackupID(fb.db, id) {
		id = fb.id
	}
	msg := r.finalBackupSpec(cluster, fb, id).UntrustedMessage(job)
	rec := &fleetv1alpha1.BackupRecord{Cluster: cluster, Phase: fleetv1alpha1.BackupPhaseFailed, BackupID: id,
		Location: member.BackupLocation(fb.db, id), Message: statusmsg.Bound(msg)}
	if fb.policy == fleetv1alpha1.FinalBackupBestEffort {
		return finalBackupStep{record: rec, jobs: true}
	}
	return finalBackupStep{record: rec, hold: true, requeue: finalBackupRetryBase, jobs: true,
		waiting: "the final backup is held: " + msg}
}

// A failure's cause (backupWhyMax) leaves room in a BackupRecord's message
// (dbstatus.BackupMessageMax) for "attempt N failed: ...; attempt N+1
// running".
const backupWhyMax = 400
