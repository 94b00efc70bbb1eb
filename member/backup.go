package member

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"regexp"
	"strconv"
	"strings"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleetv1alpha1 "github.com/fleetdb/fleetdb/apis/v1alpha1"
)

// Backups in a member: a Job (BackupJob) dumps the Database through its
// client Service "<name>" into the backup volume claim "<name>-backups"
// (BackupVolumeClaim), under BackupDir, and reports its result in its
// container's termination message (ParseBackupResult). Neither the claim nor
// the Job carries the labels that find a Database's member objects
// (SelectorFor): no teardown, prune or sweep ever deletes them.

// Paths and names of the backup Job.
const (
	// BackupMountPath is where the backup volume claim is mounted.
	BackupMountPath = "/backups"
	// BackupContainerName is the container that dumps the database (an init
	// container when an S3 upload follows); its termination message is the
	// BackupResult.
	BackupContainerName = "backup"
	// BackupUploadContainerName is the container that copies the backup to S3.
	BackupUploadContainerName = "s3-upload"
	// BackupManifestFile is the manifest in every backup directory.
	BackupManifestFile = "manifest.json"
	// DefaultS3Image is the S3 client image of the upload step when
	// BackupParams.S3Image is empty.
	DefaultS3Image = "docker.io/amazon/aws-cli:2.22.35"
	// DefaultBackupDeadline bounds a backup Job when BackupParams.ActiveDeadline is zero.
	DefaultBackupDeadline = 6 * time.Hour
	// backupBackoffLimit: the Job retries its pod once; the hub creates a
	// new attempt (a new Job) after that, with its own backoff.
	backupBackoffLimit = 1
	// terminationLog is where the Job's containers write their result.
	terminationLog = corev1.TerminationMessagePathDefault
	tmpVolume      = "tmp"
	backupVolume   = "backups"
)

// BackupParams is everything BackupJob needs.
type BackupParams struct {
	// Database is the hub object (name, namespace, uid, engine, backend, spec.backup).
	Database *fleetv1alpha1.Database
	// Cluster is the member cluster name.
	Cluster string
	// Kind is fleetv1alpha1.BackupKindFinal or BackupKindOnDemand.
	Kind string
	// ID names the backup: its directory under
	// /backups/<namespace>/<database>/ (BackupDir). Lower-case letters,
	// digits and '-', at most 63 characters. The same ID in every attempt:
	// a Job run again after the backup completed reports it and writes
	// nothing (see BackupScript).
	ID string
	// Attempt numbers the Job (1, 2, ... after failures).
	Attempt int
	// JobName is the Job's name; BackupJobName(Database.Name, ID, Attempt) when empty.
	JobName string
	// HubID is the hub identity (LabelHubID) on the Job, so that a hub
	// reads and deletes only its own Jobs.
	HubID string
	// ImageRepository as in Params: the engine image's repository.
	ImageRepository string
	// S3Image replaces DefaultS3Image (air-gapped fleets).
	S3Image string
	// Labels are added to the Job's labels (e.g. the DatabaseBackup's name).
	Labels map[string]string
	// ActiveDeadline bounds the Job; DefaultBackupDeadline when zero.
	ActiveDeadline time.Duration
}

// BackupClaimName is the name of a Database's backup volume claim.
func BackupClaimName(db string) string { return db + "-backups" }

// BackupDir is the directory of one backup on the backup volume.
func BackupDir(namespace, db, id string) string {
	return BackupMountPath + "/" + namespace + "/" + db + "/" + id
}

// FinalBackupID is the ID of the final backup of the Database with this
// UID: deterministic, so a hub that restarts finds the same backup.
func FinalBackupID(uid string) string { return "final-" + uid }

// BackupJobName is the name of a backup Job: at most 62 characters for a
// Database name of at most 40.
func BackupJobName(db, id string, attempt int) string {
	sum := sha256.Sum256([]byte(id))
	return db + "-backup-" + hex.EncodeToString(sum[:5]) + "-" + strconv.Itoa(attempt)
}

