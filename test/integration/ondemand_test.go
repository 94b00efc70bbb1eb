package integration

import (
	"fmt"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleetv1alpha1 "github.com/fleetdb/fleetdb/apis/v1alpha1"
	"github.com/fleetdb/fleetdb/member"
)

// TestOnDemandBackup runs on-demand backups (DatabaseBackup) and restores
// (spec.restoreFrom) on a hub and two members. envtest runs no Job
// controller and no pods: the test plays both, finishing the Jobs the hub
// creates and giving the backup Jobs a pod whose container terminated with
// the result line the backup script writes.
func TestOnDemandBackup(t *testing.T) {
	e := startEnvWith(t, envOptions{}, "m1", "m2")
	e.sim.enable("m1", true)
	e.sim.enable("m2", true)
	ns := e.namespace("backups")
	g := NewWithT(t)
	e.createReady(g, newDB(ns, "orders", "m1", "m2"))

	t.Run("a DatabaseBackup runs a Job in every member and reports each", func(t *testing.T) { testBackupFanOut(t, e, ns) })
	t.Run("clusterNames limits the members; a named member that is not placed is Skipped", func(t *testing.T) { testBackupSubset(t, e, ns) })
	t.Run("a DatabaseBackup of a missing Database stalls", func(t *testing.T) { testBackupNoDatabase(t, e, ns) })
	t.Run("a hub restarted while a backup Job runs records it and runs no second one", func(t *testing.T) { testBackupHubRestart(t, e, ns) })
	t.Run("an unreachable member waits with a message; deleting past the unreachable timeout gives it up with an Event", func(t *testing.T) {
		testBackupUnreachable(t, e, ns)
	})
	t.Run("restoreFrom: the client Service appears only after the member's restore succeeded; a failed restore holds the member", func(t *testing.T) {
		testRestore(t, e, ns)
	})
	t.Run("restoreFrom on the CloudNativePG backend restores through <name>-rw", func(t *testing.T) { testRestoreCNPG(t, e, ns) })
	t.Run("restoreFrom naming a backup that is not there waits", func(t *testing.T) { testRestoreWaits(t, e, ns) })
	t.Run("deleting a DatabaseBackup: Delete runs a cleanup Job per member, Retain none", func(t *testing.T) { testBackupDelete(t, e, ns) })
}

func newBackup(ns, name, db string, policy string, members ...string) *fleetv1alpha1.DatabaseBackup {
	return &fleetv1alpha1.DatabaseBackup{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec:       fleetv1alpha1.DatabaseBackupSpec{DatabaseName: db, ClusterNames: members, DeletionPolicy: policy},
	}
}

func (e *env) getBackup(g Gomega, ns, name string) *fleetv1alpha1.DatabaseBackup {
	var b fleetv1alpha1.DatabaseBackup
	g.Expect(e.hub.Get(e.ctx, client.ObjectKey{Namespace: ns, Name: name}, &b)).To(Succeed())
	return &b
}

// jobsWith lists the Jobs in a member's namespace that carry the label key
// (with value, when not empty) and are not being deleted.
func (e *env) jobsWith(g Gomega, m, ns, key, value string) []*batchv1.Job {
	var list batchv1.JobList
	g.Expect(e.member(m).List(e.ctx, &list, client.InNamespace(ns), client.HasLabels{key})).To(Succeed())
	var out []*batchv1.Job
	for i := range list.Items {
		j := &list.Items[i]
		if j.DeletionTimestamp.IsZero() && (value == "" || j.Labels[key] == value) {
			out = append(out, j)
		}
	}
	return out
}

// waitJob waits for exactly one Job whose name contains part and whose
// label key starts with prefix in a member.
func (e *env) waitJob(g Gomega, m, ns, key, prefix, part string) *batchv1.Job {
	var job *batchv1.Job
	g.Eventually(func(g Gomega) {
		var found []*batchv1.Job
		for _, j := range e.jobsWith(g, m, ns, key, "") {
			if strings.Contains(j.Name, part) && strings.HasPrefix(j.Labels[key], prefix) {
				found = append(found, j)
			}
		}
		g.Expect(found).To(HaveLen(1), "a %s Job in %s", part, m)
		job = found[0]
	}).WithTimeout(eventually).WithPolling(poll).Should(Succeed())
	return job
}

