package integration

import (
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleetv1alpha1 "github.com/fleetdb/fleetdb/apis/v1alpha1"
	"github.com/fleetdb/fleetdb/member"
)

// TestFinalBackupHostile: what a member's users (or leftovers) can put in
// the Database's namespace must not pass as its final backup, nor be taken
// over or deleted by the hub.
func TestFinalBackupHostile(t *testing.T) {
	e := startEnvWith(t, envOptions{withoutCNPG: []string{"m1"}}, "m1")
	e.sim.enable("m1", true)
	t.Run("a forged Succeeded Job at the backup Job's name does not release the teardown", func(t *testing.T) { testForgedBackupJob(t, e) })
	t.Run("a Succeeded backup Job of an earlier Database of the same name is not this one's backup", func(t *testing.T) { testOtherUIDBackupJob(t, e) })
	t.Run("a volume claim <name>-backups fleetdb did not make is not used, changed or deleted", func(t *testing.T) { testForeignBackupClaim(t, e) })
}

// readyDB creates db and waits for Ready; it returns the hub identity the
// member's objects carry (any reader of the namespace sees it) and the UID.
func readyDB(t *testing.T, e *env, db *fleetv1alpha1.Database, m string) (hubID, uid string) {
	g := NewWithT(t)
	g.Expect(e.hub.Create(e.ctx, db)).To(Succeed())
	g.Eventually(func(g Gomega) {
		g.Expect(e.getDB(db.Namespace, db.Name).Status.Phase).To(Equal(fleetv1alpha1.PhaseReady))
	}).WithTimeout(eventually).WithPolling(poll).Should(Succeed())
	var sts appsv1.StatefulSet
	g.Expect(e.member(m).Get(e.ctx, client.ObjectKey{Namespace: db.Namespace, Name: db.Name}, &sts)).To(Succeed())
	g.Expect(e.member(m).Create(e.ctx, pvcFor(e, m, db.Namespace, db.Name))).To(Succeed())
	return sts.Labels[fleetv1alpha1.LabelHubID], string(e.getDB(db.Namespace, db.Name).UID)
}

// forgeSucceededJob creates, in the member, a Job carrying the backup Job
// labels of db (hub identity and backup id included) that runs "true", and
// gives it the status of a Job that completed.
func forgeSucceededJob(t *testing.T, e *env, m string, db *fleetv1alpha1.Database, hubID, name, id string) {
	g := NewWithT(t)
	job := &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Namespace: db.Namespace, Name: name,
			Labels:      member.BackupJobLabels(db, hubID, fleetv1alpha1.BackupKindFinal, id),
			Annotations: map[string]string{fleetv1alpha1.AnnotationBackupAttempt: "1"}},
		Spec: batchv1.JobSpec{Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{
			RestartPolicy: corev1.RestartPolicyNever,
			Containers:    []corev1.Container{{Name: member.BackupContainerName, Image: "busybox", Command: []string{"true"}}},
		}}},
	}
	c := e.member(m)
	g.Expect(c.Create(e.ctx, job)).To(Succeed())
	now := metav1.Now()
	job.Status.StartTime, job.Status.Succeeded, job.Status.CompletionTime = &now, 1, &now
	job.Status.Conditions = []batchv1.JobCondition{
		{Type: batchv1.JobSuccessCriteriaMet, Status: corev1.ConditionTrue, LastTransitionTime: now},
		{Type: batchv1.JobComplete, Status: corev1.ConditionTrue, LastTransitionTime: now},
	}
	g.Expect(c.Status().Update(e.ctx, job)).To(Succeed())
}

func testForgedBackupJob(t *testing.T, e *env) {
	g := NewWithT(t)
	ns := e.namespace("backup-forged")
	db := backupDB(ns, "orders", "", "m1")
	hubID, uid := readyDB(t, e, db, "m1")
	id := member.FinalBackupID(uid)
	forged := member.BackupJobName("orders", id, 1)
	forgeSucceededJob(t, e, "m1", db, hubID, forged, id)
	g.Expect(e.hub.Delete(e.ctx, e.getDB(ns, "orders"))).To(Succeed())

	// The forged Job is not read as the backup: the member's teardown holds, and says why.
	g.Eventually(func(g Gomega) {
		got := e.getDB(ns, "orders")
		rec := finalBackupRecord(got, "m1")
		g.Expect(rec.Phase).To(Equal(fleetv1alpha1.BackupPhaseFailed))
		g.Expect(rec.Message).To(ContainSubstring("not trusted"))
		g.Expect(rec.Message).To(ContainSubstring(forged))
		g.Expect(condition(got.Status.Conditions, fleetv1alpha1.ConditionFinalBackup).Reason).To(Equal(fleetv1alpha1.ReasonFinalBackupFailed))
	}).WithTimeout(eventually).WithPolling(poll).Should(Succeed())
	dataLeft(g, e, "m1", ns, "orders")
	// The hub does not delete a Job it did not make.
	g.Expect(e.member("m1").Get(e.ctx, client.ObjectKey{Namespace: ns, Name: forged}, &batchv1.Job{})).To(Succeed())

	// Once the forged Job is gone the hub runs its own backup, then tears down.
	g.Expect(e.member("m1").Delete(e.ctx, &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: forged}},
		client.PropagationPolicy(metav1.DeletePropagationBackground))).To(Succeed())
	g.Eventually(func(g Gomega) {
		jobs := backupJobs(g, e, "m1", ns)
		g.Expect(jobs).To(HaveLen(1))
		g.Expect(jobs[0].Spec.Template.Spec.Containers[0].Command).To(HaveLen(3))
		g.Expect(strings.Join(jobs[0].Spec.Template.Spec.Containers[0].Command, " ")).To(ContainSubstring("pg_dump"))
	}).WithTimeout(eventually).WithPolling(poll).Should(Succeed())
	dataLeft(g, e, "m1", ns, "orders")
	g.Expect(finishBackupJobs(g, e, "m1", ns, true, 100)).To(Equal(1))
	g.Eventually(dbGone(e, ns, "orders")).WithTimeout(eventually).WithPolling(poll).Should(BeTrue())
}

