package integration

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleetv1alpha1 "github.com/fleetdb/fleetdb/apis/v1alpha1"
	"github.com/fleetdb/fleetdb/member"
	"github.com/fleetdb/fleetdb/test/fleet"
)

// TestFinalBackup: a Database deleted with deletionPolicy Delete is backed
// up in each member before its data goes there. envtest runs no Job
// controller and no kubelet: finishBackupJobs plays both.
func TestFinalBackup(t *testing.T) {
	gate := &statusGate{}
	e := startEnvWith(t, envOptions{withoutCNPG: []string{"m1", "m2"}, hubWrap: gate.wrap}, "m1", "m2")
	for _, m := range []string{"m1", "m2"} {
		e.sim.enable(m, true)
	}
	t.Run("Required (the default) waits for each member's Job and records it", func(t *testing.T) { testFinalBackupRequired(t, e, gate) })
	t.Run("a failed Required backup holds that member; a retry runs; Skip releases it", func(t *testing.T) { testFinalBackupFailed(t, e) })
	t.Run("Skip deletes at once without a Job", func(t *testing.T) { testFinalBackupSkip(t, e) })
	t.Run("BestEffort records a failure and goes on", func(t *testing.T) { testFinalBackupBestEffort(t, e) })
	t.Run("an unreachable member within unreachableTimeout waits, then is backed up", func(t *testing.T) { testFinalBackupUnreachable(t, e) })
	t.Run("a member unreachable past the timeout: Skipped, its data retained", func(t *testing.T) { testFinalBackupUnreachableTimeout(t, e) })
	t.Run("a member dropped from placement with onPlacementRemoval Delete is backed up first", func(t *testing.T) { testFinalBackupPlacementRemoval(t, e) })
	t.Run("a member that never ran the Database has nothing to back up", func(t *testing.T) { testFinalBackupNothingThere(t, e) })
}

// backupDB is a Database whose deletion takes final backups by policy ("" : the default).
func backupDB(ns, name string, policy fleetv1alpha1.FinalBackupPolicy, members ...string) *fleetv1alpha1.Database {
	db := newDB(ns, name, members...)
	db.Spec.Backup = nil
	if policy != "" {
		db.Spec.Backup = &fleetv1alpha1.BackupSpec{FinalBackup: policy}
	}
	return db
}

// readyThenDelete creates db, waits for Ready, gives each member the data
// volume claim its StatefulSet controller would have made, and deletes it.
func readyThenDelete(t *testing.T, e *env, db *fleetv1alpha1.Database, members ...string) {
	g := NewWithT(t)
	g.Expect(e.hub.Create(e.ctx, db)).To(Succeed())
	g.Eventually(func(g Gomega) {
		g.Expect(e.getDB(db.Namespace, db.Name).Status.Phase).To(Equal(fleetv1alpha1.PhaseReady))
	}).WithTimeout(eventually).WithPolling(poll).Should(Succeed())
	for _, m := range members {
		g.Expect(e.member(m).Create(e.ctx, pvcFor(e, m, db.Namespace, db.Name))).To(Succeed())
	}
	g.Expect(e.hub.Delete(e.ctx, e.getDB(db.Namespace, db.Name))).To(Succeed())
}

// backupJobs lists the final backup Jobs in a member's namespace.
func backupJobs(g Gomega, e *env, m, ns string) []batchv1.Job {
	var jobs batchv1.JobList
	g.Expect(e.member(m).List(e.ctx, &jobs, client.InNamespace(ns), client.MatchingLabels{
		fleetv1alpha1.LabelComponent: fleetv1alpha1.ComponentBackup, fleetv1alpha1.LabelBackupKind: fleetv1alpha1.BackupKindFinal,
	})).To(Succeed())
	return jobs.Items
}

