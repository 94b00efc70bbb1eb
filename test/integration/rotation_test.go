package integration

import (
	"bytes"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleetv1alpha1 "github.com/fleetdb/fleetdb/apis/v1alpha1"
	"github.com/fleetdb/fleetdb/member"
)

// TestRotation runs credential rotations on a hub and two members. envtest
// runs no Job controller: the test plays it, marking the rotation Jobs
// succeeded or failed. (newDB is the StatefulSet backend with one instance,
// the Job path; the CloudNativePG backend has a subtest of its own.)
func TestRotation(t *testing.T) {
	e := startEnvWith(t, envOptions{}, "m1", "m2")
	e.sim.enable("m1", true)
	e.sim.enable("m2", true)
	t.Run("a rotation moves every member and the hub to a new password; a failed Job is retried", func(t *testing.T) { testRotation(t, e) })
	t.Run("a hub restart mid-rotation keeps the passwords; mysql root keeps its own", func(t *testing.T) { testRotationRestart(t, e) })
	t.Run("on the CloudNativePG backend the new password goes into the Cluster's Secret, without a Job", func(t *testing.T) { testRotationCNPG(t, e) })
}

// testRotationCNPG: CloudNativePG changes the owner role's password itself
// when the Secret its Cluster's bootstrap.initdb.secret names changes, so the
// hub runs no Job there: each member's basic-auth Secret gets the new
// password, and the Cluster is not rewritten (no instance restarts).
// CloudNativePG sees a change only of a Secret labelled cnpg.io/reload (the
// simulator, cnpgReconciledStatus, reports a Secret's version only then), and
// a member counts as switched once its Cluster reports the new Secret's
// version: while m2's CloudNativePG has not taken it, the hub keeps the old
// password.
func testRotationCNPG(t *testing.T, e *env) {
	g := NewWithT(t)
	ns := e.namespace("rotate-cnpg")
	e.createReady(g, newCNPGDB(ns, "orders", "m1", "m2"))
	key := client.ObjectKey{Namespace: ns, Name: "orders-credentials"}
	old := e.hubSecret(g, key)[member.CredentialsPasswordKey]
	generations := map[string]int64{}
	for _, m := range []string{"m1", "m2"} {
		generations[m] = e.clusterGeneration(g, m, ns, "orders")
	}

	e.sim.enable("m2", false) // m2's CloudNativePG reports nothing new
	e.annotate(g, ns, "orders", "c1")
	g.Eventually(func(g Gomega) {
		g.Expect(e.memberSecret(g, "m2", key)[member.CredentialsPasswordKey]).To(Equal(e.hubSecret(g, key)[member.CredentialsPendingPasswordKey]),
			"m2's Secret has the new password")
		c := condition(e.getDB(ns, "orders").Status.Conditions, fleetv1alpha1.ConditionCredentialsRotated)
		g.Expect(c.Message).To(ContainSubstring("waiting for CloudNativePG to take the new credentials Secret"))
	}).WithTimeout(eventually).WithPolling(poll).Should(Succeed())
	g.Expect(e.hubSecret(g, key)[member.CredentialsPasswordKey]).To(Equal(old),
		"the hub keeps the old password while m2's CloudNativePG has not taken the new one")
	e.sim.enable("m2", true)

	g.Eventually(func(g Gomega) {
		g.Expect(e.hubSecret(g, key)).To(HaveKey(member.CredentialsRotatedTokenKey))
	}).WithTimeout(eventually).WithPolling(poll).Should(Succeed())
	pw := e.hubSecret(g, key)[member.CredentialsPasswordKey]
	g.Expect(pw).NotTo(Equal(old))
	e.expectRotated(g, ns, "orders", "c1", pw)
	g.Eventually(func(g Gomega) {
		for _, m := range []string{"m1", "m2"} {
			var s corev1.Secret
			g.Expect(e.member(m).Get(e.ctx, key, &s)).To(Succeed())
			g.Expect(s.Type).To(Equal(corev1.SecretTypeBasicAuth), "the Secret CloudNativePG reads, in %s", m)
			g.Expect(s.Labels).To(HaveKey("cnpg.io/reload"), "CloudNativePG watches the Secret in %s", m)
			u := member.NewCNPGCluster()
			g.Expect(e.member(m).Get(e.ctx, client.ObjectKey{Namespace: ns, Name: "orders"}, u)).To(Succeed())
			g.Expect(member.CNPGSecretVersions(u)).To(HaveKeyWithValue("orders-credentials", s.ResourceVersion),
				"CloudNativePG in %s took the Secret with the new password", m)
			g.Expect(u.GetGeneration()).To(Equal(generations[m]), "the Cluster in %s is not rewritten", m)
		}
	}).WithTimeout(eventually).WithPolling(poll).Should(Succeed())
}

