package member

import (
	"strings"
	"testing"

	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	fleetv1alpha1 "github.com/fleetdb/fleetdb/apis/v1alpha1"
)

func restoreDB(engine fleetv1alpha1.Engine, backend fleetv1alpha1.Backend) *fleetv1alpha1.Database {
	return &fleetv1alpha1.Database{
		ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "a234567890123456789012345678901234567890", UID: "uid-1"},
		Spec: fleetv1alpha1.DatabaseSpec{
			Engine: engine, Backend: backend, Storage: fleetv1alpha1.StorageSpec{Size: resource.MustParse("1Gi")},
			RestoreFrom: &fleetv1alpha1.RestoreSource{BackupName: "nightly"},
		},
	}
}

func TestRestoreJob(t *testing.T) {
	for _, tc := range []struct {
		engine  fleetv1alpha1.Engine
		backend fleetv1alpha1.Backend
		host    string
		image   string
	}{
		{fleetv1alpha1.EnginePostgres, fleetv1alpha1.BackendCloudNativePG, "-rw", "postgresql:17.10-system-trixie"},
		{fleetv1alpha1.EnginePostgres, fleetv1alpha1.BackendStatefulSet, "-0.", "postgres:17"},
		{fleetv1alpha1.EngineMySQL, fleetv1alpha1.BackendStatefulSet, "-0.", "mysql:8.4"},
	} {
		t.Run(string(tc.engine)+"/"+string(tc.backend), func(t *testing.T) {
			g := NewWithT(t)
			db := restoreDB(tc.engine, tc.backend)
			job, err := RestoreJob(RestoreParams{Database: db, Cluster: "m1", SourceDatabase: "orders", BackupID: "nightly-abc123", Attempt: 3, HubID: "hub-1"})
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(len(job.Name)).To(BeNumerically("<=", 63))
			g.Expect(job.Labels).To(HaveKeyWithValue(fleetv1alpha1.LabelHubID, "hub-1"))
			g.Expect(job.Labels).To(HaveKeyWithValue(fleetv1alpha1.LabelRestore, RestoreHash("uid-1")))
			g.Expect(job.Annotations).To(HaveKeyWithValue(fleetv1alpha1.AnnotationRestoreAttempt, "3"))
			g.Expect(*job.Spec.BackoffLimit).To(BeZero(), "the hub retries with its own backoff")
			pod := job.Spec.Template.Spec
			g.Expect(pod.Volumes[0].PersistentVolumeClaim.ClaimName).To(Equal("orders-backups"))
			g.Expect(pod.Volumes[0].PersistentVolumeClaim.ReadOnly).To(BeTrue())
			g.Expect(*pod.AutomountServiceAccountToken).To(BeFalse())
			c := pod.Containers[0]
			g.Expect(c.VolumeMounts[0].ReadOnly).To(BeTrue())
			g.Expect(c.Image).To(HaveSuffix(tc.image))
			script, _ := RestoreScript(tc.engine)
			g.Expect(c.Command).To(Equal([]string{"sh", "-c", script}))
			for _, e := range c.Env {
				switch {
				case e.Name == "DB_HOST":
					g.Expect(e.Value).To(ContainSubstring(tc.host))
				case e.Name == "BACKUP_DIR":
					g.Expect(e.Value).To(Equal("/backups/team-a/orders/nightly-abc123"))
				case strings.Contains(e.Name, "PASSWORD") || e.Name == "PGUSER":
					g.Expect(e.Value).To(BeEmpty(), "%s comes from the Secret", e.Name)
					g.Expect(e.ValueFrom.SecretKeyRef.Name).To(Equal(db.Name + "-credentials"))
				}
			}
		})
	}
	g := NewWithT(t)
	_, err := RestoreJob(RestoreParams{Database: restoreDB(fleetv1alpha1.EnginePostgres, ""), SourceDatabase: "orders", BackupID: "../etc", Attempt: 1})
	g.Expect(err).To(HaveOccurred(), "a backup ID that is not a name")
	_, err = RestoreJob(RestoreParams{Database: restoreDB(fleetv1alpha1.EnginePostgres, ""), BackupID: "x", Attempt: 1})
	g.Expect(err).To(HaveOccurred(), "no source")
}
