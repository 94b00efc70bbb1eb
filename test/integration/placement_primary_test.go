package integration

import (
	"testing"
	"time"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleetv1alpha1 "github.com/fleetdb/fleetdb/apis/v1alpha1"
	"github.com/fleetdb/fleetdb/member"
)

// TestPlacementKeepsPrimary (issue 25 item 5): no way a member leaves the
// placement tears down the primary of a PrimaryStandby Database, or the
// source of a switchover under way, before it is switched over; the Placed
// condition says which member is kept and what to do; once the primary has
// moved, the removal proceeds.
func TestPlacementKeepsPrimary(t *testing.T) {
	e := startEnvWith(t, envOptions{}, "m1", "m2", "m3")
	for _, m := range []string{"m1", "m2", "m3"} {
		setReplication(NewWithT(t), e, m, "$(DATABASE)-rw.$(NAMESPACE)."+m+".fleet.test")
	}
	sim := newCNPGSim(e, 500*time.Millisecond)
	go sim.run(e.ctx)
	t.Run("a placement edit during a switchover keeps its source until the switchover is done", func(t *testing.T) { testPlacementDropsSource(t, e, sim) })
	t.Run("a label change that drops the primary keeps it until a switchover moves it", func(t *testing.T) { testSelectorDropsPrimary(t, e) })
}

// primaryKeepsRunning expects the Cluster of ns/name in m to stay: not
// deleted, not going, not asked to hibernate (a Retain teardown's first step).
func (e *env) primaryKeepsRunning(g Gomega, m, ns, name string) {
	g.Consistently(func(g Gomega) {
		u := member.NewCNPGCluster()
		g.Expect(e.member(m).Get(e.ctx, client.ObjectKey{Namespace: ns, Name: name}, u)).To(Succeed(), "the primary's Cluster is gone")
		g.Expect(u.GetDeletionTimestamp()).To(BeNil(), "the primary's Cluster is being deleted")
		g.Expect(u.GetAnnotations()).NotTo(HaveKey("cnpg.io/hibernation"), "the primary's Cluster is being torn down")
	}).WithTimeout(5 * time.Second).WithPolling(poll).Should(Succeed())
}

// expectPrimaryHeld waits for the Placed condition to say that m is kept as the primary.
func (e *env) expectPrimaryHeld(g Gomega, ns, name, m string) {
	g.Eventually(func(g Gomega) {
		db := e.getDB(ns, name)
		c := condition(db.Status.Conditions, fleetv1alpha1.ConditionPlaced)
		g.Expect(c.Status).To(Equal(metav1.ConditionTrue))
		g.Expect(c.Reason).To(Equal(fleetv1alpha1.ReasonPrimaryHeld))
		g.Expect(c.Message).To(ContainSubstring(m))
		g.Expect(c.Message).To(ContainSubstring("switch over first"))
		g.Expect(clusterEntry(db, m).Name).To(Equal(m), "still placed")
	}).WithTimeout(eventually).WithPolling(poll).Should(Succeed())
}

// expectRemoved waits until m no longer holds the Database's Cluster nor a
// status entry, and the Placed condition is back to Placed.
func (e *env) expectRemoved(g Gomega, ns, name, m string) {
	g.Eventually(func(g Gomega) {
		g.Expect(clusterInstances(e, m, ns, name)).To(BeEquivalentTo(-1), "the Cluster in %s goes", m)
		db := e.getDB(ns, name)
		g.Expect(clusterEntry(db, m).Name).To(BeEmpty(), "%s leaves the status", m)
		g.Expect(condition(db.Status.Conditions, fleetv1alpha1.ConditionPlaced).Reason).To(Equal(fleetv1alpha1.ReasonPlaced))
	}).WithTimeout(eventually).WithPolling(poll).Should(Succeed())
}

// testPlacementDropsSource: a switchover from m1 to m2 waits on an
// unhealthy target; the same edit that started it dropped m1 from
// clusterNames. m1 (still the primary, not demoted) stays until the
// switchover is done, then goes. On main it was torn down at once.
func testPlacementDropsSource(t *testing.T, e *env, sim *cnpgSim) {
	g := NewWithT(t)
	ns := e.namespace("keep-source")
	members := []string{"m1", "m2", "m3"}
	db := newPrimaryStandbyDB(ns, "orders", "m1", members...)
	db.Spec.Topology.StepTimeout = &metav1.Duration{Duration: 5 * time.Minute}
	g.Expect(e.hub.Create(e.ctx, db)).To(Succeed())
	e.expectStable(g, ns, "orders", "m1", members...)

	defer sim.setUnhealthy("m2", false)
	e.makeUnhealthy(g, sim, "m2", ns, "orders")
	g.Eventually(func() error {
		db := e.getDB(ns, "orders")
		db.Spec.Topology.PrimaryCluster = "m2"
		db.Spec.Placement.ClusterNames = []string{"m2", "m3"}
		return e.hub.Update(e.ctx, db)
	}).WithTimeout(eventually).WithPolling(poll).Should(Succeed())
	g.Eventually(func(g Gomega) {
		sw := e.getDB(ns, "orders").Status.Topology.Switchover
		g.Expect(sw).NotTo(BeNil())
		g.Expect(sw.From).To(Equal("m1"))
		g.Expect(sw.To).To(Equal("m2"))
	}).WithTimeout(eventually).WithPolling(poll).Should(Succeed())
	e.primaryKeepsRunning(g, "m1", ns, "orders")
	e.expectPrimaryHeld(g, ns, "orders", "m1")

	sim.setUnhealthy("m2", false)
	e.expectStable(g, ns, "orders", "m2", "m2", "m3")
	e.expectRemoved(g, ns, "orders", "m1")
}

// testSelectorDropsPrimary: a Database placed by clusterSelector loses its
// primary member from the selection (a label removed from the
// MemberCluster): the primary stays, the condition says to switch over
// first (on main the Database stalled, PrimaryNotPlaced); after a
// switchover to m3 the removal proceeds.
func testSelectorDropsPrimary(t *testing.T, e *env) {
	g := NewWithT(t)
	ns := e.namespace("keep-selected")
	pool := "fleetdb.io/test-pool-" + ns
	for _, m := range []string{"m2", "m3"} {
		setLabels(t, e, m, map[string]string{pool: "yes"})
	}
	db := newPrimaryStandbyDB(ns, "stock", "m2")
	db.Spec.Placement.ClusterNames = nil
	db.Spec.Placement.ClusterSelector = &metav1.LabelSelector{MatchLabels: map[string]string{pool: "yes"}}
	g.Expect(e.hub.Create(e.ctx, db)).To(Succeed())
	e.expectStable(g, ns, "stock", "m2", "m2", "m3")

	setLabels(t, e, "m2", map[string]string{pool: ""})
	e.expectPrimaryHeld(g, ns, "stock", "m2")
	g.Expect(condition(e.getDB(ns, "stock").Status.Conditions, fleetv1alpha1.ConditionStalled).Status).NotTo(Equal(metav1.ConditionTrue))
	e.primaryKeepsRunning(g, "m2", ns, "stock")

	e.setPrimary(g, ns, "stock", "m3")
	e.expectStable(g, ns, "stock", "m3", "m3")
	e.expectRemoved(g, ns, "stock", "m2")
}