// finishBackupJobs plays the Job controller and kubelet for the backup Jobs
// in a member's namespace that have not ended: a pod whose backup
// container terminated with the result line the script writes (sizeBytes,
// or the failed step), and the Job's terminal status. It returns how many
// it finished.
func finishBackupJobs(g Gomega, e *env, m, ns string, succeed bool, size int64) int {
	n := 0
	for i := range backupJobs(g, e, m, ns) {
		job := backupJobs(g, e, m, ns)[i]
		if jobEnded(&job) || !job.DeletionTimestamp.IsZero() {
			continue
		}
		c := e.member(m)
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, GenerateName: job.Name + "-", Labels: job.Spec.Template.Labels},
			Spec:       *job.Spec.Template.Spec.DeepCopy(),
		}
		g.Expect(c.Create(e.ctx, pod)).To(Succeed())
		now := metav1.Now()
		msg, code, phase := fmt.Sprintf(`{"phase":"Succeeded","backupID":%q,"sizeBytes":%d,"engine":"postgres"}`, job.Labels[fleetv1alpha1.LabelBackupID], size), int32(0), corev1.PodSucceeded
		if !succeed {
			msg, code, phase = `{"phase":"Failed","step":"pg_dump of database oid 16384","exitCode":1}`, 1, corev1.PodFailed
		}
		pod.Status = corev1.PodStatus{Phase: phase, ContainerStatuses: []corev1.ContainerStatus{{
			Name: member.BackupContainerName, Image: job.Spec.Template.Spec.Containers[0].Image,
			State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: code, Message: msg, StartedAt: now, FinishedAt: now}},
		}}}
		g.Expect(c.Status().Update(e.ctx, pod)).To(Succeed())

		job.Status.StartTime = &now
		if succeed {
			job.Status.Succeeded, job.Status.CompletionTime = 1, &now
			job.Status.Conditions = []batchv1.JobCondition{
				{Type: batchv1.JobSuccessCriteriaMet, Status: corev1.ConditionTrue, LastTransitionTime: now},
				{Type: batchv1.JobComplete, Status: corev1.ConditionTrue, LastTransitionTime: now},
			}
		} else {
			job.Status.Failed = 2
			job.Status.Conditions = []batchv1.JobCondition{
				{Type: batchv1.JobFailureTarget, Status: corev1.ConditionTrue, Reason: "BackoffLimitExceeded", LastTransitionTime: now},
				{Type: batchv1.JobFailed, Status: corev1.ConditionTrue, Reason: "BackoffLimitExceeded", Message: "Job has reached the specified backoff limit", LastTransitionTime: now},
			}
		}
		g.Expect(c.Status().Update(e.ctx, &job)).To(Succeed())
		n++
	}
	return n
}

func jobEnded(j *batchv1.Job) bool {
	for _, c := range j.Status.Conditions {
		if (c.Type == batchv1.JobComplete || c.Type == batchv1.JobFailed) && c.Status == corev1.ConditionTrue {
			return true
		}
	}
	return false
}

func finalBackupRecord(db *fleetv1alpha1.Database, cluster string) fleetv1alpha1.BackupRecord {
	for _, r := range db.Status.FinalBackups {
		if r.Cluster == cluster {
			return r
		}
	}
	return fleetv1alpha1.BackupRecord{}
}

// dataLeft checks that nothing of the Database was deleted in the member.
func dataLeft(g Gomega, e *env, m, ns, name string) {
	c := e.member(m)
	g.Expect(c.Get(e.ctx, client.ObjectKey{Namespace: ns, Name: name}, &appsv1.StatefulSet{})).To(Succeed(), "the StatefulSet in %s", m)
	g.Expect(c.Get(e.ctx, client.ObjectKey{Namespace: ns, Name: name + "-credentials"}, &corev1.Secret{})).To(Succeed(), "the Secret in %s", m)
	var pvc corev1.PersistentVolumeClaim
	g.Expect(c.Get(e.ctx, client.ObjectKey{Namespace: ns, Name: "data-" + name + "-0"}, &pvc)).To(Succeed(), "the data claim in %s", m)
	g.Expect(pvc.DeletionTimestamp.IsZero()).To(BeTrue(), "the data claim in %s is being deleted", m)
}

func dbGone(e *env, ns, name string) func() bool {
	return func() bool {
		return apierrors.IsNotFound(e.hub.Get(e.ctx, client.ObjectKey{Namespace: ns, Name: name}, &fleetv1alpha1.Database{}))
	}
}