// finishWithResult plays the Job's pod and the Job controller: a pod of the
// Job whose first container terminated with message (the termination
// message), then the Job's status.
func (e *env) finishWithResult(g Gomega, m string, job *batchv1.Job, succeeded bool, message string) {
	c := job.Spec.Template.Spec.Containers[0]
	if ic := job.Spec.Template.Spec.InitContainers; len(ic) > 0 {
		c = ic[0]
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: job.Namespace, Name: job.Name + "-x1", Labels: map[string]string{batchv1.JobNameLabel: job.Name}},
		Spec: corev1.PodSpec{RestartPolicy: corev1.RestartPolicyNever, AutomountServiceAccountToken: ptrTo(false),
			Containers: []corev1.Container{{Name: c.Name, Image: c.Image}}},
	}
	g.Expect(e.member(m).Create(e.ctx, pod)).To(Succeed())
	phase, code := corev1.PodSucceeded, int32(0)
	if !succeeded {
		phase, code = corev1.PodFailed, 1
	}
	pod.Status = corev1.PodStatus{Phase: phase, ContainerStatuses: []corev1.ContainerStatus{{
		Name: c.Name, Image: c.Image,
		State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: code, Reason: "Completed", Message: message}},
	}}}
	g.Expect(e.member(m).Status().Update(e.ctx, pod)).To(Succeed())
	e.finishJob(g, m, job, succeeded)
}

func ptrTo[T any](v T) *T { return &v }

// backupResult is the result line the backup script writes for a backup.
func backupResult(ns, db, id string, size int64) string {
	return fmt.Sprintf(`{"phase":"Succeeded","backupID":"%s","path":"%s","sizeBytes":%d,"engine":"postgres","version":"17.2","created":"2026-11-30T23:00:00Z"}`,
		id, member.BackupDir(ns, db, id), size)
}

// runBackup creates a DatabaseBackup and plays its Jobs to success in the members.
func (e *env) runBackup(g Gomega, b *fleetv1alpha1.DatabaseBackup, members ...string) *fleetv1alpha1.DatabaseBackup {
	g.Expect(e.hub.Create(e.ctx, b)).To(Succeed())
	for i, m := range members {
		job := e.waitJob(g, m, b.Namespace, fleetv1alpha1.LabelBackupID, b.Name+"-", "-bk-")
		e.finishWithResult(g, m, job, true, backupResult(b.Namespace, b.Spec.DatabaseName, job.Labels[fleetv1alpha1.LabelBackupID], int64(1000+i)))
	}
	g.Eventually(func(g Gomega) {
		g.Expect(e.getBackup(g, b.Namespace, b.Name).Status.Phase).To(Equal(fleetv1alpha1.BackupPhaseSucceeded))
	}).WithTimeout(eventually).WithPolling(poll).Should(Succeed())
	return e.getBackup(g, b.Namespace, b.Name)
}

