package member

import (
	"errors"
	"maps"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// backupCleanupScript removes exactly one backup's directory (and a
// ".partial" left by a failed attempt) from the backup volume; a directory
// that is gone already is success.
const backupCleanupScript = `set -eu
for v in "$DB_NAMESPACE" "$DB_NAME" "$BACKUP_ID"; do
  case "$v" in ''|*[!a-z0-9-]*) echo "cleanup: the namespace, the name and the backup id must be [-a-z0-9]" >&2; exit 2;; esac
done
dir="$BACKUP_ROOT/$DB_NAMESPACE/$DB_NAME/$BACKUP_ID"
rm -rf -- "$dir" "$dir.partial"
echo "cleanup: removed $dir"
`

// cleanupEnv are the backup Job's variables the cleanup keeps: the names of
// the backup, never a credential.
var cleanupEnv = map[string]bool{"BACKUP_ROOT": true, "DB_NAMESPACE": true, "DB_NAME": true, "BACKUP_ID": true, "HOME": true}

// BackupCleanupJob renders, from a backup Job (BackupJob), the Job that
// removes that backup's files from the backup volume claim: the same image,
// claim and security context, the backup's names and no credential. A copy
// in S3 is not removed (the bucket's lifecycle rules are the place for that).
func BackupCleanupJob(backup *batchv1.Job, name string, labels map[string]string) (*batchv1.Job, error) {
	if backup == nil || name == "" {
		return nil, errors.New("backup cleanup job: a backup Job and a name are required")
	}
	spec := backup.Spec.Template.Spec.DeepCopy()
	var dump *corev1.Container
	for _, list := range [][]corev1.Container{spec.InitContainers, spec.Containers} {
		for i := range list {
			if list[i].Name == BackupContainerName {
				dump = &list[i]
			}
		}
	}
	if dump == nil {
		return nil, errors.New("backup cleanup job: the backup Job has no " + BackupContainerName + " container")
	}
	c := *dump
	c.Name, c.Command, c.Env = "cleanup", []string{"sh", "-c", backupCleanupScript}, nil
	for _, e := range dump.Env {
		if cleanupEnv[e.Name] && e.ValueFrom == nil {
			c.Env = append(c.Env, e)
		}
	}
	c.TerminationMessagePolicy = corev1.TerminationMessageReadFile
	spec.InitContainers, spec.Containers = nil, []corev1.Container{c}
	var volumes []corev1.Volume
	for _, v := range spec.Volumes {
		if v.Name == backupVolume || v.Name == tmpVolume {
			volumes = append(volumes, v)
		}
	}
	spec.Volumes = volumes
	return &batchv1.Job{
		TypeMeta:   typeMeta(batchv1.SchemeGroupVersion, "Job"),
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: backup.Namespace, Labels: maps.Clone(labels)},
		Spec: batchv1.JobSpec{
			BackoffLimit:          ptrTo(int32(2)),
			ActiveDeadlineSeconds: ptrTo(int64(600)),
			Template:              corev1.PodTemplateSpec{Spec: *spec},
		},
	}, nil
}