// backupClaimKept checks the backup volume claim is in the member, not being deleted.
func backupClaimKept(g Gomega, e *env, m, ns, name string) {
	var pvc corev1.PersistentVolumeClaim
	g.Expect(e.member(m).Get(e.ctx, client.ObjectKey{Namespace: ns, Name: member.BackupClaimName(name)}, &pvc)).To(Succeed(), "backup claim in %s", m)
	g.Expect(pvc.DeletionTimestamp.IsZero()).To(BeTrue())
	g.Expect(pvc.OwnerReferences).To(BeEmpty())
}

func testFinalBackupRequired(t *testing.T, e *env, gate *statusGate) {
	g := NewWithT(t)
	ns := e.namespace("backup-required")
	db := backupDB(ns, "orders", "", "m1", "m2")
	readyThenDelete(t, e, db, "m1", "m2")
	uid := e.getDB(ns, "orders").UID

	// Each member runs a backup Job (one), into the backup volume claim; nothing is deleted meanwhile.
	for _, m := range []string{"m1", "m2"} {
		g.Eventually(func(g Gomega) {
			g.Expect(backupJobs(g, e, m, ns)).To(HaveLen(1))
		}).WithTimeout(eventually).WithPolling(poll).Should(Succeed())
		backupClaimKept(g, e, m, ns, "orders")
	}
	g.Eventually(func(g Gomega) {
		got := e.getDB(ns, "orders")
		g.Expect(finalBackupRecord(got, "m1").Phase).To(Equal(fleetv1alpha1.BackupPhaseRunning))
		c := condition(got.Status.Conditions, fleetv1alpha1.ConditionFinalBackup)
		g.Expect(c.Status).To(Equal(metav1.ConditionFalse))
		g.Expect(c.Reason).To(Equal(fleetv1alpha1.ReasonFinalBackupRunning))
	}).WithTimeout(eventually).WithPolling(poll).Should(Succeed())
	dataLeft(g, e, "m1", ns, "orders")
	dataLeft(g, e, "m2", ns, "orders")

	// m1's backup succeeds: it is recorded with its size and location, and m1 is torn down.
	g.Expect(finishBackupJobs(g, e, "m1", ns, true, 4242)).To(Equal(1))
	id := member.FinalBackupID(string(uid))
	g.Eventually(func(g Gomega) {
		rec := finalBackupRecord(e.getDB(ns, "orders"), "m1")
		g.Expect(rec.Phase).To(Equal(fleetv1alpha1.BackupPhaseSucceeded))
		g.Expect(rec.SizeBytes).To(HaveValue(Equal(int64(4242))))
		g.Expect(rec.BackupID).To(Equal(id))
		g.Expect(rec.Location).To(Equal("persistentvolumeclaim/orders-backups:/backups/" + ns + "/orders/" + id))
		g.Expect(rec.Started).NotTo(BeNil())
		g.Expect(rec.Finished).NotTo(BeNil())
	}).WithTimeout(eventually).WithPolling(poll).Should(Succeed())
	g.Eventually(func() bool {
		return apierrors.IsNotFound(e.member("m1").Get(e.ctx, client.ObjectKey{Namespace: ns, Name: "orders"}, &appsv1.StatefulSet{}))
	}).WithTimeout(eventually).WithPolling(poll).Should(BeTrue())
	dataLeft(g, e, "m2", ns, "orders")
	g.Eventually(e.eventSeen(ns, "FinalBackupSucceeded", "m1")).WithTimeout(eventually).WithPolling(poll).Should(Succeed())

	// m2's backup succeeds and m2 is torn down before the hub stores a
	// status that says so (its status writes refused meanwhile, as a write
	// held back by the status pace or lost to a conflict would be): the
	// Database's last stored state still records both backups before the
	// finalizer goes, and an Event says so for m2.
	last := watchUntilGone(t, e, e.getDB(ns, "orders"), func() {
		gate.close(ns, "orders")
		defer gate.open()
		g.Expect(finishBackupJobs(g, e, "m2", ns, true, 100)).To(Equal(1))
		g.Eventually(func() bool {
			return apierrors.IsNotFound(e.member("m2").Get(e.ctx, client.ObjectKey{Namespace: ns, Name: "orders"}, &appsv1.StatefulSet{}))
		}).WithTimeout(eventually).WithPolling(poll).Should(BeTrue())
		g.Consistently(func() error {
			return e.hub.Get(e.ctx, client.ObjectKey{Namespace: ns, Name: "orders"}, &fleetv1alpha1.Database{})
		}).WithTimeout(3*time.Second).WithPolling(poll).Should(Succeed(), "the finalizer went while the final backups were not recorded")
	})
	for _, m := range []string{"m1", "m2"} {
		g.Expect(finalBackupRecord(last, m).Phase).To(Equal(fleetv1alpha1.BackupPhaseSucceeded), "%s in %+v", m, last.Status.FinalBackups)
	}
	c := condition(last.Status.Conditions, fleetv1alpha1.ConditionFinalBackup)
	g.Expect(c.Status).To(Equal(metav1.ConditionTrue), "%+v", c)
	g.Expect(c.Reason).To(Equal(fleetv1alpha1.ReasonFinalBackupsTaken))
	g.Expect(c.Message).To(Equal("final backups: succeeded in m1, m2"))
	g.Eventually(e.eventSeen(ns, "FinalBackupSucceeded", "m2")).WithTimeout(eventually).WithPolling(poll).Should(Succeed())
	for _, m := range []string{"m1", "m2"} {
		backupClaimKept(g, e, m, ns, "orders")
		g.Eventually(func(g Gomega) {
			g.Expect(backupJobs(g, e, m, ns)).To(BeEmpty(), "the hub deletes the Job once recorded")
		}).WithTimeout(eventually).WithPolling(poll).Should(Succeed())
	}
}