func testBackupFanOut(t *testing.T, e *env, ns string) {
	g := NewWithT(t)
	g.Expect(e.hub.Create(e.ctx, newBackup(ns, "nightly", "orders", ""))).To(Succeed())
	jobs := map[string]*batchv1.Job{}
	for _, m := range []string{"m1", "m2"} {
		jobs[m] = e.waitJob(g, m, ns, fleetv1alpha1.LabelBackupID, "nightly-", "-bk-")
		job := jobs[m]
		g.Expect(job.Labels).To(HaveKeyWithValue(fleetv1alpha1.LabelHubID, e.hubID(g)), "the Job carries the hub identity")
		g.Expect(job.Labels).To(HaveKeyWithValue(fleetv1alpha1.LabelBackupKind, fleetv1alpha1.BackupKindOnDemand))
		g.Expect(job.Spec.Template.Spec.Volumes[0].PersistentVolumeClaim.ClaimName).To(Equal("orders-backups"))
		var pvc corev1.PersistentVolumeClaim
		g.Expect(e.member(m).Get(e.ctx, client.ObjectKey{Namespace: ns, Name: "orders-backups"}, &pvc)).To(Succeed(), "the backup volume claim in %s", m)
	}
	g.Expect(jobs["m1"].Name).To(Equal(jobs["m2"].Name), "the Job's name is the same everywhere (from the DatabaseBackup's UID)")
	g.Eventually(func(g Gomega) {
		b := e.getBackup(g, ns, "nightly")
		g.Expect(b.Finalizers).To(ContainElement(fleetv1alpha1.BackupFinalizer))
		g.Expect(b.Status.Phase).To(Equal(fleetv1alpha1.BackupPhaseRunning))
		g.Expect(b.Status.Clusters).To(HaveLen(2))
		for _, rec := range b.Status.Clusters {
			g.Expect(rec.Phase).To(Equal(fleetv1alpha1.BackupPhaseRunning), rec.Cluster)
			g.Expect(rec.Started).NotTo(BeNil())
		}
	}).WithTimeout(eventually).WithPolling(poll).Should(Succeed())

	id := jobs["m1"].Labels[fleetv1alpha1.LabelBackupID]
	e.finishWithResult(g, "m1", jobs["m1"], true, backupResult(ns, "orders", id, 4096))
	e.finishWithResult(g, "m2", jobs["m2"], false, `{"phase":"Failed","step":"pg_dump of database oid 16385","exitCode":1}`)
	g.Eventually(func(g Gomega) {
		b := e.getBackup(g, ns, "nightly")
		g.Expect(b.Status.Phase).To(Equal(fleetv1alpha1.BackupPhasePartiallyFailed))
		m1, m2 := b.Record("m1"), b.Record("m2")
		g.Expect(m1.Phase).To(Equal(fleetv1alpha1.BackupPhaseSucceeded))
		g.Expect(m1.SizeBytes).To(HaveValue(BeEquivalentTo(4096)))
		g.Expect(m1.Location).To(Equal("persistentvolumeclaim/orders-backups:" + member.BackupDir(ns, "orders", id)))
		g.Expect(m1.Finished).NotTo(BeNil())
		g.Expect(m1.BackupID).To(Equal(id))
		g.Expect(m2.Phase).To(Equal(fleetv1alpha1.BackupPhaseFailed))
		g.Expect(m2.Message).To(ContainSubstring("BackoffLimitExceeded"))
		g.Expect(condition(b.Status.Conditions, fleetv1alpha1.ConditionReady)).To(HaveField("Reason", fleetv1alpha1.ReasonBackupPartiallyFailed))
	}).WithTimeout(eventually).WithPolling(poll).Should(Succeed())

	// A finished DatabaseBackup is never written again.
	rv := e.getBackup(g, ns, "nightly").ResourceVersion
	e.settle(g)
	g.Consistently(func(g Gomega) {
		g.Expect(e.getBackup(g, ns, "nightly").ResourceVersion).To(Equal(rv))
	}).WithTimeout(3 * memberCallTimeout / 2).WithPolling(poll).Should(Succeed())
}

func testBackupSubset(t *testing.T, e *env, ns string) {
	g := NewWithT(t)
	b := e.runBackup(g, newBackup(ns, "only-m2", "orders", "", "m2", "elsewhere"), "m2")
	g.Expect(b.Record("m2").Phase).To(Equal(fleetv1alpha1.BackupPhaseSucceeded))
	g.Expect(b.Record("elsewhere")).To(HaveField("Phase", fleetv1alpha1.BackupPhaseSkipped))
	g.Expect(b.Record("m1")).To(BeNil())
	for _, j := range e.jobsWith(g, "m1", ns, fleetv1alpha1.LabelBackupID, "") {
		g.Expect(j.Labels[fleetv1alpha1.LabelBackupID]).NotTo(HavePrefix("only-m2"), "no Job in m1")
	}
}

func testBackupNoDatabase(t *testing.T, e *env, ns string) {
	g := NewWithT(t)
	g.Expect(e.hub.Create(e.ctx, newBackup(ns, "ghost", "nobody", ""))).To(Succeed())
	g.Eventually(func(g Gomega) {
		b := e.getBackup(g, ns, "ghost")
		g.Expect(b.Status.Phase).To(Equal(fleetv1alpha1.BackupPhasePending))
		g.Expect(condition(b.Status.Conditions, fleetv1alpha1.ConditionStalled)).To(HaveField("Reason", fleetv1alpha1.ReasonDatabaseNotFound))
	}).WithTimeout(eventually).WithPolling(poll).Should(Succeed())
	// It can be deleted: nothing ran.
	g.Expect(e.hub.Delete(e.ctx, e.getBackup(g, ns, "ghost"))).To(Succeed())
	e.waitBackupGone(g, ns, "ghost")
}