// BackupLocation is the BackupRecord location of a backup: the claim and the
// path, and the S3 URL when the Database copies backups there.
func BackupLocation(db *fleetv1alpha1.Database, id string) string {
	loc := "persistentvolumeclaim/" + BackupClaimName(db.Name) + ":" + BackupDir(db.Namespace, db.Name, id)
	if s3 := backupS3(db); s3 != nil {
		loc += " " + s3URL(s3, db.Namespace, db.Name, id)
	}
	return loc
}

// BackupObjectLabels are the labels of a Database's backup volume claim, and
// (with LabelBackupID and LabelBackupKind) of its backup Jobs.
func BackupObjectLabels(db *fleetv1alpha1.Database, hubID string) map[string]string {
	l := map[string]string{
		fleetv1alpha1.LabelManagedBy:         fleetv1alpha1.ManagedByValue,
		fleetv1alpha1.LabelComponent:         fleetv1alpha1.ComponentBackup,
		fleetv1alpha1.LabelBackupOfNamespace: db.Namespace,
		fleetv1alpha1.LabelBackupOfName:      db.Name,
	}
	if hubID != "" {
		l[fleetv1alpha1.LabelHubID] = hubID
	}
	return l
}

// BackupJobLabels select the backup Jobs of a backup (every attempt).
func BackupJobLabels(db *fleetv1alpha1.Database, hubID, kind, id string) map[string]string {
	l := BackupObjectLabels(db, hubID)
	l[fleetv1alpha1.LabelBackupKind] = kind
	l[fleetv1alpha1.LabelBackupID] = id
	return l
}

// BackupVolumeClaim is the Database's backup volume claim "<name>-backups":
// spec.backup.volume.size (or spec.storage.size), in
// spec.backup.volume.storageClassName (or the member's default class). It
// has no owner and the hub never deletes it (the member's admission policy
// refuses that too): it outlives the Database. Create it when missing; never
// update it.
func BackupVolumeClaim(db *fleetv1alpha1.Database, hubID string) (*corev1.PersistentVolumeClaim, error) {
	if db == nil || db.Name == "" || db.Namespace == "" {
		return nil, errors.New("backup volume claim: no Database name or namespace")
	}
	size := db.Spec.Storage.Size.DeepCopy()
	var class string
	if b := db.Spec.Backup; b != nil {
		if b.Volume.Size != nil {
			size = b.Volume.Size.DeepCopy()
		}
		class = b.Volume.StorageClassName
	}
	if size.Sign() <= 0 {
		return nil, fmt.Errorf("backup volume claim %s/%s: no size", db.Namespace, db.Name)
	}
	l := BackupObjectLabels(db, hubID)
	l[fleetv1alpha1.LabelBackupVolume] = "true"
	pvc := &corev1.PersistentVolumeClaim{
		TypeMeta:   typeMeta(corev1.SchemeGroupVersion, "PersistentVolumeClaim"),
		ObjectMeta: metav1.ObjectMeta{Name: BackupClaimName(db.Name), Namespace: db.Namespace, Labels: l},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Resources:   corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: size}},
		},
	}
	if class != "" {
		pvc.Spec.StorageClassName = ptrTo(class)
	}
	return pvc, nil
}

