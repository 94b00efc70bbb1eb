package backup

import (
	"context"
	"fmt"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/multicluster-runtime/pkg/multicluster"

	fleetv1alpha1 "github.com/fleetdb/fleetdb/apis/v1alpha1"
	"github.com/fleetdb/fleetdb/hub/internal/memberjob"
	"github.com/fleetdb/fleetdb/internal/statusmsg"
	"github.com/fleetdb/fleetdb/member"
)

// backupJobName is the member backup Job of a DatabaseBackup: at most 58
// characters for a Database name of at most 40.
func backupJobName(b *fleetv1alpha1.DatabaseBackup) string {
	return b.Spec.DatabaseName + "-bk-" + b.UIDHash()
}

// backupCleanupJobName is the member Job that removes a DatabaseBackup's files.
func backupCleanupJobName(b *fleetv1alpha1.DatabaseBackup) string {
	return b.Spec.DatabaseName + "-bkrm-" + b.UIDHash()
}

// memberBackup runs one member's step with the member's client, bounded by
// the member call timeout. An unreachable member, or a call that failed,
// keeps its record's phase with a message and is retried with backoff
// (the registry also wakes the backup when the member comes back).
func (r *backupReconciler) memberBackup(ctx context.Context, b *fleetv1alpha1.DatabaseBackup, db *fleetv1alpha1.Database,
	rec fleetv1alpha1.BackupRecord) (fleetv1alpha1.BackupRecord, time.Duration) {
	key := string(b.UID) + "/" + rec.Cluster
	c, live, why := r.memberClients(ctx, rec.Cluster)
	if c == nil {
		rec.Message = statusmsg.Bound("member unreachable, retrying: " + statusmsg.RedactAddresses(why))
		return rec, r.retry.When(key)
	}
	ctx, cancel := context.WithTimeout(ctx, r.opts.MemberCallTimeout)
	defer cancel()
	next, after, err := r.stepBackup(ctx, c, live, b, db, rec)
	if err != nil {
		ctrl.LoggerFrom(ctx).Info("backup step failed, retrying", "cluster", rec.Cluster, "error", statusmsg.RedactAddresses(err.Error()))
		rec.Message = statusmsg.Bound("retrying: " + statusmsg.RedactAddresses(err.Error()))
		return rec, r.retry.When(key)
	}
	r.retry.Forget(key)
	return next, after
}

// memberClients are the member's client (writes) and live reader, or nil
// and why the member cannot be reached.
func (r *backupReconciler) memberClients(ctx context.Context, cluster string) (client.Client, client.Reader, string) {
	if h := r.provider.Health(cluster); !h.Usable() {
		return nil, nil, h.Message
	}
	cl, err := r.mgr.GetCluster(ctx, multicluster.ClusterName(cluster))
	if err != nil {
		return nil, nil, "member not connected"
	}
	return cl.GetClient(), cl.GetAPIReader(), ""
}

// stepBackup moves one member's record on: create the backup Job when the
// member's Database is Ready there, then read it until it finished. Only
// the Job the hub renders counts (memberjob.Spec: its name and its pod).
func (r *backupReconciler) stepBackup(ctx context.Context, c client.Client, live client.Reader, b *fleetv1alpha1.DatabaseBackup,
	db *fleetv1alpha1.Database, rec fleetv1alpha1.BackupRecord) (fleetv1alpha1.BackupRecord, time.Duration, error) {
	if db == nil {
		return r.stepWithoutDatabase(ctx, live, b, rec)
	}
	spec := r.jobSpec(b, db, rec.Cluster)
	st, err := spec.Observe(ctx, live)
	if err != nil {
		return rec, 0, err
	}
	now := r.stamp()
	switch st.Phase {
	case memberjob.PhaseNone:
		return r.startBackup(ctx, c, live, spec, b, db, rec)
	case memberjob.PhaseUntrusted:
		rec.Phase, rec.Finished, rec.Message = fleetv1alpha1.BackupPhaseFailed, &now, statusmsg.Bound(spec.UntrustedMessage(st.Job))
		return rec, 0, nil
	}
	job := st.Job
	if rec.Started == nil {
		rec.Started = job.CreationTimestamp.DeepCopy()
	}
	rec.Phase = fleetv1alpha1.BackupPhaseRunning
	switch st.Phase {
	case memberjob.PhaseFailed:
		rec.Phase, rec.Finished = fleetv1alpha1.BackupPhaseFailed, &now
		rec.Message = statusmsg.Bound("backup Job " + job.Name + " failed: " + st.Why)
		return rec, 0, nil
	case memberjob.PhaseRunning:
		rec.Message = "backup Job " + job.Name + " running"
		return rec, backupJobPoll, nil
	}
	loc, size, err := backupLocation(ctx, live, b, db, job)
	if err != nil {
		return rec, 0, err
	}
	rec.Phase, rec.Finished, rec.Message = fleetv1alpha1.BackupPhaseSucceeded, &now, ""
	if job.Status.CompletionTime != nil {
		rec.Finished = job.Status.CompletionTime.DeepCopy()
	}
	rec.Location, rec.SizeBytes = loc, size
	return rec, 0, nil
}

