package backup

import (
	"context"
	"fmt"
	"sync"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	fleetv1alpha1 "github.com/fleetdb/fleetdb/apis/v1alpha1"
	"github.com/fleetdb/fleetdb/hub/internal/memberjob"
	"github.com/fleetdb/fleetdb/hub/internal/queue"
	"github.com/fleetdb/fleetdb/internal/statusmsg"
)

// cleanupOutcome is where one member's cleanup stands.
type cleanupOutcome struct {
	// done: nothing is left to do in the member (or the hub gave up on it).
	done bool
	// left says what was left in the member when the hub gave up ("": nothing).
	left string
	// requeue: when to look again while not done.
	requeue time.Duration
}

// reconcileBackupDelete runs the deletion of a DatabaseBackup: in every
// member its backup ran in, the backup Job stops, its files are removed by
// a cleanup Job (deletionPolicy Delete) or kept (Retain), and the Jobs go.
// A member unreachable past the Database's teardown.unreachableTimeout (the
// default when the Database is gone), counted from the deletion, is given
// up on with an Event naming what was left there. Then the finalizer goes.
func (r *backupReconciler) reconcileBackupDelete(ctx context.Context, b *fleetv1alpha1.DatabaseBackup) (ctrl.Result, error) {
	if !controllerutil.ContainsFinalizer(b, fleetv1alpha1.BackupFinalizer) {
		return ctrl.Result{}, nil
	}
	deadline := b.DeletionTimestamp.Add(r.unreachableTimeout(ctx, b))
	var (
		wg      sync.WaitGroup
		mu      sync.Mutex
		requeue time.Duration
		left    []string
		pending int
	)
	for _, rec := range b.Status.Clusters {
		if rec.Phase == fleetv1alpha1.BackupPhaseSkipped || r.isCleaned(b, rec.Cluster) {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			out := r.memberCleanup(ctx, b, rec, deadline)
			mu.Lock()
			defer mu.Unlock()
			switch {
			case out.done:
				r.markCleaned(b, rec.Cluster)
				if out.left != "" {
					left = append(left, out.left)
				}
			default:
				pending++
				requeue = queue.Sooner(requeue, out.requeue)
			}
		}()
	}
	wg.Wait()
	for _, msg := range left {
		r.recorder.Eventf(b, nil, corev1.EventTypeWarning, "CleanupSkipped", "Delete", "%s", msg)
	}
	if pending > 0 {
		return ctrl.Result{RequeueAfter: requeue}, nil
	}
	controllerutil.RemoveFinalizer(b, fleetv1alpha1.BackupFinalizer)
	if err := r.hub.Update(ctx, b); err != nil && !apierrors.IsNotFound(err) {
		return ctrl.Result{}, fmt.Errorf("removing the finalizer: %w", err)
	}
	r.forgetCleaned(b)
	ctrl.LoggerFrom(ctx).Info("database backup released", "policy", backupPolicy(b))
	return ctrl.Result{}, nil
}

// unreachableTimeout is the Database's teardown.unreachableTimeout, or the default.
func (r *backupReconciler) unreachableTimeout(ctx context.Context, b *fleetv1alpha1.DatabaseBackup) time.Duration {
	var db fleetv1alpha1.Database
	if err := r.hub.Get(ctx, client.ObjectKey{Namespace: b.Namespace, Name: b.Spec.DatabaseName}, &db); err == nil {
		return db.EffectiveUnreachableTimeout()
	}
	return fleetv1alpha1.DefaultUnreachableTimeout
}

func backupPolicy(b *fleetv1alpha1.DatabaseBackup) string {
	if b.Spec.DeletionPolicy == fleetv1alpha1.BackupDeletionRetain {
		return fleetv1alpha1.BackupDeletionRetain
	}
	return fleetv1alpha1.BackupDeletionDelete
}

