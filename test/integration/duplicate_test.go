package integration

import (
	"testing"

	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleetv1alpha1 "github.com/fleetdb/fleetdb/apis/v1alpha1"
)

// TestDuplicateRegistration (issue 25, item 9): one cluster registered twice
// on the hub (a second MemberCluster whose kubeconfig reaches the same
// cluster: a hand-written one, or join's refusal bypassed) gets one writer.
// The hub records each member's identity (the kube-system Namespace uid) in
// status; the newer registration is not Ready (reason DuplicateCluster,
// naming the older) and nothing is written through it, also for a Database
// placed on both names.
func TestDuplicateRegistration(t *testing.T) {
	e := startEnvWith(t, envOptions{withoutCNPG: []string{"d1"}}, "d1")
	e.sim.enable("d1", true)
	g := NewWithT(t)
	var kubeSystem corev1.Namespace
	g.Expect(e.member("d1").Get(e.ctx, client.ObjectKey{Name: metav1.NamespaceSystem}, &kubeSystem)).To(Succeed())
	id := string(kubeSystem.UID)

	var secret corev1.Secret
	g.Expect(e.hub.Get(e.ctx, client.ObjectKey{Namespace: hubNS, Name: "d1-kubeconfig"}, &secret)).To(Succeed())
	e.register("d1-again", secret.Data["kubeconfig"], map[string]string{"name": "d1-again"})

	g.Eventually(func(g Gomega) {
		var mc fleetv1alpha1.MemberCluster
		g.Expect(e.hub.Get(e.ctx, client.ObjectKey{Name: "d1-again"}, &mc)).To(Succeed())
		ready := condition(mc.Status.Conditions, fleetv1alpha1.MemberConditionReady)
		g.Expect(ready.Status).To(Equal(metav1.ConditionFalse), "%+v", mc.Status)
		g.Expect(ready.Reason).To(Equal(fleetv1alpha1.ReasonDuplicateCluster))
		g.Expect(ready.Message).To(ContainSubstring("MemberCluster d1,"))
		g.Expect(mc.Status.ClusterID).To(Equal(id))
	}).WithTimeout(eventually).WithPolling(poll).Should(Succeed())
	var first fleetv1alpha1.MemberCluster
	g.Expect(e.hub.Get(e.ctx, client.ObjectKey{Name: "d1"}, &first)).To(Succeed())
	g.Expect(first.Status.ClusterID).To(Equal(id), "the hub records the identity of the registration in use")
	g.Expect(condition(first.Status.Conditions, fleetv1alpha1.MemberConditionReady).Status).To(Equal(metav1.ConditionTrue))

	// A Database placed on both names is written through d1 only.
	ns := e.namespace("duplicate")
	g.Expect(e.hub.Create(e.ctx, newDB(ns, "orders", "d1", "d1-again"))).To(Succeed())
	g.Eventually(func(g Gomega) {
		db := e.getDB(ns, "orders")
		g.Expect(clusterEntry(db, "d1").Phase).To(Equal(fleetv1alpha1.ClusterPhaseReady), "%+v", db.Status.Clusters)
		g.Expect(clusterEntry(db, "d1-again").Name).To(Equal("d1-again"), "%+v", db.Status.Clusters)
		g.Expect(clusterEntry(db, "d1-again").Phase).NotTo(Equal(fleetv1alpha1.ClusterPhaseReady))
	}).WithTimeout(eventually).WithPolling(poll).Should(Succeed())
	var sts appsv1.StatefulSet
	g.Expect(e.member("d1").Get(e.ctx, client.ObjectKey{Namespace: ns, Name: "orders"}, &sts)).To(Succeed())
	g.Expect(e.writes.Total("d1-again")).To(BeZero(), "the hub wrote through the second registration of d1's cluster")
	g.Expect(e.writes.Total("d1")).NotTo(BeZero())

	// A restarted hub connects to both at once: the registration in use is
	// known from its status before it connects, and a change of the
	// Database is written through d1 only.
	e.stopHub()
	e.startHub(envOptions{withoutCNPG: []string{"d1"}})
	db := e.getDB(ns, "orders")
	db.Spec.Rollout.MaxUnavailable = 2 // any spec change
	g.Expect(e.hub.Update(e.ctx, db)).To(Succeed())
	g.Eventually(func(g Gomega) {
		cur := e.getDB(ns, "orders")
		g.Expect(clusterEntry(cur, "d1").ObservedGeneration).To(Equal(cur.Generation), "%+v", cur.Status.Clusters)
		g.Expect(clusterEntry(cur, "d1").Phase).To(Equal(fleetv1alpha1.ClusterPhaseReady))
	}).WithTimeout(eventually).WithPolling(poll).Should(Succeed())
	g.Expect(e.writes.Total("d1-again")).To(BeZero(), "the restarted hub wrote through the second registration of d1's cluster")
	var again fleetv1alpha1.MemberCluster
	g.Expect(e.hub.Get(e.ctx, client.ObjectKey{Name: "d1-again"}, &again)).To(Succeed())
	g.Expect(condition(again.Status.Conditions, fleetv1alpha1.MemberConditionReady).Reason).To(Equal(fleetv1alpha1.ReasonDuplicateCluster))

	// The registration in use deleted: the other one takes over.
	g.Expect(e.hub.Delete(e.ctx, &fleetv1alpha1.MemberCluster{ObjectMeta: metav1.ObjectMeta{Name: "d1"}})).To(Succeed())
	e.waitMemberReady("d1-again")
}
