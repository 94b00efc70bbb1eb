package integration

import (
	"testing"

	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleetv1alpha1 "github.com/fleetdb/fleetdb/apis/v1alpha1"
	"github.com/fleetdb/fleetdb/member"
)

// TestMemberJobLedger: the hub tells the Jobs it created from any other by
// its own record (the job ledger in its namespace), not by what a member
// could copy. Its own Job stays its own after the spec it was rendered from
// changed (the Job's pod is no longer what the hub renders now): a rotation
// and an on-demand backup wait for it and take its result instead of calling
// it "not trusted" for ever, and their cleanup deletes it. A Job it did not
// create is never deleted, not even at a Database's teardown.
func TestMemberJobLedger(t *testing.T) {
	e := startEnvWith(t, envOptions{}, "m1")
	e.sim.enable("m1", true)
	ns := e.namespace("job-ledger")
	t.Run("a rotation whose Database changed while its Job ran completes, and its Job goes", func(t *testing.T) { testRotationAcrossSpecChange(t, e, ns) })
	t.Run("an on-demand backup whose Database changed while its Job ran succeeds, and its deletion deletes that Job", func(t *testing.T) {
		testBackupAcrossSpecChange(t, e, ns)
	})
	t.Run("a Database's teardown leaves a forged Job at its final backup Job's name", func(t *testing.T) { testTeardownKeepsForgedFinalJob(t, e, ns) })
	t.Run("a Database's teardown mid-rotation removes its rotation Job and leaves a forged one", func(t *testing.T) {
		testTeardownKeepsForgedRotationJob(t, e, ns)
	})
}

// changeVersion moves the Database to another minor version (every Job's
// image changes with it) and waits until m1's StatefulSet runs it: the hub
// renders from the new spec from then on.
func (e *env) changeVersion(g Gomega, ns, name, version string) {
	db := e.getDB(ns, name)
	patch := client.MergeFrom(db.DeepCopy())
	db.Spec.Version = version
	g.Expect(e.hub.Patch(e.ctx, db, patch)).To(Succeed())
	g.Eventually(func(g Gomega) {
		var sts appsv1.StatefulSet
		g.Expect(e.member("m1").Get(e.ctx, client.ObjectKey{Namespace: ns, Name: name}, &sts)).To(Succeed())
		g.Expect(sts.Spec.Template.Spec.Containers[0].Image).To(HaveSuffix(":" + version))
	}).WithTimeout(eventually).WithPolling(poll).Should(Succeed())
}

// expectJobGone: the Job is deleted (or being deleted).
func (e *env) expectJobGone(g Gomega, m string, job *batchv1.Job) {
	g.Eventually(func(g Gomega) {
		var cur batchv1.Job
		err := e.member(m).Get(e.ctx, client.ObjectKeyFromObject(job), &cur)
		g.Expect(apierrors.IsNotFound(err) || (err == nil && cur.DeletionTimestamp != nil)).To(BeTrue(), "Job %s is still there", job.Name)
	}).WithTimeout(eventually).WithPolling(poll).Should(Succeed())
}

func testRotationAcrossSpecChange(t *testing.T, e *env, ns string) {
	g := NewWithT(t)
	e.createReady(g, newDB(ns, "keys", "m1"))
	key := client.ObjectKey{Namespace: ns, Name: "keys-credentials"}
	old := e.hubSecret(g, key)[member.CredentialsPasswordKey]
	e.annotate(g, ns, "keys", "r1")
	job := e.waitJob(g, "m1", ns, fleetv1alpha1.LabelRotation, "", member.RotationJobName("keys", "r1", 1))
	e.changeVersion(g, ns, "keys", "17.2")
	g.Expect(job.Spec.Template.Spec.Containers[0].Image).NotTo(HaveSuffix(":17.2"), "the Job runs the image of the spec before")

	e.finishJob(g, "m1", job, true)
	g.Eventually(func(g Gomega) {
		g.Expect(e.hubSecret(g, key)[member.CredentialsPasswordKey]).NotTo(Equal(old))
		c := condition(e.getDB(ns, "keys").Status.Conditions, fleetv1alpha1.ConditionCredentialsRotated)
		g.Expect(c.Message).NotTo(ContainSubstring("not trusted"))
	}).WithTimeout(eventually).WithPolling(poll).Should(Succeed())
	e.expectJobGone(g, "m1", job)
	g.Expect(e.jobsWith(g, "m1", ns, fleetv1alpha1.LabelRotation, "")).To(BeEmpty(), "no second rotation Job")
}

