package integration

import (
	"slices"
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
	t.Run("a hostile termination message keeps the record bounded and sane", func(t *testing.T) { testHostileBackupResult(t, e) })
	t.Run("a member whose writes hang holds the teardown and recovers", func(t *testing.T) { testBackupMemberHangs(t, e) })
	t.Run("deletionPolicy Retain with finalBackup Required: no backup, and an Event says why", func(t *testing.T) { testRetainRequired(t, e) })
	t.Run("a hub restarted while the backup Job runs follows the same Job", func(t *testing.T) { testFinalBackupHubRestart(t, e) })
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

// endBackupJob ends the member's one running backup Job as the Job
// controller would, its pod's backup container having written msg.
func endBackupJob(g Gomega, e *env, m, ns string, succeed bool, msg string) {
	jobs := slices.DeleteFunc(backupJobs(g, e, m, ns), func(j batchv1.Job) bool { return jobEnded(&j) })
	g.Expect(jobs).To(HaveLen(1))
	job := jobs[0]
	c := e.member(m)
	ctrlRef := true
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, GenerateName: job.Name + "-", Labels: job.Spec.Template.Labels,
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "batch/v1", Kind: "Job", Name: job.Name, UID: job.UID, Controller: &ctrlRef}}},
		Spec: *job.Spec.Template.Spec.DeepCopy(),
	}
	pod.Labels = map[string]string{batchv1.ControllerUidLabel: string(job.UID)}
	g.Expect(c.Create(e.ctx, pod)).To(Succeed())
	now := metav1.Now()
	code, phase := int32(0), corev1.PodSucceeded
	if !succeed {
		code, phase = 1, corev1.PodFailed
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
}

func deleteWhenReady(t *testing.T, e *env, ns, name string) string {
	g := NewWithT(t)
	_, uid := readyDB(t, e, backupDB(ns, name, "", "m1"), "m1")
	g.Expect(e.hub.Delete(e.ctx, e.getDB(ns, name))).To(Succeed())
	g.Eventually(func(g Gomega) { g.Expect(backupJobs(g, e, "m1", ns)).To(HaveLen(1)) }).WithTimeout(eventually).WithPolling(poll).Should(Succeed())
	return uid
}

func testHostileBackupResult(t *testing.T, e *env) {
	g := NewWithT(t)
	ns := e.namespace("backup-hostile-result")
	uid := deleteWhenReady(t, e, ns, "orders")
	// A failure whose step is 4 KiB of text (what the database's content or a
	// hostile pod could make the script print): the record stays bounded.
	endBackupJob(g, e, "m1", ns, false, `{"phase":"Failed","exitCode":1,"step":"`+strings.Repeat("x\\n", 1365)+`"}`)
	g.Eventually(func(g Gomega) {
		rec := finalBackupRecord(e.getDB(ns, "orders"), "m1")
		g.Expect(rec.Phase).To(Equal(fleetv1alpha1.BackupPhaseFailed))
		g.Expect(len(rec.Message)).To(BeNumerically("<=", 1024))
		c := condition(e.getDB(ns, "orders").Status.Conditions, fleetv1alpha1.ConditionFinalBackup)
		g.Expect(c.Reason).To(Equal(fleetv1alpha1.ReasonFinalBackupFailed))
		g.Expect(len(c.Message)).To(BeNumerically("<=", 32768))
	}).WithTimeout(eventually).WithPolling(poll).Should(Succeed())
	dataLeft(g, e, "m1", ns, "orders")

	// The retry (after the backoff) is recorded: the failure and the
	// running attempt still fit the record's message.
	g.Eventually(func(g Gomega) {
		g.Expect(backupJobs(g, e, "m1", ns)).To(HaveLen(2))
		rec := finalBackupRecord(e.getDB(ns, "orders"), "m1")
		g.Expect(rec.Message).To(HaveSuffix("attempt 2 running"))
		g.Expect(len(rec.Message)).To(BeNumerically("<=", 512))
	}).WithTimeout(eventually).WithPolling(poll).Should(Succeed())
	dataLeft(g, e, "m1", ns, "orders")
	// The retry "succeeds" with a result claiming a negative size and
	// another location and id: the hub records its own id and location, no size.
	endBackupJob(g, e, "m1", ns, true, `{"phase":"Succeeded","backupID":"../../../etc","location":"/etc/passwd","sizeBytes":-42}`)
	id := member.FinalBackupID(uid)
	g.Eventually(dbGone(e, ns, "orders")).WithTimeout(eventually).WithPolling(poll).Should(BeTrue())
	g.Eventually(func(g Gomega) {
		ev := finalBackupSucceededEvent(g, e, ns)
		g.Expect(ev).To(ContainSubstring(id))
		g.Expect(ev).To(ContainSubstring("size unknown"))
		g.Expect(ev).NotTo(ContainSubstring("passwd"))
	}).WithTimeout(eventually).WithPolling(poll).Should(Succeed())
}

