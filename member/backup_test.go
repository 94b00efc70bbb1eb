package member_test

import (
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/labels"

	fleetv1alpha1 "github.com/fleetdb/fleetdb/apis/v1alpha1"
	"github.com/fleetdb/fleetdb/member"
)

func backupParams(db *fleetv1alpha1.Database) member.BackupParams {
	return member.BackupParams{
		Database: db, Cluster: "eu-1", Kind: fleetv1alpha1.BackupKindFinal,
		ID: member.FinalBackupID(string(db.UID)), Attempt: 2, HubID: "hub-a",
	}
}

func TestBackupJobPostgresStatefulSet(t *testing.T) {
	g := NewWithT(t)
	db := testDatabase(fleetv1alpha1.EnginePostgres)
	p := backupParams(db)
	job, err := member.BackupJob(p)
	g.Expect(err).NotTo(HaveOccurred())

	g.Expect(job.Name).To(Equal(member.BackupJobName("orders", p.ID, 2)))
	g.Expect(len(job.Name)).To(BeNumerically("<=", 63))
	g.Expect(job.Namespace).To(Equal("team-a"))
	g.Expect(job.Labels).To(Equal(member.BackupJobLabels(db, "hub-a", fleetv1alpha1.BackupKindFinal, p.ID)))
	g.Expect(job.Labels).To(HaveKeyWithValue(fleetv1alpha1.LabelHubID, "hub-a"))
	g.Expect(member.SelectorFor("team-a", "orders").Matches(labels.Set(job.Labels))).To(BeFalse(),
		"no teardown, prune or sweep may find a backup Job")
	g.Expect(job.OwnerReferences).To(BeEmpty(), "the Job outlives the workload; the hub deletes it")
	g.Expect(job.Annotations).To(HaveKeyWithValue(fleetv1alpha1.AnnotationBackupAttempt, "2"))
	g.Expect(*job.Spec.BackoffLimit).To(BeNumerically("<=", 2))
	g.Expect(*job.Spec.ActiveDeadlineSeconds).To(Equal(int64(member.DefaultBackupDeadline / time.Second)))
	g.Expect(job.Spec.TTLSecondsAfterFinished).To(BeNil(), "the hub reads the result before the Job goes")

	pod := job.Spec.Template.Spec
	g.Expect(job.Spec.Template.Labels).To(BeEmpty(), "the Job's pod must not match the client Service")
	g.Expect(pod.RestartPolicy).To(Equal(corev1.RestartPolicyNever))
	g.Expect(*pod.AutomountServiceAccountToken).To(BeFalse())
	g.Expect(*pod.SecurityContext.RunAsNonRoot).To(BeTrue())
	g.Expect(pod.InitContainers).To(BeEmpty())
	g.Expect(pod.Containers).To(HaveLen(1))
	g.Expect(pod.Volumes).To(ContainElement(HaveField("VolumeSource.PersistentVolumeClaim.ClaimName", "orders-backups")))
	c := pod.Containers[0]
	g.Expect(c.Name).To(Equal(member.BackupContainerName))
	g.Expect(c.Image).To(Equal("docker.io/library/postgres:17"))
	g.Expect(c.Command[:2]).To(Equal([]string{"sh", "-c"}))
	script, err := member.BackupScript(fleetv1alpha1.EnginePostgres)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(c.Command[2]).To(Equal(script))
	g.Expect(script).To(ContainSubstring("pg_dump -w -Fc"))
	g.Expect(script).To(ContainSubstring("pg_dumpall -w --globals-only --no-role-passwords"))
	g.Expect(c.TerminationMessagePolicy).To(Equal(corev1.TerminationMessageReadFile), "never the log")
	g.Expect(c.TerminationMessagePath).To(Equal(corev1.TerminationMessagePathDefault))
	g.Expect(c.VolumeMounts).To(ContainElement(HaveField("MountPath", member.BackupMountPath)))
	g.Expect(envSources(c)).To(Equal(map[string]string{
		"BACKUP_ROOT":  "/backups",
		"DB_NAMESPACE": "team-a",
		"DB_NAME":      "orders",
		"BACKUP_ID":    p.ID,
		"RESULT_FILE":  "/dev/termination-log",
		"HOME":         "/tmp",
		"DB_HOST":      "orders", // the client Service of both backends
		"DB_PORT":      "5432",
		"PGUSER":       "orders-credentials/username",
		"PGPASSWORD":   "orders-credentials/password",
	}))
}