func (e *env) waitBackupGone(g Gomega, ns, name string) {
	g.Eventually(func() bool {
		err := e.hub.Get(e.ctx, client.ObjectKey{Namespace: ns, Name: name}, &fleetv1alpha1.DatabaseBackup{})
		return apierrors.IsNotFound(err)
	}).WithTimeout(eventually).WithPolling(poll).Should(BeTrue(), "DatabaseBackup %s is gone", name)
}

func testBackupDelete(t *testing.T, e *env, ns string) {
	g := NewWithT(t)
	b := e.runBackup(g, newBackup(ns, "weekly", "orders", fleetv1alpha1.BackupDeletionDelete), "m1", "m2")
	id := backupIDOf(g, e, "m1", ns, b)
	g.Expect(e.hub.Delete(e.ctx, b)).To(Succeed())
	for _, m := range []string{"m1", "m2"} {
		cleanup := e.waitJob(g, m, ns, fleetv1alpha1.LabelBackupID, id, "-bkrm-")
		c := cleanup.Spec.Template.Spec.Containers[0]
		g.Expect(c.Command[2]).To(ContainSubstring(`rm -rf -- "$dir"`))
		g.Expect(c.Env).To(ContainElement(corev1.EnvVar{Name: "BACKUP_ID", Value: id}), "it removes exactly this backup")
		for _, env := range c.Env {
			g.Expect(env.ValueFrom).To(BeNil(), "the cleanup Job gets no credential (%s)", env.Name)
		}
		g.Expect(cleanup.Spec.Template.Spec.Volumes).To(ContainElement(HaveField("PersistentVolumeClaim.ClaimName", "orders-backups")))
		// The DatabaseBackup waits for the cleanup.
		g.Expect(e.hub.Get(e.ctx, client.ObjectKeyFromObject(b), &fleetv1alpha1.DatabaseBackup{})).To(Succeed())
		e.finishJob(g, m, cleanup, true)
	}
	e.waitBackupGone(g, ns, "weekly")
	for _, m := range []string{"m1", "m2"} {
		g.Eventually(func(g Gomega) {
			g.Expect(e.jobsWith(g, m, ns, fleetv1alpha1.LabelBackupID, id)).To(BeEmpty(), "the backup's Jobs are removed from %s", m)
		}).WithTimeout(eventually).WithPolling(poll).Should(Succeed())
		var pvc corev1.PersistentVolumeClaim
		g.Expect(e.member(m).Get(e.ctx, client.ObjectKey{Namespace: ns, Name: "orders-backups"}, &pvc)).To(Succeed(), "the backup volume stays")
	}

	// Retain: no cleanup Job; the object goes, the backup's Jobs too.
	b = e.runBackup(g, newBackup(ns, "keep", "orders", fleetv1alpha1.BackupDeletionRetain), "m1", "m2")
	id = backupIDOf(g, e, "m1", ns, b)
	g.Expect(e.hub.Delete(e.ctx, b)).To(Succeed())
	e.waitBackupGone(g, ns, "keep")
	for _, m := range []string{"m1", "m2"} {
		g.Eventually(func(g Gomega) {
			g.Expect(e.jobsWith(g, m, ns, fleetv1alpha1.LabelBackupID, id)).To(BeEmpty())
		}).WithTimeout(eventually).WithPolling(poll).Should(Succeed())
		var list batchv1.JobList
		g.Expect(e.member(m).List(e.ctx, &list, client.InNamespace(ns))).To(Succeed())
		for _, j := range list.Items {
			g.Expect(j.Name).NotTo(ContainSubstring("-bkrm-"+strings.TrimPrefix(id, "keep-")), "no cleanup Job with Retain")
		}
	}
}

