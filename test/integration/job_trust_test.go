package integration

import (
	"maps"
	"testing"

	. "github.com/onsi/gomega"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleetv1alpha1 "github.com/fleetdb/fleetdb/apis/v1alpha1"
	"github.com/fleetdb/fleetdb/member"
)

// TestMemberJobTrust: the trust the final backup puts in its Jobs holds for
// every Job the hub reads a result from. A Job that carries the right
// name or labels and the hub's identity (any reader of the namespace sees
// them) but runs another pod is never taken as an on-demand backup's or a
// restore's result.
func TestMemberJobTrust(t *testing.T) {
	e := startEnvWith(t, envOptions{}, "m1")
	e.sim.enable("m1", true)
	ns := e.namespace("job-trust")
	g := NewWithT(t)
	e.createReady(g, newDB(ns, "orders", "m1"))
	t.Run("a forged Succeeded Job at an on-demand backup's name is not its backup", func(t *testing.T) { testForgedOnDemandJob(t, e, ns) })
	t.Run("a forged Succeeded restore Job does not restore the member", func(t *testing.T) { testForgedRestoreJob(t, e, ns) })
}

// forgeJob creates, in the member, a Job with labels and annotations that
// runs "true", and gives it the status of a Job that completed.
func forgeJob(g Gomega, e *env, m, ns, name string, labels, annotations map[string]string) {
	job := &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: labels, Annotations: annotations},
		Spec: batchv1.JobSpec{Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{
			RestartPolicy: corev1.RestartPolicyNever,
			Containers:    []corev1.Container{{Name: member.BackupContainerName, Image: "busybox", Command: []string{"true"}}},
		}}},
	}
	g.Expect(e.member(m).Create(e.ctx, job)).To(Succeed())
	e.finishJob(g, m, job, true)
}

func testForgedOnDemandJob(t *testing.T, e *env, ns string) {
	g := NewWithT(t)
	_, name := forgeOnDemandJob(g, e, ns, "")

	var rec *fleetv1alpha1.BackupRecord
	g.Eventually(func(g Gomega) {
		rec = e.getBackup(g, ns, "forged").Record("m1")
		g.Expect(rec).NotTo(BeNil())
		g.Expect(fleetv1alpha1.BackupPhaseFinal(rec.Phase)).To(BeTrue(), "the record is final")
	}).WithTimeout(eventually).WithPolling(poll).Should(Succeed())
	g.Expect(rec.Phase).To(Equal(fleetv1alpha1.BackupPhaseFailed), "the forged Job is not the backup")
	g.Expect(rec.Message).To(ContainSubstring("not trusted"))
	g.Expect(rec.Message).To(ContainSubstring(name))
	g.Expect(rec.Location).To(BeEmpty())
}

// forgeOnDemandJob creates the Database "later" in m1 and the
// DatabaseBackup "forged" of it with policy, and puts a forged Succeeded Job
// with the backup's labels at the backup Job's name before the hub starts
// its own: the Database is placed but not Ready in m1 meanwhile, so the hub
// waits. It returns the DatabaseBackup and the Job's name.
func forgeOnDemandJob(g Gomega, e *env, ns, policy string) (*fleetv1alpha1.DatabaseBackup, string) {
	e.sim.enable("m1", false)
	db := newDB(ns, "later", "m1")
	g.Expect(e.hub.Create(e.ctx, db)).To(Succeed())
	g.Eventually(func(g Gomega) {
		g.Expect(e.getDB(ns, "later").Status.Clusters).To(ContainElement(HaveField("Name", "m1")))
	}).WithTimeout(eventually).WithPolling(poll).Should(Succeed())
	g.Expect(e.hub.Create(e.ctx, newBackup(ns, "forged", "later", policy, "m1"))).To(Succeed())
	g.Eventually(func(g Gomega) {
		rec := e.getBackup(g, ns, "forged").Record("m1")
		g.Expect(rec).NotTo(BeNil())
		g.Expect(rec.Message).To(ContainSubstring("waiting for the Database to be Ready"))
	}).WithTimeout(eventually).WithPolling(poll).Should(Succeed())
	b := e.getBackup(g, ns, "forged")
	name := "later-bk-" + b.UIDHash()
	forgeJob(g, e, "m1", ns, name, member.BackupJobLabels(db, e.hubID(g), fleetv1alpha1.BackupKindOnDemand, b.BackupID()), nil)
	e.sim.enable("m1", true)
	return b, name
}

func testForgedRestoreJob(t *testing.T, e *env, ns string) {
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
	forged := "copy-restore-forged"
	forgeJob(g, e, "m1", ns, forged, labels, map[string]string{fleetv1alpha1.AnnotationRestoreAttempt: "1"})

	// The backup runs; then the hub runs its own restore Job: the forged
	// one did not restore the member, which has no client Service yet.
	e.runBackup(g, newBackup(ns, "source", "orders", ""), "m1")
	job := e.waitJob(g, "m1", ns, fleetv1alpha1.LabelRestore, "", member.RestoreJobName("copy", string(got.UID), 1))
	e.expectNoClientService(g, "m1", ns, "copy")
	g.Expect(e.getDB(ns, "copy").Status.Restore).NotTo(ContainElement(HaveField("Phase", fleetv1alpha1.BackupPhaseSucceeded)))

	e.finishJob(g, "m1", job, true)
	g.Eventually(func(g Gomega) {
		g.Expect(e.getDB(ns, "copy").Status.Restore).To(ContainElement(And(HaveField("Cluster", "m1"),
			HaveField("Phase", fleetv1alpha1.BackupPhaseSucceeded), HaveField("Message", ContainSubstring(job.Name)))))
	}).WithTimeout(eventually).WithPolling(poll).Should(Succeed())
	// The hub does not delete a Job it did not make.
	g.Expect(e.member("m1").Get(e.ctx, client.ObjectKey{Namespace: ns, Name: forged}, &batchv1.Job{})).To(Succeed())
}