func testFinalBackupFailed(t *testing.T, e *env) {
	g := NewWithT(t)
	ns := e.namespace("backup-failed")
	readyThenDelete(t, e, backupDB(ns, "ledger", fleetv1alpha1.FinalBackupRequired, "m1", "m2"), "m1", "m2")
	for _, m := range []string{"m1", "m2"} {
		g.Eventually(func(g Gomega) { g.Expect(backupJobs(g, e, m, ns)).To(HaveLen(1)) }).WithTimeout(eventually).WithPolling(poll).Should(Succeed())
	}
	g.Expect(finishBackupJobs(g, e, "m1", ns, false, 0)).To(Equal(1))
	g.Expect(finishBackupJobs(g, e, "m2", ns, true, 1)).To(Equal(1))

	g.Eventually(func(g Gomega) {
		got := e.getDB(ns, "ledger")
		c := condition(got.Status.Conditions, fleetv1alpha1.ConditionFinalBackup)
		g.Expect(c.Status).To(Equal(metav1.ConditionFalse))
		g.Expect(c.Reason).To(Equal(fleetv1alpha1.ReasonFinalBackupFailed))
		g.Expect(c.Message).To(ContainSubstring("m1"))
		rec := finalBackupRecord(got, "m1")
		g.Expect(rec.Phase).To(Equal(fleetv1alpha1.BackupPhaseFailed))
		g.Expect(rec.Message).To(ContainSubstring("pg_dump of database oid 16384"))
	}).WithTimeout(eventually).WithPolling(poll).Should(Succeed())
	g.Eventually(e.eventSeen(ns, fleetv1alpha1.ReasonFinalBackupFailed, "m1")).WithTimeout(eventually).WithPolling(poll).Should(Succeed())
	// m2 (succeeded) is torn down; m1 keeps everything.
	g.Eventually(func() bool {
		return apierrors.IsNotFound(e.member("m2").Get(e.ctx, client.ObjectKey{Namespace: ns, Name: "ledger"}, &appsv1.StatefulSet{}))
	}).WithTimeout(eventually).WithPolling(poll).Should(BeTrue())
	dataLeft(g, e, "m1", ns, "ledger")
	g.Expect(e.getDB(ns, "ledger").Status.Phase).To(Equal(fleetv1alpha1.PhaseDeleting))

	// The hub retries after its backoff with a new attempt (the failed one is kept for its logs).
	g.Eventually(func(g Gomega) {
		jobs := backupJobs(g, e, "m1", ns)
		g.Expect(jobs).To(HaveLen(2))
		g.Expect([]string{jobs[0].Annotations[fleetv1alpha1.AnnotationBackupAttempt], jobs[1].Annotations[fleetv1alpha1.AnnotationBackupAttempt]}).
			To(ConsistOf("1", "2"))
	}).WithTimeout(2 * eventually).WithPolling(poll).Should(Succeed())
	dataLeft(g, e, "m1", ns, "ledger")

	// The user lets it go without a backup: spec changes on a Database being deleted.
	got := e.getDB(ns, "ledger")
	got.Spec.Backup.FinalBackup = fleetv1alpha1.FinalBackupSkip
	g.Expect(e.hub.Update(e.ctx, got)).To(Succeed())
	g.Eventually(dbGone(e, ns, "ledger")).WithTimeout(eventually).WithPolling(poll).Should(BeTrue())
	g.Expect(apierrors.IsNotFound(e.member("m1").Get(e.ctx, client.ObjectKey{Namespace: ns, Name: "ledger"}, &appsv1.StatefulSet{}))).To(BeTrue())
	backupClaimKept(g, e, "m1", ns, "ledger")
	g.Eventually(func(g Gomega) { g.Expect(backupJobs(g, e, "m1", ns)).To(BeEmpty()) }).WithTimeout(eventually).WithPolling(poll).Should(Succeed())
}