// backupIDOf is the backup ID of a DatabaseBackup, read from its Job in a member.
func backupIDOf(g Gomega, e *env, m, ns string, b *fleetv1alpha1.DatabaseBackup) string {
	for _, j := range e.jobsWith(g, m, ns, fleetv1alpha1.LabelBackupID, "") {
		if id := j.Labels[fleetv1alpha1.LabelBackupID]; strings.HasPrefix(id, b.Name+"-") {
			return id
		}
	}
	g.Expect(false).To(BeTrue(), "no backup Job of %s in %s", b.Name, m)
	return ""
}

func testRestore(t *testing.T, e *env, ns string) {
	g := NewWithT(t)
	e.runBackup(g, newBackup(ns, "source", "orders", ""), "m1", "m2")
	db := newDB(ns, "copy", "m1", "m2")
	db.Spec.RestoreFrom = &fleetv1alpha1.RestoreSource{BackupName: "source"}
	g.Expect(e.hub.Create(e.ctx, db)).To(Succeed())

	jobs := map[string]*batchv1.Job{}
	for _, m := range []string{"m1", "m2"} {
		jobs[m] = e.waitJob(g, m, ns, fleetv1alpha1.LabelRestore, "", "copy-restore-")
		c := jobs[m].Spec.Template.Spec.Containers[0]
		g.Expect(c.Env).To(ContainElement(corev1.EnvVar{Name: "DB_HOST", Value: "copy-0.copy-hl"}), "pod 0, not the client Service")
		g.Expect(jobs[m].Spec.Template.Spec.Volumes[0].PersistentVolumeClaim.ClaimName).To(Equal("orders-backups"))
		g.Expect(jobs[m].OwnerReferences).To(ContainElement(HaveField("Kind", "StatefulSet")), "collected with the workload")
		e.expectNoClientService(g, m, ns, "copy")
	}
	g.Eventually(func(g Gomega) {
		got := e.getDB(ns, "copy")
		g.Expect(got.Status.Phase).To(Equal(fleetv1alpha1.PhaseProvisioning))
		g.Expect(clusterEntry(got, "m1")).To(HaveField("Reason", fleetv1alpha1.ReasonRestoring))
		g.Expect(condition(got.Status.Conditions, fleetv1alpha1.ConditionRestored)).To(HaveField("Status", metav1.ConditionFalse))
	}).WithTimeout(eventually).WithPolling(poll).Should(Succeed())

	e.finishJob(g, "m1", jobs["m1"], true)
	e.finishJob(g, "m2", jobs["m2"], false)
	g.Eventually(func(g Gomega) {
		var svc corev1.Service
		g.Expect(e.member("m1").Get(e.ctx, client.ObjectKey{Namespace: ns, Name: "copy"}, &svc)).To(Succeed(), "the client Service in m1 after its restore")
		var s corev1.Secret
		g.Expect(e.member("m1").Get(e.ctx, client.ObjectKey{Namespace: ns, Name: "copy-credentials"}, &s)).To(Succeed())
		g.Expect(s.Annotations).To(HaveKeyWithValue(fleetv1alpha1.AnnotationRestored, "source"), "the durable record")
		got := e.getDB(ns, "copy")
		g.Expect(clusterEntry(got, "m1").Phase).To(Equal(fleetv1alpha1.ClusterPhaseReady))
		m2 := clusterEntry(got, "m2")
		g.Expect(m2.Phase).To(Equal(fleetv1alpha1.ClusterPhaseProvisioning))
		g.Expect(m2.Reason).To(Equal(fleetv1alpha1.ReasonRestoreFailed))
		g.Expect(got.Status.Phase).NotTo(Equal(fleetv1alpha1.PhaseReady))
		g.Expect(condition(got.Status.Conditions, fleetv1alpha1.ConditionRestored)).To(HaveField("Reason", fleetv1alpha1.ReasonRestoreFailed))
		g.Expect(got.Status.Restore).To(ContainElement(And(HaveField("Cluster", "m1"), HaveField("Phase", fleetv1alpha1.BackupPhaseSucceeded))))
		g.Expect(got.Status.Restore).To(ContainElement(And(HaveField("Cluster", "m2"), HaveField("Phase", fleetv1alpha1.BackupPhaseFailed))))
	}).WithTimeout(eventually).WithPolling(poll).Should(Succeed())
	e.expectNoClientService(g, "m2", ns, "copy")

	// The failed restore is retried after a backoff, as a new Job.
	var retry *batchv1.Job
	g.Eventually(func(g Gomega) {
		for _, j := range e.jobsWith(g, "m2", ns, fleetv1alpha1.LabelRestore, "") {
			if j.Annotations[fleetv1alpha1.AnnotationRestoreAttempt] == "2" {
				retry = j
			}
		}
		g.Expect(retry).NotTo(BeNil())
	}).WithTimeout(eventually).WithPolling(poll).Should(Succeed())
	e.expectNoClientService(g, "m2", ns, "copy")
	e.finishJob(g, "m2", retry, true)
	g.Eventually(func(g Gomega) {
		got := e.getDB(ns, "copy")
		g.Expect(got.Status.Phase).To(Equal(fleetv1alpha1.PhaseReady))
		g.Expect(condition(got.Status.Conditions, fleetv1alpha1.ConditionRestored)).To(HaveField("Status", metav1.ConditionTrue))
	}).WithTimeout(eventually).WithPolling(poll).Should(Succeed())

	// A hub restart does not run a finished restore again, even with its
	// Jobs gone: the member Secret's record says it is done.
	for _, m := range []string{"m1", "m2"} {
		for _, j := range e.jobsWith(g, m, ns, fleetv1alpha1.LabelRestore, "") {
			g.Expect(e.member(m).Delete(e.ctx, j)).To(Succeed())
		}
	}
	e.stopHub()
	e.startHub(envOptions{})
	e.waitMemberReady("m1")
	e.waitMemberReady("m2")
	e.settle(g)
	g.Consistently(func(g Gomega) {
		for _, m := range []string{"m1", "m2"} {
			g.Expect(e.jobsWith(g, m, ns, fleetv1alpha1.LabelRestore, "")).To(BeEmpty(), "no restore Job in %s after the restart", m)
			var svc corev1.Service
			g.Expect(e.member(m).Get(e.ctx, client.ObjectKey{Namespace: ns, Name: "copy"}, &svc)).To(Succeed())
		}
		g.Expect(e.getDB(ns, "copy").Status.Phase).To(Equal(fleetv1alpha1.PhaseReady))
	}).WithTimeout(2 * memberCallTimeout).WithPolling(poll).Should(Succeed())
}

