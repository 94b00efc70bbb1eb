package database

import (
	"context"
	"fmt"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleetv1alpha1 "github.com/fleetdb/fleetdb/apis/v1alpha1"
	"github.com/fleetdb/fleetdb/hub/internal/memberjob"
	"github.com/fleetdb/fleetdb/internal/statusmsg"
	"github.com/fleetdb/fleetdb/member"
)

// restoreJobPoll is how often a member sync reads a running restore Job;
// restoreBackupPoll how often it looks again for a DatabaseBackup that has
// not succeeded yet (a hub cache read).
const (
	restoreJobPoll    = 5 * time.Second
	restoreBackupPoll = 15 * time.Second
)

// memberRestore is what a member sync knows about the restore in its member
// before it applies: whether it is done, so the client Service may exist.
type memberRestore struct {
	active bool
	// done: the member restored, or must never restore (its client Service
	// exists: the database may have taken traffic).
	done bool
	// marker is the AnnotationRestored value the member Secret keeps.
	marker string
	report restoreReport
	// job is where this hub's restore Jobs of the Database stand.
	job memberjob.Status
}

// restoreMarker is the AnnotationRestored value of a Database's restore.
func restoreMarker(db *fleetv1alpha1.Database) string {
	return db.Spec.RestoreFrom.BackupName
}

// prepareRestore finds out whether the member restored spec.restoreFrom
// already. The durable records, in order: the member Secret's
// AnnotationRestored (cached), the hub's status.restore, an existing client
// Service (the database may have taken traffic: it is never restored over),
// and the latest restore Job (read live, only while none of the others says
// so). At rest (restored) it makes no API call.
func (r *memberSyncReconciler) prepareRestore(ctx context.Context, c client.Client, live client.Reader, db *fleetv1alpha1.Database, cluster string) (*memberRestore, error) {
	if db.Spec.RestoreFrom == nil {
		return &memberRestore{}, nil
	}
	mr := &memberRestore{active: true, marker: restoreMarker(db), report: restoreReport{Active: true, Phase: fleetv1alpha1.BackupPhasePending, UID: db.UID}}
	done := func(msg string) (*memberRestore, error) {
		mr.done = true
		mr.report.Phase, mr.report.Reason, mr.report.Message = fleetv1alpha1.BackupPhaseSucceeded, "", msg
		return mr, nil
	}
	for _, rec := range db.Status.Restore {
		if rec.Cluster == cluster && rec.Phase == fleetv1alpha1.BackupPhaseSucceeded {
			mr.report.Location, mr.report.Message = rec.Location, rec.Message
			mr.report.Started, mr.report.Finished = unixOf(rec.Started), unixOf(rec.Finished)
			return done(rec.Message)
		}
	}
	// The report this hub made when it saw the restore succeed, until the
	// status has it: the same report, so the status does not flap.
	if prev := r.state.resultsFor(client.ObjectKeyFromObject(db))[cluster]; prev != nil && prev.Restore.Phase == fleetv1alpha1.BackupPhaseSucceeded &&
		prev.Restore.UID == db.UID {
		mr.report = prev.Restore
		return done(prev.Restore.Message)
	}
	mr.report.Location = r.restoreLocationFor(ctx, db, cluster)
	var s corev1.Secret
	switch err := c.Get(ctx, client.ObjectKey{Namespace: db.Namespace, Name: member.CredentialsSecretName(db.Name)}, &s); {
	case err == nil && s.Annotations[fleetv1alpha1.AnnotationRestored] != "":
		return done("restored " + s.Annotations[fleetv1alpha1.AnnotationRestored])
	case err != nil && !apierrors.IsNotFound(err):
		return nil, fmt.Errorf("reading the member credentials secret: %w", err)
	}
	var svc corev1.Service
	switch err := c.Get(ctx, client.ObjectKey{Namespace: db.Namespace, Name: db.Name}, &svc); {
	case err == nil:
		return done("not restored: the client Service already existed in this member (its database may have taken traffic)")
	case !apierrors.IsNotFound(err):
		return nil, fmt.Errorf("reading the client service: %w", err)
	}
	src, err := r.restoreBackup(ctx, db)
	if err != nil || src == nil {
		// Without the DatabaseBackup there is nothing to check a Job against: none counts.
		return mr, err
	}
	if mr.job, err = r.restoreJobSpec(db, cluster, src, nil).Observe(ctx, live); err != nil {
		return nil, err
	}
	if mr.job.Phase == memberjob.PhaseSucceeded {
		mr.report.Started = mr.job.Job.CreationTimestamp.Unix()
		if t := mr.job.Job.Status.CompletionTime; t != nil {
			mr.report.Finished = t.Unix()
		}
		return done("restored by Job " + mr.job.Job.Name)
	}
	return mr, nil
}