// expectInstanceTLS (issue 42, item 6): the hub keeps the Database's
// instance CA, its key included, in the hub Secret "<name>-instance-pki";
// each member gets the CA certificate and the server certificate and key
// (no CA key) in "<name>-instance-tls", which the postgres StatefulSet
// mounts, and the rotation Job connects with sslmode verify-full against
// that CA, the only key of the Secret it mounts.
func expectInstanceTLS(t *testing.T, e *env, ns, name string, members ...string) {
	t.Helper()
	g := NewWithT(t)
	var hub corev1.Secret
	g.Expect(e.hub.Get(e.ctx, client.ObjectKey{Namespace: ns, Name: name + "-instance-pki"}, &hub)).To(Succeed())
	g.Expect(hub.Data).To(HaveKey("ca.key"), "the CA key stays in the hub")
	for _, m := range members {
		var s corev1.Secret
		g.Expect(e.member(m).Get(e.ctx, client.ObjectKey{Namespace: ns, Name: member.InstanceTLSSecretName(name)}, &s)).To(Succeed())
		g.Expect(s.Type).To(Equal(corev1.SecretTypeTLS))
		g.Expect(s.Data).To(HaveLen(3))
		g.Expect(s.Data["ca.crt"]).To(Equal(hub.Data["ca.crt"]), "%s trusts the Database's CA", m)
		g.Expect(s.Data["tls.crt"]).To(Equal(hub.Data["instance.crt"]))
		g.Expect(s.Data["tls.key"]).To(Equal(hub.Data["instance.key"]))
		for k, v := range s.Data {
			g.Expect(bytes.Contains(v, hub.Data["ca.key"])).To(BeFalse(), "the CA key reached %s in %s", m, k)
		}
		var sts appsv1.StatefulSet
		g.Expect(e.member(m).Get(e.ctx, client.ObjectKey{Namespace: ns, Name: name}, &sts)).To(Succeed())
		g.Expect(sts.Spec.Template.Spec.Volumes).To(ContainElement(HaveField("Secret.SecretName", member.InstanceTLSSecretName(name))))
		var cm corev1.ConfigMap
		g.Expect(e.member(m).Get(e.ctx, client.ObjectKey{Namespace: ns, Name: name + "-config"}, &cm)).To(Succeed())
		g.Expect(cm.Data["postgresql.conf"]).To(ContainSubstring("ssl = on"))
		jobs := e.rotationJobs(g, m, ns)
		g.Expect(jobs).NotTo(BeEmpty())
		pod := jobs[0].Spec.Template.Spec
		g.Expect(pod.Containers[0].Env).To(ContainElement(corev1.EnvVar{Name: "PGSSLMODE", Value: "verify-full"}))
		g.Expect(pod.Volumes).To(ConsistOf(HaveField("Secret.Items", ConsistOf(HaveField("Key", "ca.crt")))))
	}
}

// clusterGeneration is metadata.generation of the CloudNativePG Cluster in a member.
func (e *env) clusterGeneration(g Gomega, m, ns, name string) int64 {
	u := member.NewCNPGCluster()
	g.Expect(e.member(m).Get(e.ctx, client.ObjectKey{Namespace: ns, Name: name}, u)).To(Succeed())
	return u.GetGeneration()
}