// quiet waits until probe returned the same value on three polls a second
// apart (two seconds without a change) and returns it.
func quiet(g Gomega, probe func() string) string {
	last, same := "", 0
	g.Eventually(func() bool {
		v := probe()
		if v == last {
			same++
		} else {
			same = 0
		}
		last = v
		return same >= 2
	}).WithTimeout(eventually).WithPolling(time.Second).Should(BeTrue())
	return last
}

func (e *env) expectNoClientService(g Gomega, m, ns, name string) {
	err := e.member(m).Get(e.ctx, client.ObjectKey{Namespace: ns, Name: name}, &corev1.Service{})
	g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "no client Service %s in %s before the restore: %v", name, m, err)
}

func testRestoreWaits(t *testing.T, e *env, ns string) {
	g := NewWithT(t)
	db := newDB(ns, "early", "m1")
	db.Spec.RestoreFrom = &fleetv1alpha1.RestoreSource{BackupName: "not-yet"}
	g.Expect(e.hub.Create(e.ctx, db)).To(Succeed())
	g.Eventually(func(g Gomega) {
		got := e.getDB(ns, "early")
		g.Expect(clusterEntry(got, "m1")).To(HaveField("Reason", fleetv1alpha1.ReasonWaitingForBackup))
		g.Expect(condition(got.Status.Conditions, fleetv1alpha1.ConditionRestored)).To(HaveField("Reason", fleetv1alpha1.ReasonWaitingForBackup))
	}).WithTimeout(eventually).WithPolling(poll).Should(Succeed())
	g.Expect(e.jobsWith(g, "m1", ns, fleetv1alpha1.LabelRestore, member.RestoreHash(string(e.getDB(ns, "early").UID)))).To(BeEmpty())
	e.expectNoClientService(g, "m1", ns, "early")

	// fromCluster naming another member: a backup on a member's volume
	// cannot be read elsewhere.
	other := newDB(ns, "elsewhere", "m1")
	other.Spec.RestoreFrom = &fleetv1alpha1.RestoreSource{BackupName: "source", FromCluster: "m2"}
	g.Expect(e.hub.Create(e.ctx, other)).To(Succeed())
	g.Eventually(func(g Gomega) {
		got := e.getDB(ns, "elsewhere")
		g.Expect(condition(got.Status.Conditions, fleetv1alpha1.ConditionRestored)).To(HaveField("Reason", fleetv1alpha1.ReasonBackupUnusable))
		g.Expect(condition(got.Status.Conditions, fleetv1alpha1.ConditionStalled)).To(HaveField("Status", metav1.ConditionTrue))
	}).WithTimeout(eventually).WithPolling(poll).Should(Succeed())
	e.expectNoClientService(g, "m1", ns, "elsewhere")
	// Stalled is steady: no status write per pass. The member's own report
	// of the workload it was given may land after Stalled did (one more
	// write), so the check starts once the status stopped changing.
	rv := quiet(g, func() string { return e.getDB(ns, "elsewhere").ResourceVersion })
	g.Consistently(func() string { return e.getDB(ns, "elsewhere").ResourceVersion }).
		WithTimeout(3 * memberCallTimeout / 2).WithPolling(poll).Should(Equal(rv))
}