func testFinalBackupSkip(t *testing.T, e *env) {
	g := NewWithT(t)
	ns := e.namespace("backup-skip")
	readyThenDelete(t, e, backupDB(ns, "cache", fleetv1alpha1.FinalBackupSkip, "m1", "m2"), "m1", "m2")
	g.Eventually(dbGone(e, ns, "cache")).WithTimeout(eventually).WithPolling(poll).Should(BeTrue())
	for _, m := range []string{"m1", "m2"} {
		g.Expect(backupJobs(g, e, m, ns)).To(BeEmpty(), "no backup Job in %s", m)
		err := e.member(m).Get(e.ctx, client.ObjectKey{Namespace: ns, Name: member.BackupClaimName("cache")}, &corev1.PersistentVolumeClaim{})
		g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "no backup claim in %s", m)
		g.Expect(apierrors.IsNotFound(e.member(m).Get(e.ctx, client.ObjectKey{Namespace: ns, Name: "data-cache-0"}, &corev1.PersistentVolumeClaim{}))).To(BeTrue())
	}
}

func testFinalBackupBestEffort(t *testing.T, e *env) {
	g := NewWithT(t)
	ns := e.namespace("backup-besteffort")
	readyThenDelete(t, e, backupDB(ns, "audit", fleetv1alpha1.FinalBackupBestEffort, "m1"), "m1")
	g.Eventually(func(g Gomega) { g.Expect(backupJobs(g, e, "m1", ns)).To(HaveLen(1)) }).WithTimeout(eventually).WithPolling(poll).Should(Succeed())
	dataLeft(g, e, "m1", ns, "audit")
	g.Expect(finishBackupJobs(g, e, "m1", ns, false, 0)).To(Equal(1))
	g.Eventually(dbGone(e, ns, "audit")).WithTimeout(eventually).WithPolling(poll).Should(BeTrue())
	g.Eventually(e.eventSeen(ns, fleetv1alpha1.ReasonFinalBackupFailed, "m1")).WithTimeout(eventually).WithPolling(poll).Should(Succeed())
	g.Expect(apierrors.IsNotFound(e.member("m1").Get(e.ctx, client.ObjectKey{Namespace: ns, Name: "data-audit-0"}, &corev1.PersistentVolumeClaim{}))).To(BeTrue())
}

