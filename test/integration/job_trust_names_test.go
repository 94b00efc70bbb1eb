package integration

import (
	"maps"
	"testing"

	. "github.com/onsi/gomega"
	batchv1 "k8s.io/api/batch/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleetv1alpha1 "github.com/fleetdb/fleetdb/apis/v1alpha1"
	"github.com/fleetdb/fleetdb/member"
)

// TestMemberJobTrustAtHubNames: a Job the hub does not trust that sits at
// the very name the hub gives its own Job is reported as not trusted (a
// restore does not say "running" for ever), and is never deleted (a
// DatabaseBackup's cleanup leaves it alone).
func TestMemberJobTrustAtHubNames(t *testing.T) {
	e := startEnvWith(t, envOptions{}, "m1")
	e.sim.enable("m1", true)
	ns := e.namespace("job-trust-names")
	g := NewWithT(t)
	e.createReady(g, newDB(ns, "orders", "m1"))
	t.Run("a forged Job at the restore Job's name: the restore says not trusted, and runs once it is deleted", func(t *testing.T) {
		testForgedRestoreJobAtName(t, e, ns)
	})
	t.Run("deleting a DatabaseBackup leaves a forged Job at its backup Job's name", func(t *testing.T) { testBackupCleanupKeepsForgedJob(t, e, ns) })
	t.Run("a forged Succeeded Job at the rotation Job's name does not switch the member", func(t *testing.T) { testForgedRotationJob(t, e, ns) })
}

func testForgedRestoreJobAtName(t *testing.T, e *env, ns string) {
	g := NewWithT(t)
	db := newDB(ns, "copy", "m1")
	db.Spec.RestoreFrom = &fleetv1alpha1.RestoreSource{BackupName: "source"}
	g.Expect(e.hub.Create(e.ctx, db)).To(Succeed())
	g.Eventually(func(g Gomega) {
		g.Expect(clusterEntry(e.getDB(ns, "copy"), "m1")).To(HaveField("Reason", fleetv1alpha1.ReasonWaitingForBackup))
	}).WithTimeout(eventually).WithPolling(poll).Should(Succeed())
	got := e.getDB(ns, "copy")
	labels := maps.Clone(member.RestoreJobLabels(got))
	labels[fleetv1alpha1.LabelHubID] = e.hubID(g)
	name := member.RestoreJobName("copy", string(got.UID), 1)
	forgeJob(g, e, "m1", ns, name, labels, map[string]string{fleetv1alpha1.AnnotationRestoreAttempt: "1"})

	e.runBackup(g, newBackup(ns, "source", "orders", ""), "m1")
	g.Eventually(func(g Gomega) {
		g.Expect(e.getDB(ns, "copy").Status.Restore).To(ContainElement(And(HaveField("Cluster", "m1"),
			HaveField("Phase", fleetv1alpha1.BackupPhaseFailed), HaveField("Message", And(ContainSubstring("not trusted"), ContainSubstring(name))))))
		g.Expect(clusterEntry(e.getDB(ns, "copy"), "m1")).To(HaveField("Message", ContainSubstring("not trusted")))
	}).WithTimeout(eventually).WithPolling(poll).Should(Succeed())
	e.expectNoClientService(g, "m1", ns, "copy")
	// Deleted by the user: the hub runs its own restore Job at that name.
	job := e.replaceForged(g, ns, name)
	e.finishJob(g, "m1", job, true)
	g.Eventually(func(g Gomega) {
		g.Expect(e.getDB(ns, "copy").Status.Restore).To(ContainElement(And(HaveField("Cluster", "m1"),
			HaveField("Phase", fleetv1alpha1.BackupPhaseSucceeded), HaveField("Message", ContainSubstring(name)))))
	}).WithTimeout(eventually).WithPolling(poll).Should(Succeed())
}