// testRestoreCNPG: on the CloudNativePG backend the restore Job connects to
// CloudNativePG's "<name>-rw" Service, is owned by the Cluster, and the
// client Service "<name>" waits for it.
func testRestoreCNPG(t *testing.T, e *env, ns string) {
	g := NewWithT(t)
	db := newCNPGDB(ns, "cnpg-copy", "m1")
	db.Spec.RestoreFrom = &fleetv1alpha1.RestoreSource{BackupName: "source"}
	g.Expect(e.hub.Create(e.ctx, db)).To(Succeed())
	job := e.waitJob(g, "m1", ns, fleetv1alpha1.LabelRestore, "", "cnpg-copy-restore-")
	c := job.Spec.Template.Spec.Containers[0]
	g.Expect(c.Env).To(ContainElement(corev1.EnvVar{Name: "DB_HOST", Value: "cnpg-copy-rw"}))
	g.Expect(job.OwnerReferences).To(ContainElement(HaveField("Kind", "Cluster")))
	e.expectNoClientService(g, "m1", ns, "cnpg-copy")
	e.finishJob(g, "m1", job, true)
	g.Eventually(func(g Gomega) {
		got := e.getDB(ns, "cnpg-copy")
		g.Expect(got.Status.Phase).To(Equal(fleetv1alpha1.PhaseReady))
		g.Expect(condition(got.Status.Conditions, fleetv1alpha1.ConditionRestored)).To(HaveField("Status", metav1.ConditionTrue))
		g.Expect(got.Status.Restore).To(ConsistOf(HaveField("Location", ContainSubstring("orders-backups"))))
	}).WithTimeout(eventually).WithPolling(poll).Should(Succeed())
	g.Expect(e.member("m1").Get(e.ctx, client.ObjectKey{Namespace: ns, Name: "cnpg-copy"}, &corev1.Service{})).To(Succeed())
}