func testBackupAcrossSpecChange(t *testing.T, e *env, ns string) {
	g := NewWithT(t)
	e.createReady(g, newDB(ns, "shop", "m1"))
	g.Expect(e.hub.Create(e.ctx, newBackup(ns, "before", "shop", fleetv1alpha1.BackupDeletionRetain, "m1"))).To(Succeed())
	job := e.waitJob(g, "m1", ns, fleetv1alpha1.LabelBackupID, "before-", "-bk-")
	e.changeVersion(g, ns, "shop", "17.2")

	e.finishWithResult(g, "m1", job, true, backupResult(ns, "shop", job.Labels[fleetv1alpha1.LabelBackupID], 1000))
	g.Eventually(func(g Gomega) {
		rec := e.getBackup(g, ns, "before").Record("m1")
		g.Expect(rec).NotTo(BeNil())
		g.Expect(rec.Message).NotTo(ContainSubstring("not trusted"))
		g.Expect(rec.Phase).To(Equal(fleetv1alpha1.BackupPhaseSucceeded))
	}).WithTimeout(eventually).WithPolling(poll).Should(Succeed())

	g.Expect(e.hub.Delete(e.ctx, e.getBackup(g, ns, "before"))).To(Succeed())
	e.waitBackupGone(g, ns, "before")
	e.expectJobGone(g, "m1", job)
}

func testTeardownKeepsForgedFinalJob(t *testing.T, e *env, ns string) {
	g := NewWithT(t)
	db := newDB(ns, "old", "m1")
	db.Spec.Backup = &fleetv1alpha1.BackupSpec{FinalBackup: fleetv1alpha1.FinalBackupBestEffort}
	e.createReady(g, db)
	got := e.getDB(ns, "old")
	id := member.FinalBackupID(string(got.UID))
	name := member.BackupJobName("old", id, 1)
	forgeJob(g, e, "m1", ns, name, member.BackupJobLabels(got, e.hubID(g), fleetv1alpha1.BackupKindFinal, id),
		map[string]string{fleetv1alpha1.AnnotationBackupAttempt: "1"})

	g.Expect(e.hub.Delete(e.ctx, got)).To(Succeed())
	g.Eventually(func() bool {
		return apierrors.IsNotFound(e.hub.Get(e.ctx, client.ObjectKey{Namespace: ns, Name: "old"}, &fleetv1alpha1.Database{}))
	}).WithTimeout(eventually).WithPolling(poll).Should(BeTrue())
	var forged batchv1.Job
	g.Expect(e.member("m1").Get(e.ctx, client.ObjectKey{Namespace: ns, Name: name}, &forged)).To(Succeed(), "the teardown leaves a Job the hub did not create")
	g.Expect(forged.DeletionTimestamp).To(BeNil())
}

// testTeardownKeepsForgedRotationJob: a Database deleted while a rotation
// is under way loses the rotation Job the hub created; a Job that carries
// the same labels (the hub's identity included) at another name, which the
// hub did not create, survives the teardown.
func testTeardownKeepsForgedRotationJob(t *testing.T, e *env, ns string) {
	g := NewWithT(t)
	e.createReady(g, newDB(ns, "turn", "m1"))
	e.annotate(g, ns, "turn", "r1")
	own := e.waitJob(g, "m1", ns, fleetv1alpha1.LabelRotation, "", member.RotationJobName("turn", "r1", 1))
	name := member.RotationJobName("turn", "r1", 1) + "-x"
	forgeJob(g, e, "m1", ns, name, own.Labels, map[string]string{fleetv1alpha1.AnnotationRotationAttempt: "1"})

	g.Expect(e.hub.Delete(e.ctx, e.getDB(ns, "turn"))).To(Succeed())
	g.Eventually(func() bool {
		return apierrors.IsNotFound(e.hub.Get(e.ctx, client.ObjectKey{Namespace: ns, Name: "turn"}, &fleetv1alpha1.Database{}))
	}).WithTimeout(eventually).WithPolling(poll).Should(BeTrue())
	e.expectJobGone(g, "m1", own)
	var forged batchv1.Job
	g.Expect(e.member("m1").Get(e.ctx, client.ObjectKey{Namespace: ns, Name: name}, &forged)).To(Succeed(), "the teardown leaves a Job the hub did not create")
	g.Expect(forged.DeletionTimestamp).To(BeNil())
}