// memberCleanup is one member's part of the deletion.
func (r *backupReconciler) memberCleanup(ctx context.Context, b *fleetv1alpha1.DatabaseBackup, rec fleetv1alpha1.BackupRecord, deadline time.Time) cleanupOutcome {
	key := string(b.UID) + "/" + rec.Cluster
	giveUp := func(why string) cleanupOutcome {
		what := "its Jobs"
		if backupPolicy(b) == fleetv1alpha1.BackupDeletionDelete && rec.Phase != fleetv1alpha1.BackupPhasePending {
			what = "its files (" + backupDir(b) + " on the volume claim " + backupClaimName(b) + ") and its Jobs"
		}
		return cleanupOutcome{done: true, left: statusmsg.Bound(fmt.Sprintf("member %s: %s; left %s there", rec.Cluster, why, what))}
	}
	c, live, why := r.memberClients(ctx, rec.Cluster)
	if c == nil {
		if r.now().After(deadline) {
			return giveUp("unreachable past the unreachable timeout (" + statusmsg.RedactAddresses(why) + ")")
		}
		return cleanupOutcome{requeue: min(r.retry.When(key), time.Until(deadline)+time.Second)}
	}
	ctx, cancel := context.WithTimeout(ctx, r.opts.MemberCallTimeout)
	defer cancel()
	out, err := r.cleanupStep(ctx, c, live, b, rec)
	if err != nil {
		if r.now().After(deadline) {
			return giveUp("the cleanup kept failing (" + statusmsg.RedactAddresses(err.Error()) + ")")
		}
		ctrl.LoggerFrom(ctx).Info("backup cleanup step failed, retrying", "cluster", rec.Cluster, "error", statusmsg.RedactAddresses(err.Error()))
		return cleanupOutcome{requeue: r.retry.When(key)}
	}
	r.retry.Forget(key)
	if out.left != "" {
		out.left = statusmsg.Bound("member " + rec.Cluster + ": " + out.left)
	}
	return out
}

// cleanupStep: stop a running backup Job; with Delete, run the cleanup Job
// until it succeeded; then delete both Jobs.
func (r *backupReconciler) cleanupStep(ctx context.Context, c client.Client, live client.Reader, b *fleetv1alpha1.DatabaseBackup,
	rec fleetv1alpha1.BackupRecord) (cleanupOutcome, error) {
	db := r.database(ctx, b)
	backupJob, err := r.trustedBackupJob(ctx, live, b, db, rec)
	if err != nil {
		return cleanupOutcome{}, err
	}
	if backupJob != nil && backupJob.DeletionTimestamp == nil && !jobFinished(backupJob) {
		// A dump still writing would race the removal: stop it first.
		return cleanupOutcome{requeue: backupJobPoll}, r.deleteJob(ctx, c, rec.Cluster, backupJob)
	}
	if backupJob != nil && backupJob.DeletionTimestamp != nil {
		return cleanupOutcome{requeue: backupJobPoll}, nil
	}
	// A member whose backup never started has no files of it.
	if backupPolicy(b) == fleetv1alpha1.BackupDeletionDelete && (backupJob != nil || rec.Started != nil) {
		out, err := r.runCleanupJob(ctx, c, live, b, rec.Cluster, r.cleanupTemplate(b, db, rec.Cluster, backupJob))
		if err != nil || !out.done {
			return out, err
		}
		if out.left != "" {
			return out, r.deleteJob(ctx, c, rec.Cluster, backupJob)
		}
	}
	return cleanupOutcome{done: true}, r.deleteJob(ctx, c, rec.Cluster, backupJob)
}

// cleanupTemplate is the Job the cleanup Job is made from: the backup Job
// the Database would get, or, when the Database is gone, the trusted backup
// Job (nil when neither is left).
func (r *backupReconciler) cleanupTemplate(b *fleetv1alpha1.DatabaseBackup, db *fleetv1alpha1.Database, cluster string, backupJob *batchv1.Job) *batchv1.Job {
	if db == nil {
		return backupJob
	}
	job, err := r.jobSpec(b, db, cluster).Render(1)
	if err != nil {
		return nil
	}
	return job
}

// trustedBackupJob reads the backup Job live: nil when there is none, or
// when the hub does not trust it: such a Job is never stopped, used as the
// cleanup's template, or deleted. With the Database, trust is the machine's
// (memberjob.Spec.Trusted: the hub's name, and the pod it renders now or the
// one its job ledger holds for that name); without it nothing can be
// rendered to check against, and only a Job the ledger holds counts (with
// no ledger: this hub's Job of this backup whose start the member's record holds).
func (r *backupReconciler) trustedBackupJob(ctx context.Context, live client.Reader, b *fleetv1alpha1.DatabaseBackup, db *fleetv1alpha1.Database,
	rec fleetv1alpha1.BackupRecord) (*batchv1.Job, error) {
	job, err := r.ownBackupJob(ctx, live, b, backupJobName(b))
	if err != nil || job == nil {
		return nil, err
	}
	var trusted bool
	switch {
	case db != nil:
		trusted, err = r.jobSpec(b, db, rec.Cluster).Trusted(ctx, job)
	case r.opts.Jobs != nil:
		trusted, err = r.opts.Jobs.Holds(ctx, r.opts.HubID, rec.Cluster, job)
	default:
		trusted = rec.Started != nil
	}
	if err != nil || !trusted {
		return nil, err
	}
	return job, nil
}