func testOtherUIDBackupJob(t *testing.T, e *env) {
	g := NewWithT(t)
	ns := e.namespace("backup-other-uid")
	db := backupDB(ns, "orders", "", "m1")
	hubID, uid := readyDB(t, e, db, "m1")
	// A final backup Job of an earlier "orders" (another UID) that was left
	// in the member (e.g. its member was given up as unreachable), and succeeded.
	oldID := member.FinalBackupID("0b2c5e1e-0000-4000-8000-000000000001")
	old := member.BackupJobName("orders", oldID, 1)
	forgeSucceededJob(t, e, "m1", db, hubID, old, oldID)
	g.Expect(e.hub.Delete(e.ctx, e.getDB(ns, "orders"))).To(Succeed())

	// This Database gets its own backup (its own id); nothing is deleted until it ends.
	id := member.FinalBackupID(uid)
	g.Eventually(func(g Gomega) {
		rec := finalBackupRecord(e.getDB(ns, "orders"), "m1")
		g.Expect(rec.Phase).To(Equal(fleetv1alpha1.BackupPhaseRunning))
		g.Expect(rec.BackupID).To(Equal(id))
	}).WithTimeout(eventually).WithPolling(poll).Should(Succeed())
	dataLeft(g, e, "m1", ns, "orders")
	g.Expect(finishBackupJobs(g, e, "m1", ns, true, 100)).To(Equal(1))
	g.Eventually(dbGone(e, ns, "orders")).WithTimeout(eventually).WithPolling(poll).Should(BeTrue())
	// The earlier Database's Job is not this hub's to delete.
	g.Expect(e.member("m1").Get(e.ctx, client.ObjectKey{Namespace: ns, Name: old}, &batchv1.Job{})).To(Succeed())
}

func testForeignBackupClaim(t *testing.T, e *env) {
	g := NewWithT(t)
	ns := e.namespace("backup-foreign-claim")
	db := backupDB(ns, "orders", "", "m1")
	readyDB(t, e, db, "m1")
	// Someone else's claim at the backup claim's name: other labels, another size and class.
	slow := "slow"
	foreign := &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: member.BackupClaimName("orders"), Labels: map[string]string{"app": "reports"}},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes:      []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			StorageClassName: &slow,
			Resources:        corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("3Gi")}},
		},
	}
	g.Expect(e.member("m1").Create(e.ctx, foreign)).To(Succeed())
	g.Expect(e.hub.Delete(e.ctx, e.getDB(ns, "orders"))).To(Succeed())

	// The member's teardown holds and says why; no Job writes into that claim.
	g.Eventually(func(g Gomega) {
		g.Expect(clusterEntry(e.getDB(ns, "orders"), "m1").Message).To(ContainSubstring("is not a fleetdb backup volume"))
	}).WithTimeout(eventually).WithPolling(poll).Should(Succeed())
	g.Consistently(func(g Gomega) {
		g.Expect(backupJobs(g, e, "m1", ns)).To(BeEmpty())
		dataLeft(g, e, "m1", ns, "orders")
	}).WithTimeout(3 * time.Second).WithPolling(poll).Should(Succeed())
	var cur corev1.PersistentVolumeClaim
	g.Expect(e.member("m1").Get(e.ctx, client.ObjectKeyFromObject(foreign), &cur)).To(Succeed())
	g.Expect(cur.DeletionTimestamp.IsZero()).To(BeTrue())
	g.Expect(cur.Labels).To(Equal(map[string]string{"app": "reports"}))
	g.Expect(cur.Spec.StorageClassName).To(HaveValue(Equal("slow")))
	g.Expect(cur.Spec.Resources.Requests.Storage().String()).To(Equal("3Gi"))

	// Let it go without a backup: the claim is still left alone.
	patchFinalBackup(g, e, ns, "orders", fleetv1alpha1.FinalBackupSkip)
	g.Eventually(dbGone(e, ns, "orders")).WithTimeout(eventually).WithPolling(poll).Should(BeTrue())
	g.Expect(e.member("m1").Get(e.ctx, client.ObjectKeyFromObject(foreign), &cur)).To(Succeed())
	g.Expect(cur.DeletionTimestamp.IsZero()).To(BeTrue())
	g.Expect(cur.Labels).To(Equal(map[string]string{"app": "reports"}))
}

func patchFinalBackup(g Gomega, e *env, ns, name string, policy fleetv1alpha1.FinalBackupPolicy) {
	g.Eventually(func() error {
		cur := e.getDB(ns, name)
		if cur.Spec.Backup == nil {
			cur.Spec.Backup = &fleetv1alpha1.BackupSpec{}
		}
		cur.Spec.Backup.FinalBackup = policy
		return e.hub.Update(e.ctx, cur)
	}).WithTimeout(eventually).WithPolling(poll).Should(Succeed())
}