func testRotation(t *testing.T, e *env) {
	g := NewWithT(t)
	ns := e.namespace("rotate")
	e.createReady(g, newDB(ns, "orders", "m1", "m2"))
	key := client.ObjectKey{Namespace: ns, Name: "orders-credentials"}
	old := e.hubSecret(g, key)[member.CredentialsPasswordKey]

	e.annotate(g, ns, "orders", "t1")
	var pending []byte
	g.Eventually(func(g Gomega) {
		hub := e.hubSecret(g, key)
		g.Expect(hub[member.CredentialsPasswordKey]).To(Equal(old), "the hub keeps the password until every member switched")
		pending = hub[member.CredentialsPendingPasswordKey]
		g.Expect(pending).NotTo(BeEmpty())
		g.Expect(pending).NotTo(Equal(old))
		for _, m := range []string{"m1", "m2"} {
			g.Expect(e.rotationJobs(g, m, ns)).To(HaveLen(1), "a rotation Job in %s", m)
			s := e.memberSecret(g, m, key)
			g.Expect(s[member.CredentialsPasswordKey]).To(Equal(old))
			g.Expect(s[member.CredentialsPendingPasswordKey]).To(Equal(pending))
		}
		c := condition(e.getDB(ns, "orders").Status.Conditions, fleetv1alpha1.ConditionCredentialsRotated)
		g.Expect(c.Status).To(Equal(metav1.ConditionFalse))
		g.Expect(c.Reason).To(Equal(fleetv1alpha1.ReasonRotating))
	}).WithTimeout(eventually).WithPolling(poll).Should(Succeed())
	expectInstanceTLS(t, e, ns, "orders", "m1", "m2")

	// m1's Job succeeds: m1's Secret switches at once, the rest waits.
	e.finishJob(g, "m1", e.rotationJobs(g, "m1", ns)[0], true)
	g.Eventually(func(g Gomega) {
		s := e.memberSecret(g, "m1", key)
		g.Expect(s[member.CredentialsPasswordKey]).To(Equal(pending))
		g.Expect(s[member.CredentialsPreviousPasswordKey]).To(Equal(old))
	}).WithTimeout(eventually).WithPolling(poll).Should(Succeed())

	// m2's Job fails: the condition says so, m2 and the hub keep the old password.
	e.finishJob(g, "m2", e.rotationJobs(g, "m2", ns)[0], false)
	g.Eventually(func(g Gomega) {
		c := condition(e.getDB(ns, "orders").Status.Conditions, fleetv1alpha1.ConditionCredentialsRotated)
		g.Expect(c.Reason).To(Equal(fleetv1alpha1.ReasonRotationFailed))
		g.Expect(c.Message).To(ContainSubstring("m2"))
		g.Expect(c.Message).To(ContainSubstring("BackoffLimitExceeded"))
	}).WithTimeout(eventually).WithPolling(poll).Should(Succeed())
	g.Expect(e.memberSecret(g, "m2", key)[member.CredentialsPasswordKey]).To(Equal(old))
	g.Expect(e.hubSecret(g, key)[member.CredentialsPasswordKey]).To(Equal(old))

	// After the backoff a second attempt runs; it succeeds and the rotation completes.
	var retry *batchv1.Job
	g.Eventually(func(g Gomega) {
		jobs := e.rotationJobs(g, "m2", ns)
		g.Expect(jobs).To(HaveLen(2))
		for _, j := range jobs {
			if j.Annotations[fleetv1alpha1.AnnotationRotationAttempt] == "2" {
				retry = j
			}
		}
		g.Expect(retry).NotTo(BeNil())
	}).WithTimeout(eventually).WithPolling(poll).Should(Succeed())
	e.finishJob(g, "m2", retry, true)
	e.expectRotated(g, ns, "orders", "t1", pending)
}