// runCleanupJob creates the cleanup Job from the backup Job (its image and
// volumes) and reads it until it succeeded; a failed one is run again.
func (r *backupReconciler) runCleanupJob(ctx context.Context, c client.Client, live client.Reader, b *fleetv1alpha1.DatabaseBackup, cluster string,
	backupJob *batchv1.Job) (cleanupOutcome, error) {
	job, err := r.ownBackupJob(ctx, live, b, backupCleanupJobName(b))
	if err != nil {
		return cleanupOutcome{}, err
	}
	switch {
	case job == nil && backupJob == nil:
		// Neither the backup Job nor the Database is left to say which
		// image and claim to use: the files stay (the Event says where).
		return cleanupOutcome{done: true, left: statusmsg.Bound("neither the backup Job nor the Database remains to run the cleanup; left " +
			backupDir(b) + " on the volume claim " + backupClaimName(b))}, nil
	case job == nil:
		cj, err := renderCleanup(b, backupJob, r.opts.HubID)
		if err != nil {
			return cleanupOutcome{done: true, left: statusmsg.Bound("cannot render the cleanup Job: " + err.Error())}, nil
		}
		if err := r.opts.Jobs.Record(ctx, r.opts.HubID, cluster, cj); err != nil {
			return cleanupOutcome{}, fmt.Errorf("recording the cleanup job: %w", err)
		}
		if err := c.Create(ctx, cj, client.FieldOwner(fleetv1alpha1.FieldManager)); err != nil && !apierrors.IsAlreadyExists(err) {
			return cleanupOutcome{}, fmt.Errorf("creating the cleanup job: %w", err)
		}
		return cleanupOutcome{requeue: backupJobPoll}, nil
	case job.DeletionTimestamp != nil:
		return cleanupOutcome{requeue: backupJobPoll}, nil
	case memberjob.Succeeded(job):
		return cleanupOutcome{done: true}, r.deleteJob(ctx, c, cluster, job)
	}
	if failed, _, why := memberjob.Failed(job); failed {
		return cleanupOutcome{}, fmt.Errorf("cleanup job %s failed: %s (deleted, run again)", job.Name, why+r.deleteJobErr(ctx, c, cluster, job))
	}
	return cleanupOutcome{requeue: backupJobPoll}, nil
}

// ownBackupJob reads a Job of this DatabaseBackup live; nil when there is
// none, or when the Job of that name is not this hub's for this backup.
func (r *backupReconciler) ownBackupJob(ctx context.Context, live client.Reader, b *fleetv1alpha1.DatabaseBackup, name string) (*batchv1.Job, error) {
	var job batchv1.Job
	if err := live.Get(ctx, client.ObjectKey{Namespace: b.Namespace, Name: name}, &job); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, nil
		}
		return nil, fmt.Errorf("reading job %s: %w", name, err)
	}
	if !ownsBackupJob(&job, b, r.opts.HubID) {
		return nil, nil
	}
	return &job, nil
}

func jobFinished(j *batchv1.Job) bool {
	failed, _, _ := memberjob.Failed(j)
	return failed || memberjob.Succeeded(j)
}

// deleteJob deletes a Job of this DatabaseBackup in cluster, and its pods,
// when the hub created it (its job ledger holds it: memberjob.Ledger.Remove;
// with no ledger, the caller's check stands); nil and NotFound are done.
func (r *backupReconciler) deleteJob(ctx context.Context, c client.Client, cluster string, j *batchv1.Job) error {
	return r.opts.Jobs.Remove(ctx, c, r.opts.HubID, cluster, "backup", func(*batchv1.Job) (bool, error) { return true, nil }, j)
}

// deleteJobErr deletes a failed Job so that it runs again, and says when that failed.
func (r *backupReconciler) deleteJobErr(ctx context.Context, c client.Client, cluster string, j *batchv1.Job) string {
	if err := r.deleteJob(ctx, c, cluster, j); err != nil {
		return "; " + err.Error()
	}
	return ""
}

func (r *backupReconciler) isCleaned(b *fleetv1alpha1.DatabaseBackup, cluster string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.cleaned[b.UID][cluster]
}

func (r *backupReconciler) markCleaned(b *fleetv1alpha1.DatabaseBackup, cluster string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.cleaned[b.UID] == nil {
		r.cleaned[b.UID] = map[string]bool{}
	}
	r.cleaned[b.UID][cluster] = true
}

func (r *backupReconciler) forgetCleaned(b *fleetv1alpha1.DatabaseBackup) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.cleaned, b.UID)
}

// database is the DatabaseBackup's Database; nil when it cannot be read.
func (r *backupReconciler) database(ctx context.Context, b *fleetv1alpha1.DatabaseBackup) *fleetv1alpha1.Database {
	db := &fleetv1alpha1.Database{}
	if err := r.hub.Get(ctx, client.ObjectKey{Namespace: b.Namespace, Name: b.Spec.DatabaseName}, db); err != nil {
		return nil
	}
	return db
}
