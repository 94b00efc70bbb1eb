package database

import (
	"context"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/types"

	fleetv1alpha1 "github.com/fleetdb/fleetdb/apis/v1alpha1"
	"github.com/fleetdb/fleetdb/hub/internal/sharding"
)

// The plan a member's owner reads back from a placement gives each member
// the role the leader's plan gave it.
func TestPlacementPlanRoundTrip(t *testing.T) {
	g := NewWithT(t)
	key := types.NamespacedName{Namespace: "team", Name: "orders"}
	p := &plan{uid: "u1", generation: 3, policy: fleetv1alpha1.DeletionPolicyRetain, traceparent: "tp",
		targets: setOf([]string{"m1", "m2"}), allowed: setOf([]string{"m1"}), teardown: setOf([]string{"m3"}),
		finalBackup: &finalBackupPlan{policy: fleetv1alpha1.FinalBackupRequired}}
	specs := desiredSpecs(key, p)
	g.Expect(specs).To(HaveLen(3))
	s := &shardRuntime{byName: map[string]placementEntry{}}
	for cluster, spec := range specs {
		s.byName[sharding.PlacementName(key, cluster)] = placementEntry{key: key, cluster: cluster, spec: spec}
	}
	for _, c := range []string{"m1", "m2", "m3"} {
		got, finalBackup := s.plan(key, c)
		g.Expect(got).NotTo(BeNil(), c)
		g.Expect(got.role(c)).To(Equal(p.role(c)), c)
		g.Expect(got.uid).To(Equal(p.uid))
		g.Expect(got.generation).To(Equal(p.generation))
		g.Expect(got.policy).To(Equal(p.policy))
		g.Expect(got.traceparent).To(Equal("tp"))
		g.Expect(finalBackup).To(BeTrue())
		g.Expect(got.credentials).To(BeNil(), "no secret in a placement")
	}
	none, _ := s.plan(key, "m4")
	g.Expect(none).To(BeNil())
	g.Expect(s.databasesOn("m3")).To(ConsistOf(key))
}

// A report is folded only for the Database incarnation it is about, and
// carries no timestamp (so an unchanged observation writes nothing).
func TestPlacementReports(t *testing.T) {
	g := NewWithT(t)
	res := &memberResult{Status: fleetv1alpha1.ClusterStatus{Name: "m1", Phase: fleetv1alpha1.ClusterPhaseReady, ReadyReplicas: 1}, HasWorkload: true}
	now := metav1Time(time.Now())
	res.Status.LastSyncTime = &now
	st := placementStatus(res, "hub-0")
	g.Expect(st.Cluster.LastSyncTime).To(BeNil())
	g.Expect(res.Status.LastSyncTime).NotTo(BeNil(), "the result itself is left alone")
	st.DatabaseUID = "u1"
	pl := &fleetv1alpha1.DatabasePlacement{Spec: fleetv1alpha1.DatabasePlacementSpec{Database: fleetv1alpha1.DatabaseRef{UID: "u1"}}, Status: st}
	got := resultOf(pl)
	g.Expect(got).NotTo(BeNil())
	g.Expect(got.SameAs(res)).To(BeTrue())
	pl.Spec.Database.UID = "u2"
	g.Expect(resultOf(pl)).To(BeNil(), "a report about an earlier incarnation")
}

// A member sync its caller cancelled (the replica lost the member: its
// ownership context ended; or the hub stops) saw its own cancellation, not
// the member: it records no result (it was recorded as Degraded, and the
// leader flapped a Ready Database to Degraded when it handed a member over
// mid-sync). A sync that ran out of time did observe a slow member: that
// result stays.
func TestSyncCutShort(t *testing.T) {
	g := NewWithT(t)
	failed := func() syncOutcome {
		return failedOutcome(errReasonApply, context.Canceled, &memberResult{Status: fleetv1alpha1.ClusterStatus{
			Name: "m1", Phase: fleetv1alpha1.ClusterPhaseDegraded, Message: "context canceled"}})
	}
	owner, lose := context.WithCancel(context.Background())
	g.Expect(cutShort(owner, failed()).result).NotTo(BeNil(), "a sync of a member still owned records its result")
	lose()
	out := cutShort(owner, failed())
	g.Expect(out.result).To(BeNil(), "a sync cut short by losing the member records nothing")
	g.Expect(out.err).To(MatchError(context.Canceled), "the error is still returned (and counted)")

	timedOut, cancel := context.WithTimeout(context.Background(), time.Nanosecond)
	defer cancel()
	<-timedOut.Done()
	g.Expect(cutShort(timedOut, failed()).result).NotTo(BeNil(), "a member too slow for the sync's deadline is an observation")
}