var backupIDPattern = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`)

// BackupJob renders the Job that backs the Database up in one member: the
// engine's dump tools in the engine's image (CloudNativePG's operand image
// on that backend), connected through the client Service "<name>" with the
// credentials of the member Secret (environment variables from the Secret:
// never on a command line, never in the output), writing into the backup
// volume claim; and, when spec.backup.s3 is set, a second step that copies
// the backup to the bucket with the credentials of the member Secret
// spec.backup.s3.credentialsSecretName. The Job has no owner and no TTL: the
// hub reads the result, then deletes it.
func BackupJob(p BackupParams) (*batchv1.Job, error) {
	db := p.Database
	if db == nil || db.Name == "" || db.Namespace == "" {
		return nil, errors.New("backup job: no Database name or namespace")
	}
	if p.Attempt < 1 || len(p.ID) > 63 || !backupIDPattern.MatchString(p.ID) {
		return nil, fmt.Errorf("backup job %s/%s: an attempt >= 1 and an ID of [-a-z0-9] (at most 63) are required", db.Namespace, db.Name)
	}
	if p.Kind != fleetv1alpha1.BackupKindFinal && p.Kind != fleetv1alpha1.BackupKindOnDemand {
		return nil, fmt.Errorf("backup job %s/%s: unknown kind %q", db.Namespace, db.Name, p.Kind)
	}
	r, script, err := jobRenderer(db, p.Cluster, p.ImageRepository, "backup job", BackupScript)
	if err != nil {
		return nil, err
	}
	image := r.clientImage()
	name := p.JobName
	if name == "" {
		name = BackupJobName(db.Name, p.ID, p.Attempt)
	}
	labels := maps.Clone(p.Labels)
	if labels == nil {
		labels = map[string]string{}
	}
	maps.Copy(labels, BackupJobLabels(db, p.HubID, p.Kind, p.ID))
	deadline := p.ActiveDeadline
	if deadline <= 0 {
		deadline = DefaultBackupDeadline
	}
	pod := backupPodSpec(r, p, image, script)
	var podLabels map[string]string
	if db.Labels[fleetv1alpha1.LabelTestFailBackup] == "true" {
		podLabels = map[string]string{fleetv1alpha1.LabelTestFailBackup: "true"}
	}
	return &batchv1.Job{
		TypeMeta: typeMeta(batchv1.SchemeGroupVersion, "Job"),
		ObjectMeta: metav1.ObjectMeta{
			Name: name, Namespace: db.Namespace, Labels: labels,
			Annotations: map[string]string{fleetv1alpha1.AnnotationBackupAttempt: strconv.Itoa(p.Attempt)},
		},
		Spec: batchv1.JobSpec{
			BackoffLimit:          ptrTo(int32(backupBackoffLimit)),
			ActiveDeadlineSeconds: ptrTo(int64(deadline / time.Second)),
			Template:              corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: podLabels}, Spec: pod},
		},
	}, nil
}

// backupPodSpec is the backup Job's pod: the dump container, then the S3
// upload when the Database has spec.backup.s3.
func backupPodSpec(r renderer, p BackupParams, image, script string) corev1.PodSpec {
	db := r.db
	dump := backupContainer(BackupContainerName, image, script, append(backupTargetEnv(p), backupEngineEnv(r)...))
	pod := corev1.PodSpec{
		AutomountServiceAccountToken: ptrTo(false),
		EnableServiceLinks:           ptrTo(false),
		RestartPolicy:                corev1.RestartPolicyNever,
		SecurityContext:              podSecurityContext(),
		Volumes: []corev1.Volume{
			{Name: backupVolume, VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{
				ClaimName: BackupClaimName(db.Name),
			}}},
			{Name: tmpVolume, VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
		},
	}
	s3 := backupS3(db)
	if s3 == nil {
		pod.Containers = []corev1.Container{dump}
		return pod
	}
	s3Image := p.S3Image
	if s3Image == "" {
		s3Image = DefaultS3Image
	}
	pod.InitContainers = []corev1.Container{dump}
	upload := backupContainer(BackupUploadContainerName, s3Image, s3UploadScript, append(backupTargetEnv(p), s3Env(s3)...))
	upload.VolumeMounts[0].ReadOnly = true
	pod.Containers = []corev1.Container{upload}
	return pod
}

func backupS3(db *fleetv1alpha1.Database) *fleetv1alpha1.S3BackupSpec {
	if db.Spec.Backup == nil {
		return nil
	}
	return db.Spec.Backup.S3
}

// backupContainer runs script with sh -c; its result goes to the termination
// message file only (FallbackToLogsOnError would put the log there).
func backupContainer(name, image, script string, env []corev1.EnvVar) corev1.Container {
	return corev1.Container{
		Name:    name,
		Image:   image,
		Command: []string{"sh", "-c", script},
		Env:     env,
		VolumeMounts: []corev1.VolumeMount{
			{Name: backupVolume, MountPath: BackupMountPath},
			{Name: tmpVolume, MountPath: "/tmp"},
		},
		TerminationMessagePath:   terminationLog,
		TerminationMessagePolicy: corev1.TerminationMessageReadFile,
		SecurityContext:          containerSecurityContext(),
	}
}

// backupTargetEnv names the backup: where it goes and where the result is written.
func backupTargetEnv(p BackupParams) []corev1.EnvVar {
	return []corev1.EnvVar{
		{Name: "BACKUP_ROOT", Value: BackupMountPath},
		{Name: "DB_NAMESPACE", Value: p.Database.Namespace},
		{Name: "DB_NAME", Value: p.Database.Name},
		{Name: "BACKUP_ID", Value: p.ID},
		{Name: "RESULT_FILE", Value: terminationLog},
		{Name: "HOME", Value: "/tmp"},
	}
}

// backupEngineEnv is the connection: the client Service and the credentials
// from the member Secret. postgres connects as the application user (its
// password in PGPASSWORD, read by libpq); mysql as root with root's password
// (the application password when the Secret has no root-password, as the
// server was initialised), written by the script to a private option file.
func backupEngineEnv(r renderer) []corev1.EnvVar {
	secret := secretName(r.db.Name)
	env := []corev1.EnvVar{
		{Name: "DB_HOST", Value: r.db.Name},
		{Name: "DB_PORT", Value: strconv.Itoa(int(r.eng.port))},
	}
	if r.db.Spec.Engine == fleetv1alpha1.EngineMySQL {
		root := secretEnv("ROOT_PASSWORD", secret, CredentialsRootPasswordKey)
		root.ValueFrom.SecretKeyRef.Optional = ptrTo(true)
		return append(env, root, secretEnv("APP_PASSWORD", secret, CredentialsPasswordKey))
	}
	return append(env, secretEnv("PGUSER", secret, CredentialsUsernameKey), secretEnv("PGPASSWORD", secret, CredentialsPasswordKey))
}

// s3Env is the upload step's bucket and the credentials of the member
// Secret the platform team provides.
func s3Env(s3 *fleetv1alpha1.S3BackupSpec) []corev1.EnvVar {
	env := []corev1.EnvVar{
		{Name: "S3_ENDPOINT", Value: s3.Endpoint},
		{Name: "S3_BUCKET", Value: s3.Bucket},
		{Name: "S3_PREFIX", Value: strings.Trim(s3.Prefix, "/")},
		secretEnv("AWS_ACCESS_KEY_ID", s3.CredentialsSecretName, "AWS_ACCESS_KEY_ID"),
		secretEnv("AWS_SECRET_ACCESS_KEY", s3.CredentialsSecretName, "AWS_SECRET_ACCESS_KEY"),
	}
	if s3.Region != "" {
		env = append(env, corev1.EnvVar{Name: "AWS_DEFAULT_REGION", Value: s3.Region})
	}
	return env
}

func s3URL(s3 *fleetv1alpha1.S3BackupSpec, namespace, db, id string) string {
	prefix := strings.Trim(s3.Prefix, "/")
	if prefix != "" {
		prefix += "/"
	}
	return "s3://" + s3.Bucket + "/" + prefix + namespace + "/" + db + "/" + id + "/"
}

// HasWorkload reports whether the member runs a workload of the Database o
// (a StatefulSet, or a CloudNativePG Cluster where that API is served): a
// backup has something to read. Only o's objects count (see Owner).
func HasWorkload(ctx context.Context, c client.Reader, o Owner) (bool, error) {
	sts, err := listManaged(ctx, c, workloadKinds[0], o)
	if err != nil {
		return false, err
	}
	if len(sts) > 0 {
		return true, nil
	}
	clusters, err := listManagedClusters(ctx, c, o)
	return len(clusters) > 0, err
}
