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

// jobSpec is the backup Job machine of b in cluster: one attempt, at
// backupJobName, running the pod the hub renders for it (memberjob.SamePod,
// the check the final backup makes too).
func (r *backupReconciler) jobSpec(b *fleetv1alpha1.DatabaseBackup, db *fleetv1alpha1.Database, cluster string) *memberjob.Spec {
	return &memberjob.Spec{
		What: "backup", Namespace: b.Namespace, Labels: backupJobLabels(b, r.opts.HubID), HubID: r.opts.HubID,
		AttemptKey: fleetv1alpha1.AnnotationBackupAttempt, Cluster: cluster, Ledger: r.opts.Jobs,
		Render: func(int) (*batchv1.Job, error) {
			return member.BackupJob(member.BackupParams{
				Database: db, Cluster: cluster, Kind: fleetv1alpha1.BackupKindOnDemand, ID: backupID(b), Attempt: 1,
				JobName: backupJobName(b), HubID: r.opts.HubID, ImageRepository: r.opts.ImageRepository,
				Labels: map[string]string{fleetv1alpha1.LabelInstance: b.Name},
			})
		},
	}
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