func testRotationRestart(t *testing.T, e *env) {
	g := NewWithT(t)
	ns := e.namespace("rotate-restart")
	db := newDB(ns, "ledger", "m1", "m2")
	db.Spec.Engine = fleetv1alpha1.EngineMySQL
	e.createReady(g, db)
	key := client.ObjectKey{Namespace: ns, Name: "ledger-credentials"}
	creds := e.hubSecret(g, key)
	old := creds[member.CredentialsPasswordKey]
	g.Expect(creds[member.CredentialsRootPasswordKey]).NotTo(BeEmpty(), "a new mysql Database gets a root password")
	g.Expect(creds[member.CredentialsRootPasswordKey]).NotTo(Equal(old), "root's password is not the application's")

	// A Database from before root had its own password: root runs on the
	// application password it was initialised with.
	var s corev1.Secret
	g.Expect(e.hub.Get(e.ctx, key, &s)).To(Succeed())
	patch := client.MergeFrom(s.DeepCopy())
	delete(s.Data, member.CredentialsRootPasswordKey)
	g.Expect(e.hub.Patch(e.ctx, &s, patch)).To(Succeed())

	e.annotate(g, ns, "ledger", "t1")
	var pending []byte
	g.Eventually(func(g Gomega) {
		hub := e.hubSecret(g, key)
		pending = hub[member.CredentialsPendingPasswordKey]
		g.Expect(pending).NotTo(BeEmpty())
		g.Expect(hub[member.CredentialsRootPasswordKey]).To(Equal(old), "root's password is recorded before the application's changes")
		for _, m := range []string{"m1", "m2"} {
			g.Expect(e.rotationJobs(g, m, ns)).To(HaveLen(1), "a rotation Job in %s", m)
		}
	}).WithTimeout(eventually).WithPolling(poll).Should(Succeed())

	// The hub stops; m1's Job succeeds meanwhile; another hub starts.
	e.stopHub()
	e.finishJob(g, "m1", e.rotationJobs(g, "m1", ns)[0], true)
	e.startHub(envOptions{})
	g.Eventually(func(g Gomega) {
		g.Expect(e.memberSecret(g, "m1", key)[member.CredentialsPasswordKey]).To(Equal(pending))
	}).WithTimeout(eventually).WithPolling(poll).Should(Succeed())
	hub := e.hubSecret(g, key)
	g.Expect(hub[member.CredentialsPasswordKey]).To(Equal(old), "m2 still runs on the old password")
	g.Expect(hub[member.CredentialsPendingPasswordKey]).To(Equal(pending), "the restarted hub kept the pending password")
	g.Expect(e.memberSecret(g, "m2", key)[member.CredentialsPasswordKey]).To(Equal(old))

	e.finishJob(g, "m2", e.rotationJobs(g, "m2", ns)[0], true)
	e.expectRotated(g, ns, "ledger", "t1", pending)
	g.Expect(e.hubSecret(g, key)[member.CredentialsRootPasswordKey]).To(Equal(old), "root keeps its password")
}

// expectRotated waits for the rotation to complete: the hub and every
// member hold the new password and no rotation state, the Jobs are gone and
// the status says so.
func (e *env) expectRotated(g Gomega, ns, name, token string, password []byte) {
	key := client.ObjectKey{Namespace: ns, Name: name + "-credentials"}
	g.Eventually(func(g Gomega) {
		hub := e.hubSecret(g, key)
		g.Expect(hub[member.CredentialsPasswordKey]).To(Equal(password))
		g.Expect(hub).NotTo(HaveKey(member.CredentialsPendingPasswordKey))
		g.Expect(string(hub[member.CredentialsRotatedTokenKey])).To(Equal(token))
		for _, m := range []string{"m1", "m2"} {
			s := e.memberSecret(g, m, key)
			g.Expect(s[member.CredentialsPasswordKey]).To(Equal(password), "member %s", m)
			g.Expect(s).NotTo(HaveKey(member.CredentialsPendingPasswordKey))
			g.Expect(s).NotTo(HaveKey(member.CredentialsPreviousPasswordKey))
			g.Expect(e.rotationJobs(g, m, ns)).To(BeEmpty(), "rotation Jobs removed from %s", m)
		}
		db := e.getDB(ns, name)
		c := condition(db.Status.Conditions, fleetv1alpha1.ConditionCredentialsRotated)
		g.Expect(c.Status).To(Equal(metav1.ConditionTrue), c.Message)
		g.Expect(c.Reason).To(Equal(fleetv1alpha1.ReasonRotated))
		g.Expect(db.Status.Credentials).NotTo(BeNil())
		g.Expect(db.Status.Credentials.RotatedToken).To(Equal(token))
		g.Expect(db.Status.Credentials.RotatingToken).To(BeEmpty())
		g.Expect(db.Status.Phase).To(Equal(fleetv1alpha1.PhaseReady))
	}).WithTimeout(eventually).WithPolling(poll).Should(Succeed())
}

