package database

import (
	"context"
	"fmt"
	"strconv"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleetv1alpha1 "github.com/fleetdb/fleetdb/apis/v1alpha1"
	"github.com/fleetdb/fleetdb/hub/internal/dbstatus"
	"github.com/fleetdb/fleetdb/hub/internal/memberjob"
	"github.com/fleetdb/fleetdb/internal/statusmsg"
	"github.com/fleetdb/fleetdb/member"
)

// A running final backup Job is read live (Jobs are not watched, as for
// rotation), every finalBackupPollMin at first and less often as it runs
// longer, up to finalBackupPollMax. A failed Required backup is retried
// with a backoff doubling from finalBackupRetryBase to finalBackupRetryMax.
const (
	finalBackupPollMin   = 5 * time.Second
	finalBackupPollMax   = time.Minute
	finalBackupRetryBase = 30 * time.Second
	finalBackupRetryMax  = 10 * time.Minute
	// finalBackupJobsKept: failed attempts older than the last two are deleted.
	finalBackupJobsKept = 2
)

// finalBackupStep is where a member's final backup stands for its teardown.
type finalBackupStep struct {
	// record is the member's entry for status.finalBackups (nil: none).
	record *fleetv1alpha1.BackupRecord
	// hold: the teardown waits (nothing is deleted in the member); waiting says why.
	hold    bool
	waiting string
	requeue time.Duration
	// jobs: backup Jobs may exist; they are deleted once the teardown is done.
	jobs bool
}

// finalBackup takes the member's final backup before its teardown, as the
// plan's final backup policy says: Skip goes on at once; otherwise a
// backup Job runs (created once, found again by its labels) and the
// teardown holds until it succeeded, or, for BestEffort, ended. A failed
// Required backup holds the teardown and is retried with backoff.
func (r *memberSyncReconciler) finalBackup(ctx context.Context, c client.Client, live client.Reader, cluster string, key types.NamespacedName,
	p *plan) (finalBackupStep, error) {
	fb := p.finalBackup
	if fb == nil {
		return finalBackupStep{}, nil
	}
	// The last result of this member is fresher than the plan's status.
	prev := dbstatus.BackupRecordFor(fb.db.Status.FinalBackups, cluster)
	if res := r.state.resultsFor(key)[cluster]; res != nil && res.FinalBackup != nil {
		prev = res.FinalBackup
	}
	if fb.policy == fleetv1alpha1.FinalBackupSkip {
		if prev == nil {
			return finalBackupStep{}, nil // no backup was ever started here: no Job to look for
		}
		rec := *prev
		if rec.Phase != fleetv1alpha1.BackupPhaseSucceeded && rec.Phase != fleetv1alpha1.BackupPhaseSkipped {
			rec.Phase, rec.Message = fleetv1alpha1.BackupPhaseSkipped, "spec.backup.finalBackup is Skip: no final backup taken"
			rec.SizeBytes, rec.Finished = nil, nil
		}
		return finalBackupStep{record: &rec, jobs: true}, nil
	}
	st, err := r.finalBackupSpec(cluster, fb, fb.id).Observe(ctx, live)
	switch {
	case err != nil:
		return finalBackupStep{}, err
	case st.Phase == memberjob.PhaseUntrusted:
		return r.untrustedBackupJob(cluster, fb, st.Job), nil
	case st.Phase != memberjob.PhaseNone:
		return r.followFinalBackup(ctx, c, live, cluster, fb, st)
	}
	if prev != nil && (prev.Phase == fleetv1alpha1.BackupPhaseSucceeded || prev.Phase == fleetv1alpha1.BackupPhaseSkipped) {
		return finalBackupStep{record: prev}, nil // taken (or nothing to take) before; its Job is gone
	}
	if step, ok := r.standbyFinalBackup(key, cluster, p); ok {
		return step, nil
	}
	owner := member.Owner{Namespace: fb.db.Namespace, Name: fb.db.Name, UID: fb.db.UID, HubID: r.opts.HubID}
	has, err := member.HasWorkload(ctx, c, owner)
	if err != nil {
		return finalBackupStep{}, err
	}
	if !has && fb.policy == fleetv1alpha1.FinalBackupRequired {
		// No workload to back up from, but its data may still be there: a
		// Required backup is never skipped while data volume claims are.
		claims, err := member.DataClaims(ctx, live, owner)
		if err != nil {
			return finalBackupStep{}, err
		}
		if len(claims) > 0 {
			msg := dbstatus.NoWorkloadMessage(claims)
			return finalBackupStep{record: &fleetv1alpha1.BackupRecord{Cluster: cluster, Phase: fleetv1alpha1.BackupPhasePending, Message: msg},
				hold: true, waiting: msg, requeue: finalBackupPollMax}, nil
		}
	}
	if !has {
		return finalBackupStep{record: &fleetv1alpha1.BackupRecord{Cluster: cluster, Phase: fleetv1alpha1.BackupPhaseSkipped,
			Message: "nothing to back up: the member runs no workload of the Database"}}, nil
	}
	return r.startFinalBackup(ctx, c, live, cluster, fb, fb.id, 1, nil)
}