// testBackupUnreachable: a member cut off keeps its record Pending with a
// message (no error storm), the other member's backup runs; when it comes
// back its backup runs too. Deleting a backup while a member is cut off
// waits for the Database's unreachableTimeout, then lets the object go with
// a CleanupSkipped Event naming what was left there.
func testBackupUnreachable(t *testing.T, e *env, ns string) {
	g := NewWithT(t)
	db := newDB(ns, "brief", "m1", "m2")
	db.Spec.Teardown.UnreachableTimeout = &metav1.Duration{Duration: 3 * time.Second}
	e.createReady(g, db)

	b := newBackup(ns, "while-away", "brief", "")
	e.cutAndRestore(g, "m1", func() {
		g.Expect(e.hub.Create(e.ctx, b)).To(Succeed())
		job := e.waitJob(g, "m2", ns, fleetv1alpha1.LabelBackupID, "while-away-", "-bk-")
		e.finishWithResult(g, "m2", job, true, backupResult(ns, "brief", job.Labels[fleetv1alpha1.LabelBackupID], 10))
		g.Eventually(func(g Gomega) {
			got := e.getBackup(g, ns, "while-away")
			g.Expect(got.Record("m2").Phase).To(Equal(fleetv1alpha1.BackupPhaseSucceeded))
			g.Expect(got.Record("m1").Phase).To(Equal(fleetv1alpha1.BackupPhasePending))
			g.Expect(got.Record("m1").Message).To(ContainSubstring("unreachable"))
			g.Expect(got.Status.Phase).To(Equal(fleetv1alpha1.BackupPhasePending))
		}).WithTimeout(eventually).WithPolling(poll).Should(Succeed())
	})
	job := e.waitJob(g, "m1", ns, fleetv1alpha1.LabelBackupID, "while-away-", "-bk-")
	e.finishWithResult(g, "m1", job, true, backupResult(ns, "brief", job.Labels[fleetv1alpha1.LabelBackupID], 11))
	g.Eventually(func(g Gomega) {
		g.Expect(e.getBackup(g, ns, "while-away").Status.Phase).To(Equal(fleetv1alpha1.BackupPhaseSucceeded))
	}).WithTimeout(eventually).WithPolling(poll).Should(Succeed())

	// Deleted while m1 is cut off: m2 is cleaned, m1 given up on after the timeout.
	e.cutAndRestore(g, "m1", func() {
		g.Expect(e.hub.Delete(e.ctx, e.getBackup(g, ns, "while-away"))).To(Succeed())
		cleanup := e.waitJob(g, "m2", ns, fleetv1alpha1.LabelBackupID, "while-away-", "-bkrm-")
		e.finishJob(g, "m2", cleanup, true)
		e.waitBackupGone(g, ns, "while-away")
		g.Eventually(func(g Gomega) {
			var list eventsv1.EventList
			g.Expect(e.hub.List(e.ctx, &list, client.InNamespace(ns))).To(Succeed())
			found := false
			for _, ev := range list.Items {
				if ev.Reason == "CleanupSkipped" && ev.Regarding.Name == "while-away" {
					g.Expect(ev.Note).To(ContainSubstring("member m1"))
					g.Expect(ev.Note).To(ContainSubstring("brief-backups"))
					found = true
				}
			}
			g.Expect(found).To(BeTrue(), "a CleanupSkipped Event")
		}).WithTimeout(eventually).WithPolling(poll).Should(Succeed())
	})
}

// testBackupHubRestart: a hub restarted while a member's backup Job runs
// finds that Job again (its name comes from the DatabaseBackup's UID), runs
// no second one, and records its result.
func testBackupHubRestart(t *testing.T, e *env, ns string) {
	g := NewWithT(t)
	g.Expect(e.hub.Create(e.ctx, newBackup(ns, "across-restart", "orders", "", "m1"))).To(Succeed())
	job := e.waitJob(g, "m1", ns, fleetv1alpha1.LabelBackupID, "across-restart-", "-bk-")
	g.Eventually(func(g Gomega) {
		g.Expect(e.getBackup(g, ns, "across-restart").Record("m1")).To(HaveField("Phase", fleetv1alpha1.BackupPhaseRunning))
	}).WithTimeout(eventually).WithPolling(poll).Should(Succeed())
	e.stopHub()
	e.finishWithResult(g, "m1", job, true, backupResult(ns, "orders", job.Labels[fleetv1alpha1.LabelBackupID], 77))
	e.startHub(envOptions{})
	e.waitMemberReady("m1")
	g.Eventually(func(g Gomega) {
		rec := e.getBackup(g, ns, "across-restart").Record("m1")
		g.Expect(rec.Phase).To(Equal(fleetv1alpha1.BackupPhaseSucceeded))
		g.Expect(rec.SizeBytes).To(HaveValue(BeEquivalentTo(77)))
	}).WithTimeout(eventually).WithPolling(poll).Should(Succeed())
	g.Expect(e.jobsWith(g, "m1", ns, fleetv1alpha1.LabelBackupID, job.Labels[fleetv1alpha1.LabelBackupID])).To(HaveLen(1), "no second backup Job")
}
