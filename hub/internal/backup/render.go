package backup

import (
	"context"
	"fmt"
	"maps"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleetv1alpha1 "github.com/fleetdb/fleetdb/apis/v1alpha1"
	"github.com/fleetdb/fleetdb/hub/internal/memberjob"
	"github.com/fleetdb/fleetdb/member"
)

// backupID is the directory of a DatabaseBackup's files in each member
// (DatabaseBackup.BackupID).
func backupID(b *fleetv1alpha1.DatabaseBackup) string { return b.BackupID() }

// backupJobLabels select a DatabaseBackup's member Jobs (backup and cleanup).
func backupJobLabels(b *fleetv1alpha1.DatabaseBackup, hubID string) map[string]string {
	db := &fleetv1alpha1.Database{}
	db.Namespace, db.Name = b.Namespace, b.Spec.DatabaseName
	return member.BackupJobLabels(db, hubID, fleetv1alpha1.BackupKindOnDemand, backupID(b))
}

// ownsBackupJob: the Job is this hub's Job of this DatabaseBackup.
func ownsBackupJob(j *batchv1.Job, b *fleetv1alpha1.DatabaseBackup, hubID string) bool {
	return memberjob.Own(j, hubID) && j.Labels[fleetv1alpha1.LabelBackupID] == backupID(b) &&
		j.Labels[fleetv1alpha1.LabelBackupKind] == fleetv1alpha1.BackupKindOnDemand
}

// untrusted says why job, which carries this DatabaseBackup's name and
// labels, is not taken as its backup ("" when it is): its pod must run what
// the hub renders for it (memberjob.SamePod), the check the final backup
// makes too. Without the Database nothing can be rendered to check against:
// the Job is not trusted (data safety: no backup is recorded that the hub
// cannot vouch for).
func (r *backupReconciler) untrusted(job *batchv1.Job, b *fleetv1alpha1.DatabaseBackup, db *fleetv1alpha1.Database, cluster string) string {
	if db != nil {
		if want := r.renderedJob(db, b, cluster); want != nil && memberjob.SamePod(job, want) {
			return ""
		}
		return "Job " + job.Name + " in the member carries this backup's name and labels but is not the backup Job the hub runs " +
			"(its pod differs): not trusted"
	}
	return "the Database is gone: Job " + job.Name + " cannot be checked against the backup Job the hub runs; not trusted"
}

// renderedJob is the backup Job the hub renders for b in cluster (nil when it cannot be rendered).
func (r *backupReconciler) renderedJob(db *fleetv1alpha1.Database, b *fleetv1alpha1.DatabaseBackup, cluster string) *batchv1.Job {
	objs, err := renderBackup(db, b, cluster, r.opts)
	if err != nil {
		return nil
	}
	for _, obj := range objs {
		if j, ok := obj.(*batchv1.Job); ok {
			return j
		}
	}
	return nil
}

// renderBackup renders the member's backup volume claim (created when
// missing, never updated) and the DatabaseBackup's backup Job there.
func renderBackup(db *fleetv1alpha1.Database, b *fleetv1alpha1.DatabaseBackup, cluster string, opts Options) ([]client.Object, error) {
	pvc, err := member.BackupVolumeClaim(db, opts.HubID)
	if err != nil {
		return nil, err
	}
	job, err := member.BackupJob(member.BackupParams{
		Database: db, Cluster: cluster, Kind: fleetv1alpha1.BackupKindOnDemand, ID: backupID(b), Attempt: 1,
		JobName: backupJobName(b), HubID: opts.HubID, ImageRepository: opts.ImageRepository,
		Labels: map[string]string{fleetv1alpha1.LabelInstance: b.Name},
	})
	if err != nil {
		return nil, err
	}
	return []client.Object{pvc, job}, nil
}

// renderCleanup renders the cleanup Job from the backup Job.
func renderCleanup(b *fleetv1alpha1.DatabaseBackup, backupJob *batchv1.Job, hubID string) (*batchv1.Job, error) {
	l := maps.Clone(backupJobLabels(b, hubID))
	return member.BackupCleanupJob(backupJob, backupCleanupJobName(b), l)
}

// backupLocation is a member record's location: the claim and path the
// backup reported (and its S3 URL), or where it is by the layout, and its size.
func backupLocation(ctx context.Context, live client.Reader, b *fleetv1alpha1.DatabaseBackup, db *fleetv1alpha1.Database, job *batchv1.Job) (string, *int64, error) {
	loc := "persistentvolumeclaim/" + backupClaimName(b) + ":" + backupDir(b)
	if db != nil {
		loc = member.BackupLocation(db, backupID(b))
	}
	var pods corev1.PodList
	if err := live.List(ctx, &pods, client.InNamespace(job.Namespace), client.MatchingLabels{batchv1.JobNameLabel: job.Name}); err != nil {
		if apierrors.IsForbidden(err) {
			// A member whose RBAC predates the pods rule: the layout says where, the size stays unknown.
			return loc, nil, nil
		}
		return "", nil, fmt.Errorf("listing the pods of job %s: %w", job.Name, err)
	}
	for i := range pods.Items {
		dump, upload, ok := member.BackupResultsFromPod(&pods.Items[i])
		if !ok || dump.Phase != fleetv1alpha1.BackupPhaseSucceeded {
			continue
		}
		loc = "persistentvolumeclaim/" + backupClaimName(b) + ":" + dump.Path
		if upload != nil && upload.URL != "" {
			loc += " " + upload.URL
		}
		size := dump.SizeBytes
		return loc, &size, nil
	}
	return loc, nil, nil
}

// backupClaimName is the backup volume claim of the DatabaseBackup's Database.
func backupClaimName(b *fleetv1alpha1.DatabaseBackup) string {
	return member.BackupClaimName(b.Spec.DatabaseName)
}

// backupDir is where a DatabaseBackup's files are on each member's backup volume.
func backupDir(b *fleetv1alpha1.DatabaseBackup) string {
	return member.BackupDir(b.Namespace, b.Spec.DatabaseName, backupID(b))
}