func testFinalBackupUnreachable(t *testing.T, e *env) {
	g := NewWithT(t)
	ns := e.namespace("backup-unreachable")
	db := backupDB(ns, "billing", "", "m1", "m2")
	db.Spec.Teardown.UnreachableTimeout = &metav1.Duration{Duration: 10 * time.Minute}
	g.Expect(e.hub.Create(e.ctx, db)).To(Succeed())
	g.Eventually(func(g Gomega) {
		g.Expect(e.getDB(ns, "billing").Status.Phase).To(Equal(fleetv1alpha1.PhaseReady))
	}).WithTimeout(eventually).WithPolling(poll).Should(Succeed())
	for _, m := range []string{"m1", "m2"} {
		g.Expect(e.member(m).Create(e.ctx, pvcFor(e, m, ns, "billing"))).To(Succeed())
	}
	e.proxies["m2"].Cut()
	t.Cleanup(func() { _ = e.proxies["m2"].Restore() })
	g.Eventually(func(g Gomega) {
		g.Expect(clusterEntry(e.getDB(ns, "billing"), "m2").Phase).To(Equal(fleetv1alpha1.ClusterPhaseUnreachable))
	}).WithTimeout(eventually).WithPolling(poll).Should(Succeed())
	g.Expect(e.hub.Delete(e.ctx, e.getDB(ns, "billing"))).To(Succeed())

	g.Eventually(func(g Gomega) { g.Expect(backupJobs(g, e, "m1", ns)).To(HaveLen(1)) }).WithTimeout(eventually).WithPolling(poll).Should(Succeed())
	g.Expect(finishBackupJobs(g, e, "m1", ns, true, 7)).To(Equal(1))
	g.Eventually(func(g Gomega) {
		got := e.getDB(ns, "billing")
		g.Expect(finalBackupRecord(got, "m1").Phase).To(Equal(fleetv1alpha1.BackupPhaseSucceeded), "%+v", got.Status.FinalBackups)
		rec := finalBackupRecord(got, "m2")
		g.Expect(rec.Phase).To(Equal(fleetv1alpha1.BackupPhasePending))
		g.Expect(rec.Message).To(ContainSubstring("member unreachable"))
		g.Expect(condition(got.Status.Conditions, fleetv1alpha1.ConditionFinalBackup).Reason).To(Equal(fleetv1alpha1.ReasonFinalBackupRunning))
	}).WithTimeout(eventually).WithPolling(poll).Should(Succeed())

	// Back within the timeout: m2 is backed up, then torn down.
	g.Expect(e.proxies["m2"].Restore()).To(Succeed())
	g.Eventually(func(g Gomega) { g.Expect(backupJobs(g, e, "m2", ns)).To(HaveLen(1)) }).WithTimeout(eventually).WithPolling(poll).Should(Succeed())
	dataLeft(g, e, "m2", ns, "billing")
	g.Expect(finishBackupJobs(g, e, "m2", ns, true, 8)).To(Equal(1))
	g.Eventually(dbGone(e, ns, "billing")).WithTimeout(eventually).WithPolling(poll).Should(BeTrue())
	backupClaimKept(g, e, "m2", ns, "billing")
}