// restoreObjects adjusts the rendered objects: until the member restored,
// the client Service "<name>" is left out (no client reaches the database
// while it is loaded); once restored, the member Secret carries
// AnnotationRestored, the durable record that it never restores again.
func restoreObjects(objs []client.Object, db *fleetv1alpha1.Database, mr *memberRestore) []client.Object {
	if mr == nil || !mr.active {
		return objs
	}
	out := objs[:0:0]
	for _, obj := range objs {
		switch o := obj.(type) {
		case *corev1.Service:
			if o.Name == db.Name && !mr.done {
				continue
			}
		case *corev1.Secret:
			if o.Name == member.CredentialsSecretName(db.Name) && mr.done {
				if o.Annotations == nil {
					o.Annotations = map[string]string{}
				}
				o.Annotations[fleetv1alpha1.AnnotationRestored] = mr.marker
			}
		}
		out = append(out, obj)
	}
	return out
}

// finishRestore runs after the apply and the observation: it resolves the
// DatabaseBackup, runs the restore Job once the instance is ready, retries
// a failed one with backoff, and returns the report and when to look again.
func (r *memberSyncReconciler) finishRestore(ctx context.Context, c client.Client, live client.Reader, db *fleetv1alpha1.Database, cluster string,
	mr *memberRestore, observed fleetv1alpha1.ClusterStatus) (restoreReport, time.Duration, error) {
	rep := mr.report
	if !mr.active || mr.done {
		return rep, 0, nil
	}
	src, wait, err := r.restoreSource(ctx, db, cluster)
	if err != nil || src == nil {
		rep.Reason, rep.Message = wait.reason, wait.message
		return rep, wait.after, err
	}
	rep.Reason, rep.Phase = fleetv1alpha1.ReasonRestoring, fleetv1alpha1.BackupPhaseRunning
	st := mr.job
	if st.Job != nil && st.Phase != memberjob.PhaseUntrusted {
		rep.Started = st.Job.CreationTimestamp.Unix()
	}
	switch st.Phase {
	case memberjob.PhaseUntrusted:
		return untrustedRestore(rep, r.restoreJobSpec(db, cluster, src, nil), st.Job), restoreBackupPoll, nil
	case memberjob.PhaseRunning:
		rep.Message = "restore Job " + st.Job.Name + " running"
		return rep, restoreJobPoll, nil
	case memberjob.PhaseFailed:
		rep.Phase, rep.Reason, rep.Finished = fleetv1alpha1.BackupPhaseFailed, fleetv1alpha1.ReasonRestoreFailed, st.FailedAt.Unix()
		rep.Message = statusmsg.Bound("restore Job " + st.Job.Name + " failed (retried with backoff): " + st.Why)
		if st.Wait > 0 {
			return rep, st.Wait, nil
		}
	}
	if !instanceReady(observed) {
		// The workload's own events wake the sync; the poll (cached reads
		// only, and only until the restore ran) is the safety net.
		rep.Phase, rep.Message = fleetv1alpha1.BackupPhasePending, "waiting for the instance to be ready before the restore"
		return rep, restoreJobPoll, nil
	}
	owner, err := r.restoreOwner(ctx, c, db)
	if err != nil || owner == nil {
		rep.Phase, rep.Message = fleetv1alpha1.BackupPhasePending, "waiting for the workload before the restore"
		return rep, restoreJobPoll, err
	}
	spec := r.restoreJobSpec(db, cluster, src, owner)
	started, err := spec.Start(ctx, c, live, st.Next)
	if err != nil {
		return rep, 0, err
	}
	if started.Phase == memberjob.PhaseUntrusted {
		return untrustedRestore(rep, spec, started.Job), restoreBackupPoll, nil
	}
	if rep.Phase != fleetv1alpha1.BackupPhaseFailed {
		rep.Message, rep.Started = "restore Job "+started.Job.Name+" running", time.Now().Unix()
	}
	return rep, restoreJobPoll, nil
}