// stepWithoutDatabase: without the Database nothing can be rendered to
// check a Job against, so no Job is trusted (data safety: no backup is
// recorded that the hub cannot vouch for) and none is started.
func (r *backupReconciler) stepWithoutDatabase(ctx context.Context, live client.Reader, b *fleetv1alpha1.DatabaseBackup,
	rec fleetv1alpha1.BackupRecord) (fleetv1alpha1.BackupRecord, time.Duration, error) {
	var job batchv1.Job
	err := live.Get(ctx, client.ObjectKey{Namespace: b.Namespace, Name: backupJobName(b)}, &job)
	now := r.stamp()
	rec.Phase, rec.Finished = fleetv1alpha1.BackupPhaseFailed, &now
	switch {
	case err == nil:
		rec.Message = "the Database is gone: Job " + job.Name + " cannot be checked against the backup Job the hub runs; not trusted"
	case !apierrors.IsNotFound(err):
		return rec, 0, fmt.Errorf("reading the backup job: %w", err)
	case rec.Started != nil:
		// It ran: a Job that is gone now (removed by hand) cannot say how it went.
		rec.Message = "the backup Job was removed before its result was read"
	default:
		rec.Message = "the Database is gone"
	}
	return rec, 0, nil
}

// startBackup creates the member's backup Job (and the backup volume claim
// when missing) once the Database is Ready in the member.
func (r *backupReconciler) startBackup(ctx context.Context, c client.Client, live client.Reader, spec *memberjob.Spec, b *fleetv1alpha1.DatabaseBackup,
	db *fleetv1alpha1.Database, rec fleetv1alpha1.BackupRecord) (fleetv1alpha1.BackupRecord, time.Duration, error) {
	now := r.stamp()
	if rec.Started != nil {
		// It ran: a Job that is gone now (removed by hand) cannot say how it went.
		rec.Phase, rec.Finished = fleetv1alpha1.BackupPhaseFailed, &now
		rec.Message = "the backup Job was removed before its result was read"
		return rec, 0, nil
	}
	if msg := memberNotReady(db, rec.Cluster); msg != "" {
		rec.Message = msg
		return rec, backupWaitPoll, nil
	}
	pvc, err := member.BackupVolumeClaim(db, r.opts.HubID)
	if err == nil {
		_, err = spec.Render(1)
	}
	if err != nil {
		rec.Phase, rec.Finished, rec.Message = fleetv1alpha1.BackupPhaseFailed, &now, statusmsg.Bound("rendering the backup Job: "+err.Error())
		return rec, 0, nil
	}
	if err := c.Create(ctx, pvc, client.FieldOwner(fleetv1alpha1.FieldManager)); err != nil && !apierrors.IsAlreadyExists(err) {
		return rec, 0, fmt.Errorf("creating PersistentVolumeClaim %s: %w", pvc.Name, err)
	}
	st, err := spec.Start(ctx, c, live, 1)
	if err != nil {
		return rec, 0, err
	}
	if st.Phase == memberjob.PhaseUntrusted {
		rec.Phase, rec.Finished, rec.Message = fleetv1alpha1.BackupPhaseFailed, &now, statusmsg.Bound(spec.UntrustedMessage(st.Job))
		return rec, 0, nil
	}
	rec.Phase, rec.Started, rec.Message = fleetv1alpha1.BackupPhaseRunning, &now, "backup Job "+st.Job.Name+" running"
	return rec, backupJobPoll, nil
}

// memberNotReady says why the Database cannot be backed up in the member yet ("" when it can).
func memberNotReady(db *fleetv1alpha1.Database, cluster string) string {
	for _, c := range db.Status.Clusters {
		if c.Name == cluster {
			if c.Phase == fleetv1alpha1.ClusterPhaseReady {
				return ""
			}
			return "waiting for the Database to be Ready in this member (it is " + string(c.Phase) + ")"
		}
	}
	return "waiting for the Database to be placed on this member"
}
