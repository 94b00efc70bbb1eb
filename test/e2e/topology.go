package e2e

import (
	"context"
	"testing"
	"time"

	. "github.com/onsi/gomega" //nolint:staticcheck // ST1001: gomega's DSL reads as assertions, as in Cluster API's test/framework
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleetv1alpha1 "github.com/fleetdb/fleetdb/apis/v1alpha1"
	"github.com/fleetdb/fleetdb/member"
)

// TopologyInput is the input of TopologySpec.
type TopologyInput struct {
	T     testing.TB
	Fleet *Fleet
}

// TopologySpec runs a PrimaryStandby Database over the first two members
// (the local fleet's kwok Stages play CloudNativePG's replica switch) and
// proves:
//   - it becomes TopologyStable (`kubectl wait --for=condition=TopologyStable`)
//     with the first member primary and the second following it;
//   - a switchover to the second member (kubectl patch) completes: Stable
//     again, lastSwitchover Succeeded with a demotion token, both Clusters
//     follow the second member;
//   - with the primary stopped (frozen: its control plane and kwok are down),
//     the topology is Degraded/PrimaryUnreachable and nothing fails over;
//     spec.topology.failover promotes the first member, the old primary is
//     Fenced; once started again it is written as a standby of the new
//     primary, leaves fenced and the topology is Stable.
func TopologySpec(ctx context.Context, in TopologyInput) {
	t, f := in.T, in.Fleet
	g := NewWithT(t)
	if len(f.Members) < 2 {
		t.Skipf("needs at least 2 members, the fleet has %d", len(f.Members))
	}
	a, b := f.Members[0].Name, f.Members[1].Name
	members := []string{a, b}
	ns := CreateNamespace(ctx, CreateNamespaceInput{T: t, Fleet: f, Prefix: "e2e-topology"})
	DumpOnFailure(t, f, ns)

	db := NewDatabase(ns, "orders", 1, members)
	db.Spec.Topology = &fleetv1alpha1.TopologySpec{
		Mode: fleetv1alpha1.TopologyPrimaryStandby, PrimaryCluster: a,
		StepTimeout: &metav1.Duration{Duration: 2 * time.Minute},
	}
	g.Expect(f.Hub.Client.Create(ctx, db)).To(Succeed())
	key := client.ObjectKeyFromObject(db)
	kubectlWaitStable(ctx, t, f, key)
	expectTopology(ctx, g, f, key, a, members)

	t.Logf("switchover %s -> %s", a, b)
	runKubectl(ctx, t, f, "-n", ns, "patch", "database", "orders", "--type", "merge", "-p", `{"spec":{"topology":{"primaryCluster":"`+b+`"}}}`)
	g.Eventually(func(g Gomega) {
		st := GetDatabase(ctx, g, f, key).Status.Topology
		g.Expect(st).NotTo(BeNil())
		g.Expect(st.LastSwitchover).NotTo(BeNil())
		g.Expect(st.LastSwitchover.Outcome).To(Equal("Succeeded"), st.LastSwitchover.Message)
	}).WithContext(ctx).WithTimeout(f.Intervals.Ready).WithPolling(f.Intervals.Poll).Should(Succeed())
	kubectlWaitStable(ctx, t, f, key)
	last := expectTopology(ctx, g, f, key, b, members).Status.Topology.LastSwitchover
	g.Expect(last.From).To(Equal(a))
	g.Expect(last.DemotionToken).NotTo(BeEmpty())

	if f.Control == nil {
		t.Log("this fleet cannot stop members: the forced promotion is not run")
		return
	}
	topologyFailover(ctx, t, f, key, b, a, members)
}