// untrustedRestore is the report of a member where a Job at the hub's
// restore Job name (or with its labels at an attempt's name) does not run
// the pod the hub renders: it is not taken as the restore, not deleted,
// and the member is not restored until the user deletes it.
func untrustedRestore(rep restoreReport, spec *memberjob.Spec, job *batchv1.Job) restoreReport {
	rep.Phase, rep.Reason, rep.Finished = fleetv1alpha1.BackupPhaseFailed, fleetv1alpha1.ReasonRestoreFailed, 0
	rep.Message = statusmsg.Bound(spec.UntrustedMessage(job))
	return rep
}

// restoreWait says why a member waits for its backup.
type restoreWait struct {
	reason, message string
	after           time.Duration
}

// restoreSource is the DatabaseBackup to restore in the member, or nil and
// why not: it does not exist or has not succeeded there yet (wait), or it
// failed, did not cover the member, or the member is told to restore
// another member's backup (unusable: a backup on a member's volume cannot
// be read in another member).
func (r *memberSyncReconciler) restoreSource(ctx context.Context, db *fleetv1alpha1.Database, cluster string) (*fleetv1alpha1.DatabaseBackup, restoreWait, error) {
	rf := db.Spec.RestoreFrom
	unusable := func(msg string) restoreWait {
		return restoreWait{reason: fleetv1alpha1.ReasonBackupUnusable, message: statusmsg.Bound(msg)}
	}
	if rf.FromCluster != "" && rf.FromCluster != cluster {
		return nil, unusable(fmt.Sprintf("spec.restoreFrom.fromCluster is %s: this member cannot read a backup on another member's volume", rf.FromCluster)), nil
	}
	b, err := r.restoreBackup(ctx, db)
	switch {
	case err != nil:
		return nil, restoreWait{}, err
	case b == nil:
		return nil, restoreWait{reason: fleetv1alpha1.ReasonWaitingForBackup, message: "waiting for DatabaseBackup " + rf.BackupName, after: restoreBackupPoll}, nil
	}
	rec := b.Record(cluster)
	switch {
	case rec != nil && rec.Phase == fleetv1alpha1.BackupPhaseSucceeded:
		return b, restoreWait{}, nil
	case b.Status.Phase == fleetv1alpha1.BackupPhaseFailed:
		return nil, unusable("DatabaseBackup " + b.Name + " failed"), nil
	case rec == nil && len(b.Status.Clusters) > 0, rec != nil && fleetv1alpha1.BackupPhaseFinal(rec.Phase):
		return nil, unusable("DatabaseBackup " + b.Name + " holds no successful backup of this member"), nil
	}
	return nil, restoreWait{reason: fleetv1alpha1.ReasonWaitingForBackup,
		message: "waiting for DatabaseBackup " + b.Name + " to succeed in this member", after: restoreBackupPoll}, nil
}