func testBackupCleanupKeepsForgedJob(t *testing.T, e *env, ns string) {
	g := NewWithT(t)
	b, name := forgeOnDemandJob(g, e, ns, fleetv1alpha1.BackupDeletionDelete)
	g.Eventually(func(g Gomega) {
		rec := e.getBackup(g, ns, "forged").Record("m1")
		g.Expect(rec).NotTo(BeNil())
		g.Expect(rec.Message).To(ContainSubstring("not trusted"))
	}).WithTimeout(eventually).WithPolling(poll).Should(Succeed())

	g.Expect(e.hub.Delete(e.ctx, b)).To(Succeed())
	e.waitBackupGone(g, ns, "forged")
	var forged batchv1.Job
	g.Expect(e.member("m1").Get(e.ctx, client.ObjectKey{Namespace: ns, Name: name}, &forged)).To(Succeed(), "the cleanup leaves a Job it does not trust")
	g.Expect(forged.DeletionTimestamp).To(BeNil())
}

func testForgedRotationJob(t *testing.T, e *env, ns string) {
	g := NewWithT(t)
	e.createReady(g, newDB(ns, "keys", "m1"))
	key := client.ObjectKey{Namespace: ns, Name: "keys-credentials"}
	old := e.hubSecret(g, key)[member.CredentialsPasswordKey]
	labels := maps.Clone(member.RotationJobLabels(e.getDB(ns, "keys"), "r1"))
	labels[fleetv1alpha1.LabelHubID] = e.hubID(g)
	name := member.RotationJobName("keys", "r1", 1)
	forgeJob(g, e, "m1", ns, name, labels, map[string]string{fleetv1alpha1.AnnotationRotationAttempt: "1"})

	e.annotate(g, ns, "keys", "r1")
	g.Eventually(func(g Gomega) {
		c := condition(e.getDB(ns, "keys").Status.Conditions, fleetv1alpha1.ConditionCredentialsRotated)
		g.Expect(c.Reason).To(Equal(fleetv1alpha1.ReasonRotationFailed))
		g.Expect(c.Message).To(And(ContainSubstring("not trusted"), ContainSubstring(name)))
	}).WithTimeout(eventually).WithPolling(poll).Should(Succeed())
	g.Expect(e.memberSecret(g, "m1", key)[member.CredentialsPasswordKey]).To(Equal(old), "the forged Job does not switch the member")
	g.Expect(e.hubSecret(g, key)[member.CredentialsPasswordKey]).To(Equal(old))

	// Deleted by the user: the hub runs its own rotation Job, and the rotation completes.
	job := e.replaceForged(g, ns, name)
	e.finishJob(g, "m1", job, true)
	g.Eventually(func(g Gomega) {
		g.Expect(e.hubSecret(g, key)[member.CredentialsPasswordKey]).NotTo(Equal(old))
	}).WithTimeout(eventually).WithPolling(poll).Should(Succeed())
}

// replaceForged checks that the hub left the forged Job name in m1 alone,
// deletes it as the user would, and returns the Job the hub then runs at
// that name (its own: not the forged pod).
func (e *env) replaceForged(g Gomega, ns, name string) *batchv1.Job {
	var forged batchv1.Job
	g.Expect(e.member("m1").Get(e.ctx, client.ObjectKey{Namespace: ns, Name: name}, &forged)).To(Succeed(), "the hub does not delete a Job it did not make")
	g.Expect(e.member("m1").Delete(e.ctx, &forged, client.PropagationPolicy("Background"))).To(Succeed())
	var job *batchv1.Job
	g.Eventually(func(g Gomega) {
		job = &batchv1.Job{}
		g.Expect(e.member("m1").Get(e.ctx, client.ObjectKey{Namespace: ns, Name: name}, job)).To(Succeed())
		g.Expect(job.UID).NotTo(Equal(forged.UID))
		g.Expect(job.Spec.Template.Spec.Containers[0].Command).NotTo(Equal([]string{"true"}))
	}).WithTimeout(eventually).WithPolling(poll).Should(Succeed())
	return job
}