// topologyFailover stops the primary lost, promotes next with
// spec.topology.failover, and starts lost again.
func topologyFailover(ctx context.Context, t testing.TB, f *Fleet, key types.NamespacedName, lost, next string, members []string) {
	g := NewWithT(t)
	stopped := false
	t.Cleanup(func() {
		if stopped {
			cctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			defer cancel()
			if err := f.Control.StartMember(cctx, lost); err != nil {
				t.Errorf("cleanup: starting %s again: %v", lost, err)
			}
		}
	})
	t.Logf("stopping the primary %s", lost)
	g.Expect(f.Control.StopMember(ctx, lost)).To(Succeed())
	stopped = true
	g.Eventually(func(g Gomega) {
		db := GetDatabase(ctx, g, f, key)
		c := Condition(db.Status.Conditions, fleetv1alpha1.ConditionTopologyStable)
		g.Expect(c.Reason).To(Equal(fleetv1alpha1.ReasonPrimaryUnreachable), c.Message)
	}).WithContext(ctx).WithTimeout(f.Intervals.Unreachable).WithPolling(f.Intervals.Poll).Should(Succeed())
	g.Expect(replicaPrimary(ctx, g, f.Member(next), key)).To(Equal(lost), "no automatic failover")

	t.Logf("forced promotion of %s", next)
	UpdateDatabase(ctx, t, f, key, func(d *fleetv1alpha1.Database) {
		d.Spec.Topology.PrimaryCluster = next
		d.Spec.Topology.Failover = &fleetv1alpha1.FailoverSpec{TargetCluster: next, Reason: "e2e: " + lost + " lost"}
	})
	g.Eventually(func(g Gomega) {
		db := GetDatabase(ctx, g, f, key)
		st := db.Status.Topology
		g.Expect(st.PrimaryCluster).To(Equal(next))
		g.Expect(st.Fenced).To(ConsistOf(lost))
		g.Expect(Entry(g, db, lost).Role).To(Equal(fleetv1alpha1.RoleFenced))
		g.Expect(replicaPrimary(ctx, g, f.Member(next), key)).To(Equal(next))
	}).WithContext(ctx).WithTimeout(f.Intervals.Ready).WithPolling(f.Intervals.Poll).Should(Succeed())

	t.Logf("starting %s again", lost)
	g.Expect(f.Control.StartMember(ctx, lost)).To(Succeed())
	stopped = false
	kubectlWaitStable(ctx, t, f, key)
	db := expectTopology(ctx, g, f, key, next, members)
	g.Expect(db.Status.Topology.Fenced).To(BeEmpty())
	g.Expect(db.Status.Topology.LastSwitchover.Kind).To(Equal(fleetv1alpha1.SwitchoverForced))
}

// expectTopology waits until primary is the primary, TopologyStable is True
// and every member's Cluster follows primary, with the roles to match.
func expectTopology(ctx context.Context, g Gomega, f *Fleet, key types.NamespacedName, primary string, members []string) *fleetv1alpha1.Database {
	var db *fleetv1alpha1.Database
	g.Eventually(func(g Gomega) {
		db = GetDatabase(ctx, g, f, key)
		c := Condition(db.Status.Conditions, fleetv1alpha1.ConditionTopologyStable)
		g.Expect(c.Status).To(Equal(metav1.ConditionTrue), c.Message)
		g.Expect(db.Status.Topology.PrimaryCluster).To(Equal(primary))
		for _, m := range members {
			g.Expect(replicaPrimary(ctx, g, f.Member(m), key)).To(Equal(primary), m)
			role := fleetv1alpha1.RoleStandby
			if m == primary {
				role = fleetv1alpha1.RolePrimary
			}
			g.Expect(Entry(g, db, m).Role).To(Equal(role), m)
		}
	}).WithContext(ctx).WithTimeout(f.Intervals.Ready).WithPolling(f.Intervals.Poll).Should(Succeed())
	return db
}

// replicaPrimary is spec.replica.primary of the Database's Cluster in a member.
func replicaPrimary(ctx context.Context, g Gomega, m *Cluster, key types.NamespacedName) string {
	u := member.NewCNPGCluster()
	g.Expect(m.Client.Get(ctx, key, u)).To(Succeed())
	p, _, _ := unstructured.NestedString(u.Object, "spec", "replica", "primary")
	return p
}

// kubectlWaitStable runs `kubectl wait --for=condition=TopologyStable`.
func kubectlWaitStable(ctx context.Context, t testing.TB, f *Fleet, key types.NamespacedName) {
	runKubectl(ctx, t, f, "-n", key.Namespace, "wait", "database/"+key.Name, "--for=condition=TopologyStable",
		"--timeout="+f.Intervals.Ready.String())
}

// runKubectl runs kubectl against the hub and fails the test when it fails.
func runKubectl(ctx context.Context, t testing.TB, f *Fleet, args ...string) {
	t.Helper()
	out, err := kubectl(ctx, f, args...)
	NewWithT(t).Expect(err).NotTo(HaveOccurred(), "kubectl %v: %s", args, out)
}