// followFinalBackup reads the latest attempt (st.Jobs are sorted by attempt).
func (r *memberSyncReconciler) followFinalBackup(ctx context.Context, c client.Client, live client.Reader, cluster string, fb *finalBackupPlan,
	st memberjob.Status) (finalBackupStep, error) {
	latest, jobs, attempt := st.Job, st.Jobs, st.Attempt
	id := latest.Labels[fleetv1alpha1.LabelBackupID]
	rec := fleetv1alpha1.BackupRecord{Cluster: cluster, BackupID: id, Location: member.BackupLocation(fb.db, id), Started: ptrTo(latest.CreationTimestamp)}
	switch st.Phase {
	case memberjob.PhaseSucceeded:
		rec.Phase = fleetv1alpha1.BackupPhaseSucceeded
		rec.Finished = latest.Status.CompletionTime
		if dump, _ := r.backupResult(ctx, live, latest); dump != nil && dump.SizeBytes > 0 {
			rec.SizeBytes = ptrTo(dump.SizeBytes)
		}
		return finalBackupStep{record: &rec, jobs: true}, nil
	case memberjob.PhaseRunning:
		// Running: a previous attempt's failure stays in the record.
		rec.Phase, rec.Message = fleetv1alpha1.BackupPhaseRunning, fmt.Sprintf("attempt %d running", attempt)
		if len(jobs) > 1 {
			if f, fat, fwhy := memberjob.Failed(jobs[len(jobs)-2]); f {
				rec.Phase, rec.Finished = fleetv1alpha1.BackupPhaseFailed, ptrTo(metav1.NewTime(fat))
				rec.Message = fmt.Sprintf("attempt %d failed: %s; attempt %d running", attempt-1, r.failureWhy(ctx, live, jobs[len(jobs)-2], fwhy), attempt)
			}
		}
		age := time.Since(latest.CreationTimestamp.Time)
		return finalBackupStep{record: &rec, hold: true, waiting: "waiting for the final backup (Job " + latest.Name + ")",
			requeue: min(max(age/10, finalBackupPollMin), finalBackupPollMax), jobs: true}, nil
	}
	rec.Phase, rec.Finished = fleetv1alpha1.BackupPhaseFailed, ptrTo(metav1.NewTime(st.FailedAt))
	rec.Message = fmt.Sprintf("attempt %d failed: %s", attempt, r.failureWhy(ctx, live, latest, st.Why))
	if fb.policy == fleetv1alpha1.FinalBackupBestEffort {
		return finalBackupStep{record: &rec, jobs: true}, nil
	}
	if st.Wait > 0 {
		return finalBackupStep{record: &rec, hold: true, requeue: st.Wait, jobs: true,
			waiting: "the final backup failed (Required): nothing is deleted here until it succeeds or spec.backup.finalBackup allows it"}, nil
	}
	// Retry: a new attempt of the same backup; older failures beyond the last two go.
	if err := r.finalBackupSpec(cluster, fb, id).Remove(ctx, c, jobs[:max(0, len(jobs)-finalBackupJobsKept+1)]...); err != nil {
		return finalBackupStep{}, err
	}
	return r.startFinalBackup(ctx, c, live, cluster, fb, id, attempt+1, &rec)
}

// startFinalBackup makes sure of the backup volume claim and creates the
// backup Job's attempt; failed, when not nil, is the previous attempt's record.
// A Job already at that name that the hub does not trust is not taken for the backup.
func (r *memberSyncReconciler) startFinalBackup(ctx context.Context, c client.Client, live client.Reader, cluster string, fb *finalBackupPlan,
	id string, attempt int, failed *fleetv1alpha1.BackupRecord) (finalBackupStep, error) {
	if err := r.ensureBackupClaim(ctx, c, live, fb.db); err != nil {
		return finalBackupStep{}, err
	}
	st, err := r.finalBackupSpec(cluster, fb, id).Start(ctx, c, live, attempt)
	switch {
	case err != nil:
		return finalBackupStep{}, err
	case st.Phase == memberjob.PhaseUntrusted:
		return r.untrustedBackupJob(cluster, fb, st.Job), nil
	}
	now := metav1.Now()
	rec := fleetv1alpha1.BackupRecord{Cluster: cluster, Phase: fleetv1alpha1.BackupPhaseRunning, BackupID: id,
		Location: member.BackupLocation(fb.db, id), Started: &now, Message: fmt.Sprintf("attempt %d running", attempt)}
	if failed != nil {
		rec.Phase, rec.Finished = fleetv1alpha1.BackupPhaseFailed, failed.Finished
		rec.Message = statusmsg.Truncate(failed.Message, dbstatus.BackupMessageMax-len("; attempt  running")-len(strconv.Itoa(attempt))) +
			fmt.Sprintf("; attempt %d running", attempt)
	}
	return finalBackupStep{record: &rec, hold: true, requeue: finalBackupPollMin, jobs: true,
		waiting: "waiting for the final backup (Job " + st.Job.Name + ")"}, nil
}