func TestBackupJobCloudNativePGUsesTheOperandImage(t *testing.T) {
	g := NewWithT(t)
	db := testDatabase(fleetv1alpha1.EnginePostgres, func(db *fleetv1alpha1.Database) {
		db.Spec.Backend = fleetv1alpha1.BackendCloudNativePG
		db.Spec.Version = "16.4"
	})
	job, err := member.BackupJob(backupParams(db))
	g.Expect(err).NotTo(HaveOccurred())
	c := job.Spec.Template.Spec.Containers[0]
	g.Expect(c.Image).To(Equal("ghcr.io/cloudnative-pg/postgresql:16.4-system-trixie"))
	g.Expect(envSources(c)).To(HaveKeyWithValue("DB_HOST", "orders"))
	g.Expect(envSources(c)).To(HaveKeyWithValue("PGPASSWORD", "orders-credentials/password"))
}

func TestBackupJobMySQL(t *testing.T) {
	g := NewWithT(t)
	db := testDatabase(fleetv1alpha1.EngineMySQL, func(db *fleetv1alpha1.Database) { db.Spec.Replicas = 1 })
	job, err := member.BackupJob(backupParams(db))
	g.Expect(err).NotTo(HaveOccurred())
	c := job.Spec.Template.Spec.Containers[0]
	g.Expect(c.Image).To(Equal("docker.io/library/mysql:8.4"))
	g.Expect(c.Command[2]).To(ContainSubstring("mysqldump --defaults-file="))
	g.Expect(c.Command[2]).To(ContainSubstring("--single-transaction --routines --events"))
	env := envSources(c)
	g.Expect(env).To(HaveKeyWithValue("DB_PORT", "3306"))
	g.Expect(env).To(HaveKeyWithValue("ROOT_PASSWORD", "orders-credentials/root-password"))
	g.Expect(env).To(HaveKeyWithValue("APP_PASSWORD", "orders-credentials/password"))
	for _, e := range c.Env {
		if e.Name == "ROOT_PASSWORD" {
			g.Expect(*e.ValueFrom.SecretKeyRef.Optional).To(BeTrue(), "older Secrets have no root-password")
		}
	}
}

func TestBackupJobS3Upload(t *testing.T) {
	g := NewWithT(t)
	db := testDatabase(fleetv1alpha1.EnginePostgres, func(db *fleetv1alpha1.Database) {
		db.Spec.Backup = &fleetv1alpha1.BackupSpec{S3: &fleetv1alpha1.S3BackupSpec{
			Endpoint: "https://s3.example.test", Bucket: "backups", Prefix: "/fleet/", Region: "eu-1",
			CredentialsSecretName: "s3-creds",
		}}
	})
	p := backupParams(db)
	job, err := member.BackupJob(p)
	g.Expect(err).NotTo(HaveOccurred())
	pod := job.Spec.Template.Spec
	g.Expect(pod.InitContainers).To(HaveLen(1), "the dump runs first")
	g.Expect(pod.InitContainers[0].Name).To(Equal(member.BackupContainerName))
	g.Expect(pod.Containers).To(HaveLen(1))
	up := pod.Containers[0]
	g.Expect(up.Name).To(Equal(member.BackupUploadContainerName))
	g.Expect(up.Image).To(Equal(member.DefaultS3Image))
	g.Expect(up.TerminationMessagePolicy).To(Equal(corev1.TerminationMessageReadFile))
	g.Expect(up.VolumeMounts[0].ReadOnly).To(BeTrue())
	env := envSources(up)
	g.Expect(env).To(HaveKeyWithValue("AWS_ACCESS_KEY_ID", "s3-creds/AWS_ACCESS_KEY_ID"))
	g.Expect(env).To(HaveKeyWithValue("AWS_SECRET_ACCESS_KEY", "s3-creds/AWS_SECRET_ACCESS_KEY"))
	g.Expect(env).To(HaveKeyWithValue("S3_ENDPOINT", "https://s3.example.test"))
	g.Expect(env).To(HaveKeyWithValue("S3_BUCKET", "backups"))
	g.Expect(env).To(HaveKeyWithValue("S3_PREFIX", "fleet"))
	g.Expect(env).To(HaveKeyWithValue("AWS_DEFAULT_REGION", "eu-1"))
	g.Expect(env).NotTo(HaveKey("PGPASSWORD"), "the upload step gets no database credentials")
	g.Expect(strings.Join(up.Command, " ")).To(ContainSubstring("aws --endpoint-url"))
	g.Expect(member.BackupLocation(db, p.ID)).To(Equal(
		"persistentvolumeclaim/orders-backups:/backups/team-a/orders/" + p.ID +
			" s3://backups/fleet/team-a/orders/" + p.ID + "/"))
}