func testBackupMemberHangs(t *testing.T, e *env) {
	g := NewWithT(t)
	ns := e.namespace("backup-hang")
	readyDB(t, e, backupDB(ns, "orders", "", "m1"), "m1")
	e.writes.Hang("m1", true)
	defer e.writes.Hang("m1", false)
	g.Expect(e.hub.Delete(e.ctx, e.getDB(ns, "orders"))).To(Succeed())
	// The backup claim's or Job's creation hangs until the member call's deadline: the member says so.
	g.Eventually(func(g Gomega) {
		got := e.getDB(ns, "orders")
		g.Expect(got.DeletionTimestamp.IsZero()).To(BeFalse())
		g.Expect(clusterEntry(got, "m1").Message).To(ContainSubstring("final backup"))
	}).WithTimeout(eventually).WithPolling(poll).Should(Succeed())
	g.Expect(e.writes.Hanging()).To(BeNumerically("<=", 2), "no pile of hung writes for one member sync")
	dataLeft(g, e, "m1", ns, "orders")
	g.Expect(backupJobs(g, e, "m1", ns)).To(BeEmpty())

	e.writes.Hang("m1", false)
	g.Eventually(func(g Gomega) { g.Expect(backupJobs(g, e, "m1", ns)).To(HaveLen(1)) }).WithTimeout(eventually).WithPolling(poll).Should(Succeed())
	dataLeft(g, e, "m1", ns, "orders")
	g.Expect(finishBackupJobs(g, e, "m1", ns, true, 5)).To(Equal(1))
	g.Eventually(dbGone(e, ns, "orders")).WithTimeout(eventually).WithPolling(poll).Should(BeTrue())
}

func testFinalBackupHubRestart(t *testing.T, e *env) {
	g := NewWithT(t)
	ns := e.namespace("backup-restart")
	deleteWhenReady(t, e, ns, "orders")
	job := backupJobs(g, e, "m1", ns)[0]

	// The hub stops; the Job succeeds meanwhile; another hub starts.
	e.stopHub()
	g.Expect(finishBackupJobs(g, e, "m1", ns, true, 321)).To(Equal(1))
	e.writes.Take()
	e.startHub(envOptions{})
	g.Eventually(dbGone(e, ns, "orders")).WithTimeout(eventually).WithPolling(poll).Should(BeTrue())
	for _, w := range e.writes.Take() {
		g.Expect(w).NotTo(HavePrefix("m1: POST /apis/batch/v1/namespaces/"+ns+"/jobs"), "no second backup Job")
	}
	// The teardown went on after the success the restarted hub read: the Job is gone with the data.
	g.Eventually(func(g Gomega) { g.Expect(backupJobs(g, e, "m1", ns)).To(BeEmpty()) }).WithTimeout(eventually).WithPolling(poll).Should(Succeed())
	g.Eventually(func(g Gomega) {
		g.Expect(finalBackupSucceededEvent(g, e, ns)).To(ContainSubstring("321 bytes"), "the restarted hub read the result of Job %s", job.Name)
	}).WithTimeout(eventually).WithPolling(poll).Should(Succeed())
}

// finalBackupSucceededEvent is the message of the namespace's FinalBackupSucceeded Event.
func finalBackupSucceededEvent(g Gomega, e *env, ns string) string {
	var events corev1.EventList
	g.Expect(e.hub.List(e.ctx, &events, client.InNamespace(ns))).To(Succeed())
	for _, ev := range events.Items {
		if ev.Reason == "FinalBackupSucceeded" {
			return ev.Message
		}
	}
	return ""
}

func testRetainRequired(t *testing.T, e *env) {
	g := NewWithT(t)
	ns := e.namespace("backup-retain")
	db := backupDB(ns, "orders", fleetv1alpha1.FinalBackupRequired, "m1")
	db.Spec.DeletionPolicy = fleetv1alpha1.DeletionPolicyRetain
	readyDB(t, e, db, "m1")
	g.Expect(e.hub.Delete(e.ctx, e.getDB(ns, "orders"))).To(Succeed())
	g.Eventually(dbGone(e, ns, "orders")).WithTimeout(eventually).WithPolling(poll).Should(BeTrue())
	g.Expect(backupJobs(g, e, "m1", ns)).To(BeEmpty())
	var pvc corev1.PersistentVolumeClaim
	g.Expect(e.member("m1").Get(e.ctx, client.ObjectKey{Namespace: ns, Name: "data-orders-0"}, &pvc)).To(Succeed(), "Retain keeps the data")
	g.Eventually(func(g Gomega) {
		var events corev1.EventList
		g.Expect(e.hub.List(e.ctx, &events, client.InNamespace(ns))).To(Succeed())
		var msgs []string
		for _, ev := range events.Items {
			if ev.Reason == "FinalBackupNotTaken" {
				msgs = append(msgs, ev.Message)
			}
		}
		g.Expect(msgs).To(ConsistOf(ContainSubstring("deletionPolicy Retain keeps the data")))
	}).WithTimeout(eventually).WithPolling(poll).Should(Succeed())
}