// restoreLocationFor names the backup a member restores: the
// DatabaseBackup and, when it has it, the location of its backup in the
// member (a hub cache read).
func (r *memberSyncReconciler) restoreLocationFor(ctx context.Context, db *fleetv1alpha1.Database, cluster string) string {
	loc := "DatabaseBackup " + db.Spec.RestoreFrom.BackupName
	b := &fleetv1alpha1.DatabaseBackup{}
	if err := r.hub.Get(ctx, client.ObjectKey{Namespace: db.Namespace, Name: db.Spec.RestoreFrom.BackupName}, b); err == nil {
		if rec := b.Record(cluster); rec != nil && rec.Location != "" {
			loc += " (" + rec.Location + ")"
		}
	}
	return statusmsg.Bound(loc)
}

// instanceReady: every instance of the member's workload is ready (the
// client Service, withheld, is not asked for).
func instanceReady(st fleetv1alpha1.ClusterStatus) bool {
	return st.ReadyReplicas > 0 && st.ReadyReplicas >= st.Replicas
}

// restoreOwner is the owner reference of the restore Job: the StatefulSet,
// or the CloudNativePG Cluster (nil while it does not exist).
func (r *memberSyncReconciler) restoreOwner(ctx context.Context, c client.Client, db *fleetv1alpha1.Database) (*metav1.OwnerReference, error) {
	key := client.ObjectKey{Namespace: db.Namespace, Name: db.Name}
	if db.EffectiveBackend() == fleetv1alpha1.BackendCloudNativePG {
		u := member.NewCNPGCluster()
		if err := c.Get(ctx, key, u); err != nil {
			return nil, client.IgnoreNotFound(err)
		}
		return &metav1.OwnerReference{APIVersion: u.GetAPIVersion(), Kind: u.GetKind(), Name: u.GetName(), UID: u.GetUID()}, nil
	}
	var sts appsv1.StatefulSet
	if err := c.Get(ctx, key, &sts); err != nil {
		return nil, client.IgnoreNotFound(err)
	}
	return &metav1.OwnerReference{APIVersion: appsv1.SchemeGroupVersion.String(), Kind: "StatefulSet", Name: sts.Name, UID: sts.UID}, nil
}

// restoreJobSpec is the restore Job machine of db in cluster, restoring
// src; owner (nil to observe) is the Job's owner reference. A Job counts
// only when it is the one the hub renders (memberjob.Spec.Trusted): one
// that only carries the restore's labels and the hub identity (anyone who
// may create Jobs in the namespace can copy them) is never taken as the
// restore's result, nor as a failed attempt.
func (r *memberSyncReconciler) restoreJobSpec(db *fleetv1alpha1.Database, cluster string, src *fleetv1alpha1.DatabaseBackup,
	owner *metav1.OwnerReference) *memberjob.Spec {
	return &memberjob.Spec{
		What: "restore", Namespace: db.Namespace, Labels: member.RestoreJobLabels(db), HubID: r.opts.HubID,
		AttemptKey: fleetv1alpha1.AnnotationRestoreAttempt, Base: rotationRetryBase, Limit: rotationRetryMax, Cluster: cluster, Ledger: r.jobs,
		Render: func(attempt int) (*batchv1.Job, error) {
			return member.RestoreJob(member.RestoreParams{
				Database: db, Cluster: cluster, SourceDatabase: src.Spec.DatabaseName, BackupID: src.BackupID(), Attempt: attempt,
				HubID: r.opts.HubID, ImageRepository: r.opts.ImageRepository, Owner: owner,
			})
		},
	}
}

// restoreBackup is the DatabaseBackup db restores from (a hub cache read; nil: none).
func (r *memberSyncReconciler) restoreBackup(ctx context.Context, db *fleetv1alpha1.Database) (*fleetv1alpha1.DatabaseBackup, error) {
	src := &fleetv1alpha1.DatabaseBackup{}
	if err := r.hub.Get(ctx, client.ObjectKey{Namespace: db.Namespace, Name: db.Spec.RestoreFrom.BackupName}, src); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, nil
		}
		return nil, fmt.Errorf("reading the database backup: %w", err)
	}
	return src, nil
}

func unixOf(t *metav1.Time) int64 {
	if t == nil {
		return 0
	}
	return t.Unix()
}