func testFinalBackupUnreachableTimeout(t *testing.T, e *env) {
	g := NewWithT(t)
	ns := e.namespace("backup-gone")
	db := backupDB(ns, "payroll", "", "m1", "m2")
	db.Spec.Teardown.UnreachableTimeout = &metav1.Duration{Duration: 3 * time.Second}
	g.Expect(e.hub.Create(e.ctx, db)).To(Succeed())
	g.Eventually(func(g Gomega) {
		g.Expect(e.getDB(ns, "payroll").Status.Phase).To(Equal(fleetv1alpha1.PhaseReady))
	}).WithTimeout(eventually).WithPolling(poll).Should(Succeed())
	g.Expect(e.member("m2").Create(e.ctx, pvcFor(e, "m2", ns, "payroll"))).To(Succeed())
	e.proxies["m2"].Cut()
	t.Cleanup(func() { _ = e.proxies["m2"].Restore() })
	g.Eventually(func(g Gomega) {
		g.Expect(clusterEntry(e.getDB(ns, "payroll"), "m2").Phase).To(Equal(fleetv1alpha1.ClusterPhaseUnreachable))
	}).WithTimeout(eventually).WithPolling(poll).Should(Succeed())
	g.Expect(e.hub.Delete(e.ctx, e.getDB(ns, "payroll"))).To(Succeed())
	g.Eventually(func(g Gomega) { g.Expect(backupJobs(g, e, "m1", ns)).To(HaveLen(1)) }).WithTimeout(eventually).WithPolling(poll).Should(Succeed())
	g.Expect(finishBackupJobs(g, e, "m1", ns, true, 7)).To(Equal(1))

	g.Eventually(dbGone(e, ns, "payroll")).WithTimeout(eventually).WithPolling(poll).Should(BeTrue())
	g.Eventually(e.eventSeen(ns, "FinalBackupSkipped", "m2")).WithTimeout(eventually).WithPolling(poll).Should(Succeed())
	g.Eventually(e.eventSeen(ns, "TeardownSkipped", "its data is retained")).WithTimeout(eventually).WithPolling(poll).Should(Succeed())

	// On reconnect the leftovers are collected as Retain: the workload goes, the data stays.
	g.Expect(e.proxies["m2"].Restore()).To(Succeed())
	g.Eventually(func() bool {
		return apierrors.IsNotFound(e.member("m2").Get(e.ctx, client.ObjectKey{Namespace: ns, Name: "payroll"}, &appsv1.StatefulSet{}))
	}).WithTimeout(eventually).WithPolling(poll).Should(BeTrue())
	var pvc corev1.PersistentVolumeClaim
	g.Expect(e.member("m2").Get(e.ctx, client.ObjectKey{Namespace: ns, Name: "data-payroll-0"}, &pvc)).To(Succeed())
	g.Expect(pvc.DeletionTimestamp.IsZero()).To(BeTrue(), "the data of a member never backed up is kept")
	g.Expect(e.member("m2").Get(e.ctx, client.ObjectKey{Namespace: ns, Name: "payroll-credentials"}, &corev1.Secret{})).To(Succeed())
}

func testFinalBackupPlacementRemoval(t *testing.T, e *env) {
	g := NewWithT(t)
	ns := e.namespace("backup-dropped")
	db := backupDB(ns, "stock", "", "m1", "m2")
	db.Spec.Teardown.OnPlacementRemoval = fleetv1alpha1.PlacementRemovalDelete
	g.Expect(e.hub.Create(e.ctx, db)).To(Succeed())
	g.Eventually(func(g Gomega) {
		g.Expect(e.getDB(ns, "stock").Status.Phase).To(Equal(fleetv1alpha1.PhaseReady))
	}).WithTimeout(eventually).WithPolling(poll).Should(Succeed())
	g.Expect(e.member("m2").Create(e.ctx, pvcFor(e, "m2", ns, "stock"))).To(Succeed())

	cur := e.getDB(ns, "stock")
	cur.Spec.Placement.ClusterNames = []string{"m1"}
	g.Expect(e.hub.Update(e.ctx, cur)).To(Succeed())
	gen := e.getDB(ns, "stock").Generation
	g.Eventually(func(g Gomega) { g.Expect(backupJobs(g, e, "m2", ns)).To(HaveLen(1)) }).WithTimeout(eventually).WithPolling(poll).Should(Succeed())
	g.Expect(backupJobs(g, e, "m1", ns)).To(BeEmpty(), "the member that stays is not backed up")
	dataLeft(g, e, "m2", ns, "stock")

	g.Expect(finishBackupJobs(g, e, "m2", ns, true, 11)).To(Equal(1))
	g.Eventually(func() bool {
		return apierrors.IsNotFound(e.member("m2").Get(e.ctx, client.ObjectKey{Namespace: ns, Name: "data-stock-0"}, &corev1.PersistentVolumeClaim{}))
	}).WithTimeout(eventually).WithPolling(poll).Should(BeTrue())
	got := e.getDB(ns, "stock")
	rec := finalBackupRecord(got, "m2")
	g.Expect(rec.Phase).To(Equal(fleetv1alpha1.BackupPhaseSucceeded))
	g.Expect(rec.BackupID).To(Equal(member.FinalBackupID(string(got.UID)) + fmt.Sprintf("-g%d", gen)))
	backupClaimKept(g, e, "m2", ns, "stock")
	g.Eventually(func(g Gomega) {
		g.Expect(e.getDB(ns, "stock").Status.Phase).To(Equal(fleetv1alpha1.PhaseReady))
		g.Expect(backupJobs(g, e, "m2", ns)).To(BeEmpty())
	}).WithTimeout(eventually).WithPolling(poll).Should(Succeed())
}

