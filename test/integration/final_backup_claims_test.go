package integration

import (
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleetv1alpha1 "github.com/fleetdb/fleetdb/apis/v1alpha1"
	"github.com/fleetdb/fleetdb/member"
)

// TestFinalBackupHeldForClaims: a Required final backup is never skipped
// while the Database's data volume claims are in the member, even with its
// workload gone: the member's teardown holds (nothing deleted), the member's
// entry and the FinalBackup condition (FinalBackupNoWorkload) say why, and
// setting spec.backup.finalBackup to Skip lets the Database go. Both
// backends' claims count: the StatefulSet's (data-<name>-<n>, fleetdb's
// labels) and CloudNativePG's (<name>-<n>, cnpg.io/cluster=<name>).
// CloudNativePG is not installed in m1, so the Database never gets a
// workload there (BackendMissing): its claims stand for ones whose workload
// is gone.
func TestFinalBackupHeldForClaims(t *testing.T) {
	e := startEnvWith(t, envOptions{withoutCNPG: []string{"m1"}}, "m1")
	e.sim.enable("m1", true)
	t.Run("a StatefulSet's data claim", func(t *testing.T) {
		testFinalBackupHeldForClaims(t, e, "held-sts", func(db *fleetv1alpha1.Database, hubID string) *corev1.PersistentVolumeClaim {
			l := member.Labels(db)
			l[fleetv1alpha1.LabelHubID] = hubID
			return dataClaim(db.Namespace, "data-"+db.Name+"-0", l)
		}, true)
	})
	t.Run("a CloudNativePG Cluster's data claim", func(t *testing.T) {
		testFinalBackupHeldForClaims(t, e, "held-cnpg", func(db *fleetv1alpha1.Database, _ string) *corev1.PersistentVolumeClaim {
			return dataClaim(db.Namespace, db.Name+"-1", map[string]string{"cnpg.io/cluster": db.Name, "cnpg.io/pvcRole": "PG_DATA"})
		}, false)
	})
}

func dataClaim(ns, name string, labels map[string]string) *corev1.PersistentVolumeClaim {
	return &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: labels},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Resources:   corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}},
		},
	}
}

// testFinalBackupHeldForClaims: claim is the data claim left in m1;
// deletedOnSkip: the Delete teardown takes it once the user chose Skip
// (fleetdb deletes only claims labelled for the Database).
func testFinalBackupHeldForClaims(t *testing.T, e *env, nsName string, claim func(*fleetv1alpha1.Database, string) *corev1.PersistentVolumeClaim, deletedOnSkip bool) {
	g := NewWithT(t)
	ns := e.namespace(nsName)
	db := newCNPGDB(ns, "ghost", "m1")
	db.Spec.Backup = &fleetv1alpha1.BackupSpec{FinalBackup: fleetv1alpha1.FinalBackupRequired}
	g.Expect(e.hub.Create(e.ctx, db)).To(Succeed())
	g.Eventually(func(g Gomega) {
		g.Expect(clusterEntry(e.getDB(ns, "ghost"), "m1").Reason).To(Equal(fleetv1alpha1.ReasonBackendMissing))
	}).WithTimeout(eventually).WithPolling(poll).Should(Succeed())
	pvc := claim(e.getDB(ns, "ghost"), e.hubID(g))
	// BackendMissing: the hub wrote nothing in m1, not even the namespace.
	if err := e.member("m1").Create(e.ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); !apierrors.IsAlreadyExists(err) {
		g.Expect(err).NotTo(HaveOccurred())
	}
	g.Expect(e.member("m1").Create(e.ctx, pvc)).To(Succeed())
	g.Expect(e.hub.Delete(e.ctx, e.getDB(ns, "ghost"))).To(Succeed())

	g.Eventually(func(g Gomega) {
		got := &fleetv1alpha1.Database{}
		g.Expect(e.hub.Get(e.ctx, client.ObjectKey{Namespace: ns, Name: "ghost"}, got)).To(Succeed(), "the deletion is held")
		c := condition(got.Status.Conditions, fleetv1alpha1.ConditionFinalBackup)
		g.Expect(c.Status).To(Equal(metav1.ConditionFalse))
		g.Expect(c.Reason).To(Equal(fleetv1alpha1.ReasonFinalBackupNoWorkload))
		g.Expect(c.Message).To(ContainSubstring("m1"))
		g.Expect(c.Message).To(ContainSubstring("Skip"))
		rec := finalBackupRecord(got, "m1")
		g.Expect(rec.Phase).To(Equal(fleetv1alpha1.BackupPhasePending))
		g.Expect(rec.Message).To(ContainSubstring(pvc.Name))
		g.Expect(clusterEntry(got, "m1").Message).To(ContainSubstring(pvc.Name))
	}).WithTimeout(eventually).WithPolling(poll).Should(Succeed())
	var cur corev1.PersistentVolumeClaim
	g.Expect(e.member("m1").Get(e.ctx, client.ObjectKeyFromObject(pvc), &cur)).To(Succeed())
	g.Expect(cur.DeletionTimestamp.IsZero()).To(BeTrue(), "the data claim is kept while the Required backup cannot be taken")
	g.Expect(backupJobs(g, e, "m1", ns)).To(BeEmpty(), "no workload to back up from: no Job")

	// The user lets the data go without a backup.
	got := e.getDB(ns, "ghost")
	got.Spec.Backup.FinalBackup = fleetv1alpha1.FinalBackupSkip
	g.Expect(e.hub.Update(e.ctx, got)).To(Succeed())
	g.Eventually(dbGone(e, ns, "ghost")).WithTimeout(eventually).WithPolling(poll).Should(BeTrue())
	if deletedOnSkip {
		g.Eventually(func() bool {
			err := e.member("m1").Get(e.ctx, client.ObjectKeyFromObject(pvc), &cur)
			return apierrors.IsNotFound(err) || (err == nil && !cur.DeletionTimestamp.IsZero())
		}).WithTimeout(eventually).WithPolling(poll).Should(BeTrue())
	}
}