func TestBackupJobTestFailLabel(t *testing.T) {
	g := NewWithT(t)
	db := testDatabase(fleetv1alpha1.EnginePostgres, func(db *fleetv1alpha1.Database) {
		db.Labels = map[string]string{fleetv1alpha1.LabelTestFailBackup: "true"}
	})
	job, err := member.BackupJob(backupParams(db))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(job.Spec.Template.Labels).To(Equal(map[string]string{fleetv1alpha1.LabelTestFailBackup: "true"}))
}

func TestBackupJobRefusesBadParams(t *testing.T) {
	db := testDatabase(fleetv1alpha1.EnginePostgres)
	for name, mutate := range map[string]func(*member.BackupParams){
		"no attempt":   func(p *member.BackupParams) { p.Attempt = 0 },
		"bad id":       func(p *member.BackupParams) { p.ID = "../etc" },
		"long id":      func(p *member.BackupParams) { p.ID = strings.Repeat("a", 64) },
		"unknown kind": func(p *member.BackupParams) { p.Kind = "weekly" },
		"no database":  func(p *member.BackupParams) { p.Database = nil },
	} {
		t.Run(name, func(t *testing.T) {
			p := backupParams(db)
			mutate(&p)
			_, err := member.BackupJob(p)
			NewWithT(t).Expect(err).To(HaveOccurred())
		})
	}
}

func TestBackupVolumeClaim(t *testing.T) {
	g := NewWithT(t)
	db := testDatabase(fleetv1alpha1.EnginePostgres)
	pvc, err := member.BackupVolumeClaim(db, "hub-a")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(pvc.Name).To(Equal("orders-backups"))
	g.Expect(pvc.Spec.Resources.Requests.Storage().String()).To(Equal("10Gi"), "spec.storage.size by default")
	g.Expect(pvc.Spec.StorageClassName).To(BeNil(), "the member's default class, not the data's")
	g.Expect(pvc.OwnerReferences).To(BeEmpty())
	g.Expect(pvc.Labels).To(HaveKeyWithValue(fleetv1alpha1.LabelBackupVolume, "true"))
	g.Expect(pvc.Labels).To(HaveKeyWithValue(fleetv1alpha1.LabelHubID, "hub-a"))
	g.Expect(member.SelectorFor("team-a", "orders").Matches(labels.Set(pvc.Labels))).To(BeFalse(),
		"no teardown may find the backup volume")

	size := resource.MustParse("50Gi")
	db.Spec.Backup = &fleetv1alpha1.BackupSpec{Volume: fleetv1alpha1.BackupVolumeSpec{Size: &size, StorageClassName: "cold"}}
	pvc, err = member.BackupVolumeClaim(db, "")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(pvc.Spec.Resources.Requests.Storage().String()).To(Equal("50Gi"))
	g.Expect(*pvc.Spec.StorageClassName).To(Equal("cold"))
}

func TestParseBackupResult(t *testing.T) {
	g := NewWithT(t)
	r, err := member.ParseBackupResult(`{"phase":"Succeeded","backupID":"b1","path":"/backups/a/b/b1","sizeBytes":1234,"engine":"postgres","version":"17.2"}` + "\n")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(r.SizeBytes).To(Equal(int64(1234)))
	g.Expect(r.Path).To(Equal("/backups/a/b/b1"))
	_, err = member.ParseBackupResult("")
	g.Expect(err).To(HaveOccurred())
	_, err = member.ParseBackupResult(`{"phase":"Maybe"}`)
	g.Expect(err).To(HaveOccurred())

	pod := &corev1.Pod{Status: corev1.PodStatus{
		InitContainerStatuses: []corev1.ContainerStatus{{Name: member.BackupContainerName, State: corev1.ContainerState{
			Terminated: &corev1.ContainerStateTerminated{Message: `{"phase":"Succeeded","sizeBytes":5}`}}}},
		ContainerStatuses: []corev1.ContainerStatus{{Name: member.BackupUploadContainerName, State: corev1.ContainerState{
			Terminated: &corev1.ContainerStateTerminated{Message: `{"phase":"Failed","step":"s3-upload"}`}}}},
	}}
	dump, upload, ok := member.BackupResultsFromPod(pod)
	g.Expect(ok).To(BeTrue())
	g.Expect(dump.SizeBytes).To(Equal(int64(5)))
	g.Expect(upload.Phase).To(Equal("Failed"))
}