func testFinalBackupNothingThere(t *testing.T, e *env) {
	g := NewWithT(t)
	ns := e.namespace("backup-nothing")
	// CloudNativePG is not installed in these members: BackendMissing, no workload.
	db := newCNPGDB(ns, "ghost", "m1")
	db.Spec.Backup = nil
	g.Expect(e.hub.Create(e.ctx, db)).To(Succeed())
	g.Eventually(func(g Gomega) {
		g.Expect(clusterEntry(e.getDB(ns, "ghost"), "m1").Reason).To(Equal(fleetv1alpha1.ReasonBackendMissing))
	}).WithTimeout(eventually).WithPolling(poll).Should(Succeed())
	g.Expect(e.hub.Delete(e.ctx, e.getDB(ns, "ghost"))).To(Succeed())
	g.Eventually(dbGone(e, ns, "ghost")).WithTimeout(eventually).WithPolling(poll).Should(BeTrue(), "a Required backup of nothing must not hold the deletion")
	g.Expect(backupJobs(g, e, "m1", ns)).To(BeEmpty())
}

// watchUntilGone runs do and returns the last state of db the hub API
// stored before it was deleted: a watch from db's resourceVersion sees every
// write, where polling could miss the last one.
func watchUntilGone(t *testing.T, e *env, db *fleetv1alpha1.Database, do func()) *fleetv1alpha1.Database {
	t.Helper()
	wc, err := client.NewWithWatch(e.fleet.Hub.Config, client.Options{Scheme: fleet.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(e.ctx, eventually)
	defer cancel()
	w, err := wc.Watch(ctx, &fleetv1alpha1.DatabaseList{}, client.InNamespace(db.Namespace),
		client.MatchingFields{"metadata.name": db.Name}, &client.ListOptions{Raw: &metav1.ListOptions{ResourceVersion: db.ResourceVersion}})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	do()
	last := db
	for ev := range w.ResultChan() {
		d, ok := ev.Object.(*fleetv1alpha1.Database)
		if !ok {
			t.Fatalf("watching the Database: %+v", ev.Object)
		}
		if ev.Type == watch.Deleted {
			return last
		}
		last = d
	}
	t.Fatalf("the Database %s/%s did not go within %s (last seen %+v)", db.Namespace, db.Name, eventually, last.Status)
	return nil
}

// statusGate refuses the hub's writes of one Database's status while it is
// closed (an API server error, no write stored); everything else passes.
type statusGate struct {
	mu   sync.Mutex
	path string
}

func (g *statusGate) close(ns, name string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.path = "/namespaces/" + ns + "/databases/" + name + "/status"
}

func (g *statusGate) open() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.path = ""
}

func (g *statusGate) wrap(rt http.RoundTripper) http.RoundTripper {
	return roundTripperFunc(func(req *http.Request) (*http.Response, error) {
		g.mu.Lock()
		closed := g.path != "" && req.Method != http.MethodGet && strings.HasSuffix(req.URL.Path, g.path)
		g.mu.Unlock()
		if closed {
			return &http.Response{StatusCode: http.StatusInternalServerError, Status: "500 Internal Server Error", Request: req,
				Header: http.Header{"Content-Type": []string{"application/json"}},
				Body:   io.NopCloser(strings.NewReader(`{"kind":"Status","apiVersion":"v1","status":"Failure","message":"status writes refused by the test","reason":"InternalError","code":500}`)),
			}, nil
		}
		return rt.RoundTrip(req)
	})
}
