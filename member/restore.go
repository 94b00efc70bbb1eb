package member

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"strconv"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	fleetv1alpha1 "github.com/fleetdb/fleetdb/apis/v1alpha1"
)

// Restores in a member: a Database created with spec.restoreFrom gets, in
// each member, a Job (RestoreJob) that loads the backup a DatabaseBackup took
// there into the new, empty instance, before the client Service "<name>"
// exists (the hub withholds it until the restore succeeded). The Job reads
// the backup from the source Database's backup volume claim (read-only) and
// connects to the instance directly: pod 0 through the headless Service on
// the StatefulSet backend, CloudNativePG's "<name>-rw" Service on that
// backend; the credentials come from the member Secret as environment
// variables, never on a command line.

// restoreContainerName is the container of the restore Job.
const restoreContainerName = "restore"

// DefaultRestoreDeadline bounds one restore Job.
const DefaultRestoreDeadline = 6 * 3600

// RestoreParams is everything RestoreJob needs.
type RestoreParams struct {
	// Database is the hub object being restored into.
	Database *fleetv1alpha1.Database
	// Cluster is the member cluster name.
	Cluster string
	// SourceDatabase is the Database the backup was taken of (its claim
	// "<source>-backups" holds the backup).
	SourceDatabase string
	// BackupID is the backup's directory under /backups/<namespace>/<source>/.
	BackupID string
	// Attempt numbers the Job (1, 2, ... after failures).
	Attempt int
	// HubID is the hub identity (LabelHubID) on the Job.
	HubID string
	// ImageRepository as in Params.
	ImageRepository string
	// Owner, when set, owns the Job (the StatefulSet or CloudNativePG
	// Cluster), so that the garbage collector removes it with the workload.
	Owner *metav1.OwnerReference
}

// RestoreHash is the LabelRestore value of a Database's restore Jobs.
func RestoreHash(uid string) string {
	sum := sha256.Sum256([]byte(uid))
	return hex.EncodeToString(sum[:5])
}

// RestoreJobName is the name of a restore Job: at most 63 characters for a
// Database name of at most 40.
func RestoreJobName(db, uid string, attempt int) string {
	return db + "-restore-" + RestoreHash(uid) + "-" + strconv.Itoa(attempt)
}

// RestoreJobLabels select the restore Jobs of a Database (every attempt).
func RestoreJobLabels(db *fleetv1alpha1.Database) map[string]string {
	l := Labels(db)
	l[fleetv1alpha1.LabelRestore] = RestoreHash(string(db.UID))
	return l
}

// RestoreHost is the address the restore Job connects to: pod 0 of the
// StatefulSet through the headless Service, or CloudNativePG's primary
// Service "<name>-rw" (never the client Service, which does not exist yet).
func RestoreHost(db *fleetv1alpha1.Database) string {
	if db.EffectiveBackend() == fleetv1alpha1.BackendCloudNativePG {
		return db.Name + "-rw"
	}
	return db.Name + "-0." + headlessName(db.Name)
}

// RestoreJob renders the Job that restores a backup into the Database's
// instance in one member.
func RestoreJob(p RestoreParams) (*batchv1.Job, error) {
	db := p.Database
	if db == nil || db.Name == "" || db.Namespace == "" || p.Attempt < 1 {
		return nil, errors.New("restore job: Database name, namespace and an attempt >= 1 are required")
	}
	if p.SourceDatabase == "" || len(p.BackupID) > 63 || !backupIDPattern.MatchString(p.BackupID) {
		return nil, fmt.Errorf("restore job %s/%s: a source Database and a backup ID of [-a-z0-9] (at most 63) are required", db.Namespace, db.Name)
	}
	r, script, err := jobRenderer(db, p.Cluster, p.ImageRepository, "restore job", RestoreScript)
	if err != nil {
		return nil, err
	}
	image := r.clientImage()
	labels := maps.Clone(RestoreJobLabels(db))
	if p.HubID != "" {
		labels[fleetv1alpha1.LabelHubID] = p.HubID
	}
	meta := metav1.ObjectMeta{
		Name: RestoreJobName(db.Name, string(db.UID), p.Attempt), Namespace: db.Namespace, Labels: labels,
		Annotations: map[string]string{fleetv1alpha1.AnnotationRestoreAttempt: strconv.Itoa(p.Attempt)},
	}
	if p.Owner != nil {
		meta.OwnerReferences = []metav1.OwnerReference{*p.Owner}
	}
	c := backupContainer(restoreContainerName, image, script, append(restoreTargetEnv(p), restoreEngineEnv(r)...))
	c.VolumeMounts[0].ReadOnly = true
	return &batchv1.Job{
		TypeMeta:   typeMeta(batchv1.SchemeGroupVersion, "Job"),
		ObjectMeta: meta,
		Spec: batchv1.JobSpec{
			BackoffLimit:          ptrTo(int32(0)),
			ActiveDeadlineSeconds: ptrTo(int64(DefaultRestoreDeadline)),
			Template:              corev1.PodTemplateSpec{Spec: restorePodSpec(p, c)},
		},
	}, nil
}

// restorePodSpec is the restore Job's pod: the backup claim of the source
// Database, read-only, and a scratch directory.
func restorePodSpec(p RestoreParams, c corev1.Container) corev1.PodSpec {
	return corev1.PodSpec{
		AutomountServiceAccountToken: ptrTo(false),
		EnableServiceLinks:           ptrTo(false),
		RestartPolicy:                corev1.RestartPolicyNever,
		SecurityContext:              podSecurityContext(),
		Containers:                   []corev1.Container{c},
		Volumes: []corev1.Volume{
			{Name: backupVolume, VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{
				ClaimName: BackupClaimName(p.SourceDatabase), ReadOnly: true,
			}}},
			{Name: tmpVolume, VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
		},
	}
}

// restoreTargetEnv names the backup to restore and where the result goes.
func restoreTargetEnv(p RestoreParams) []corev1.EnvVar {
	return []corev1.EnvVar{
		{Name: "BACKUP_DIR", Value: BackupDir(p.Database.Namespace, p.SourceDatabase, p.BackupID)},
		{Name: "RESULT_FILE", Value: terminationLog},
		{Name: "HOME", Value: "/tmp"},
	}
}

// restoreEngineEnv is the connection to the instance with the credentials
// of the member Secret (the restored Database's own).
func restoreEngineEnv(r renderer) []corev1.EnvVar {
	secret := secretName(r.db.Name)
	env := []corev1.EnvVar{
		{Name: "DB_HOST", Value: RestoreHost(r.db)},
		{Name: "DB_PORT", Value: strconv.Itoa(int(r.eng.port))},
	}
	if r.db.Spec.Engine == fleetv1alpha1.EngineMySQL {
		root := secretEnv("ROOT_PASSWORD", secret, CredentialsRootPasswordKey)
		root.ValueFrom.SecretKeyRef.Optional = ptrTo(true)
		return append(env, root, secretEnv("APP_PASSWORD", secret, CredentialsPasswordKey))
	}
	return append(env, secretEnv("PGUSER", secret, CredentialsUsernameKey), secretEnv("PGPASSWORD", secret, CredentialsPasswordKey))
}

// RestoreScript returns the shell script a restore Job of engine e runs.
func RestoreScript(e fleetv1alpha1.Engine) (string, error) {
	switch e {
	case fleetv1alpha1.EnginePostgres:
		return postgresRestore, nil
	case fleetv1alpha1.EngineMySQL:
		return mysqlRestore, nil
	}
	return "", fmt.Errorf("unknown engine %q", e)
}