// ensureBackupClaim creates the backup volume claim when it is missing. A
// claim of that name that is not a fleetdb backup volume is not written to.
func (r *memberSyncReconciler) ensureBackupClaim(ctx context.Context, c client.Client, live client.Reader, db *fleetv1alpha1.Database) error {
	var cur corev1.PersistentVolumeClaim
	err := live.Get(ctx, client.ObjectKey{Namespace: db.Namespace, Name: member.BackupClaimName(db.Name)}, &cur)
	switch {
	case err == nil:
		if cur.Labels[fleetv1alpha1.LabelBackupVolume] != "true" {
			return fmt.Errorf("the volume claim %s/%s exists and is not a fleetdb backup volume (label %s=true): not used",
				db.Namespace, cur.Name, fleetv1alpha1.LabelBackupVolume)
		}
		return nil
	case !apierrors.IsNotFound(err):
		return fmt.Errorf("reading the backup volume claim: %w", err)
	}
	pvc, err := member.BackupVolumeClaim(db, r.opts.HubID)
	if err != nil {
		return err
	}
	if err := c.Create(ctx, pvc, client.FieldOwner(fleetv1alpha1.FieldManager)); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating the backup volume claim: %w", err)
	}
	return nil
}

// backupResult reads the result the Job's pod wrote to its termination
// message. Pods are read live; a member whose RBAC does not let the hub
// read pods gives no result (the Job's own status still counts).
func (r *memberSyncReconciler) backupResult(ctx context.Context, live client.Reader, job *batchv1.Job) (dump, upload *member.BackupResult) {
	var pods corev1.PodList
	if err := live.List(ctx, &pods, client.InNamespace(job.Namespace),
		client.MatchingLabels{batchv1.ControllerUidLabel: string(job.UID)}); err != nil {
		ctrl.LoggerFrom(ctx).V(1).Info("cannot read the backup job's pods", "job", job.Name, "error", err.Error())
		return nil, nil
	}
	for i := range pods.Items {
		d, u, ok := member.BackupResultsFromPod(&pods.Items[i])
		if ok && (dump == nil || d.Phase == fleetv1alpha1.BackupPhaseSucceeded) {
			dump, upload = d, u
		}
	}
	return dump, upload
}

// failureWhy says why a backup attempt failed: the step its script named,
// else the Job controller's reason (neither holds a credential).
func (r *memberSyncReconciler) failureWhy(ctx context.Context, live client.Reader, job *batchv1.Job, jobWhy string) string {
	dump, upload := r.backupResult(ctx, live, job)
	switch {
	case dump != nil && dump.Phase == fleetv1alpha1.BackupPhaseFailed:
		return statusmsg.Truncate(fmt.Sprintf("the backup failed at step %q (exit %d); see the logs of Job %s", dump.Step, dump.ExitCode, job.Name), backupWhyMax)
	case upload != nil && upload.Phase == fleetv1alpha1.BackupPhaseFailed:
		return "the copy to S3 failed (the backup is on the volume); see the logs of Job " + job.Name
	}
	return statusmsg.Truncate(jobWhy+" (Job "+job.Name+")", backupWhyMax)
}

// removeFinalBackupJobs deletes the final backup Jobs of the Database the
// hub created (their pods go with them) once its teardown in the member is
// done: memberjob.Spec.Remove, never a Job that only carries their names
// and labels. The backup volume claim stays.
func (r *memberSyncReconciler) removeFinalBackupJobs(ctx context.Context, c client.Client, live client.Reader, cluster string, fb *finalBackupPlan) error {
	jobs, err := finalBackupJobs(ctx, live, fb.db, r.opts.HubID)
	if err != nil {
		return err
	}
	return r.finalBackupSpec(cluster, fb, fb.id).Remove(ctx, c, jobs...)
}

// finalBackupJobs lists this hub's final backup Jobs of the Database in the
// member (every backup id of its UID, named as the hub names them: see
// thisDatabaseJobs), oldest attempt first.
func finalBackupJobs(ctx context.Context, live client.Reader, db *fleetv1alpha1.Database, hubID string) ([]*batchv1.Job, error) {
	sel := member.BackupObjectLabels(db, hubID)
	sel[fleetv1alpha1.LabelBackupKind] = fleetv1alpha1.BackupKindFinal
	jobs, err := memberjob.List(ctx, live, db.Namespace, sel, hubID, fleetv1alpha1.AnnotationBackupAttempt, "final backup")
	if err != nil {
		return nil, err
	}
	return thisDatabaseJobs(db, jobs), nil
}

func backupAttempt(j *batchv1.Job) int {
	return memberjob.AttemptOf(j, fleetv1alpha1.AnnotationBackupAttempt)
}