func (e *env) createReady(g Gomega, db *fleetv1alpha1.Database) {
	g.Expect(e.hub.Create(e.ctx, db)).To(Succeed())
	g.Eventually(func(g Gomega) {
		g.Expect(e.getDB(db.Namespace, db.Name).Status.Phase).To(Equal(fleetv1alpha1.PhaseReady))
	}).WithTimeout(eventually).WithPolling(poll).Should(Succeed())
}

func (e *env) annotate(g Gomega, ns, name, token string) {
	db := e.getDB(ns, name)
	patch := client.MergeFrom(db.DeepCopy())
	if db.Annotations == nil {
		db.Annotations = map[string]string{}
	}
	db.Annotations[fleetv1alpha1.AnnotationRotateCredentials] = token
	g.Expect(e.hub.Patch(e.ctx, db, patch)).To(Succeed())
}

func (e *env) hubSecret(g Gomega, key client.ObjectKey) map[string][]byte {
	var s corev1.Secret
	g.Expect(e.hub.Get(e.ctx, key, &s)).To(Succeed())
	return s.Data
}

func (e *env) memberSecret(g Gomega, m string, key client.ObjectKey) map[string][]byte {
	var s corev1.Secret
	g.Expect(e.member(m).Get(e.ctx, key, &s)).To(Succeed())
	return s.Data
}

// rotationJobs are the rotation Jobs in a member's namespace that are not being deleted.
func (e *env) rotationJobs(g Gomega, m, ns string) []*batchv1.Job {
	var list batchv1.JobList
	g.Expect(e.member(m).List(e.ctx, &list, client.InNamespace(ns), client.HasLabels{fleetv1alpha1.LabelRotation})).To(Succeed())
	var out []*batchv1.Job
	for i := range list.Items {
		if list.Items[i].DeletionTimestamp.IsZero() {
			out = append(out, &list.Items[i])
		}
	}
	return out
}

// finishJob writes the status the Job controller writes when a Job
// succeeds or runs out of retries.
func (e *env) finishJob(g Gomega, m string, job *batchv1.Job, succeeded bool) {
	now := metav1.NewTime(time.Now())
	job.Status.StartTime = &now
	cond := func(t batchv1.JobConditionType, reason string) batchv1.JobCondition {
		return batchv1.JobCondition{Type: t, Status: corev1.ConditionTrue, Reason: reason, LastProbeTime: now, LastTransitionTime: now}
	}
	if succeeded {
		job.Status.Succeeded = 1
		job.Status.CompletionTime = &now
		job.Status.Conditions = []batchv1.JobCondition{cond(batchv1.JobSuccessCriteriaMet, "CompletionsReached"), cond(batchv1.JobComplete, "CompletionsReached")}
	} else {
		job.Status.Failed = 3
		job.Status.Conditions = []batchv1.JobCondition{cond(batchv1.JobFailureTarget, "BackoffLimitExceeded"), cond(batchv1.JobFailed, "BackoffLimitExceeded")}
	}
	g.Expect(e.member(m).Status().Update(e.ctx, job)).To(Succeed())
}
