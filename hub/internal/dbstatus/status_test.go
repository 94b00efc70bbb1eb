package dbstatus

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	fleetv1alpha1 "github.com/fleetdb/fleetdb/apis/v1alpha1"
	"github.com/fleetdb/fleetdb/internal/placement"
)

func readyResult(name string, gen int64) *Result {
	return &Result{HasWorkload: true, Status: fleetv1alpha1.ClusterStatus{
		Name: name, Phase: fleetv1alpha1.ClusterPhaseReady, Replicas: 2, ReadyReplicas: 2, ObservedGeneration: gen,
		Version: "17", Endpoint: "orders.team-a.svc:5432",
	}}
}

func reachableAll(string) (bool, string) { return false, "" }

func statusDB(gen int64) *fleetv1alpha1.Database {
	db := &fleetv1alpha1.Database{}
	db.Name, db.Namespace, db.Generation = "orders", "team-a", gen
	db.Spec.Rollout.MaxUnavailable = 1
	return db
}

// computeStatusCase is one case of TestComputeStatus.
type computeStatusCase struct {
	name        string
	gen         int64
	targets     []string
	results     map[string]*Result
	unreachable func(string) (bool, string)
	allowed     map[string]bool
	teardown    []string
	check       func(g Gomega, st fleetv1alpha1.DatabaseStatus)
}

// bothAllowed lets the rollout run the current generation on a and b.
var bothAllowed = map[string]bool{"a": true, "b": true}

var computeStatusCases = []computeStatusCase{
	{
		name: "all members ready on the current generation", gen: 3, targets: []string{"a", "b"}, allowed: bothAllowed,
		results: map[string]*Result{"a": readyResult("a", 3), "b": readyResult("b", 3)},
		check: func(g Gomega, st fleetv1alpha1.DatabaseStatus) {
			g.Expect(meta.IsStatusConditionTrue(st.Conditions, fleetv1alpha1.ConditionReady)).To(BeTrue())
			g.Expect(meta.IsStatusConditionTrue(st.Conditions, fleetv1alpha1.ConditionPlaced)).To(BeTrue())
			g.Expect(meta.IsStatusConditionFalse(st.Conditions, fleetv1alpha1.ConditionDegraded)).To(BeTrue())
			g.Expect(meta.FindStatusCondition(st.Conditions, fleetv1alpha1.ConditionReconciling)).To(BeNil())
			g.Expect(st.Phase).To(Equal(fleetv1alpha1.PhaseReady))
			g.Expect(st.ReadySummary).To(Equal("2/2"))
			g.Expect(st.ObservedGeneration).To(BeEquivalentTo(3))
			for _, c := range st.Conditions {
				g.Expect(c.ObservedGeneration).To(BeEquivalentTo(3))
			}
		},
	},
	{
		name: "a member on an older generation is not ready", gen: 4, targets: []string{"a", "b"}, allowed: bothAllowed,
		results: map[string]*Result{"a": readyResult("a", 4), "b": readyResult("b", 3)},
		check: func(g Gomega, st fleetv1alpha1.DatabaseStatus) {
			g.Expect(meta.IsStatusConditionFalse(st.Conditions, fleetv1alpha1.ConditionReady)).To(BeTrue())
			g.Expect(meta.IsStatusConditionTrue(st.Conditions, fleetv1alpha1.ConditionReconciling)).To(BeTrue())
			g.Expect(st.Clusters[1].Phase).To(Equal(fleetv1alpha1.ClusterPhaseProvisioning))
			g.Expect(st.Phase).To(Equal(fleetv1alpha1.PhaseProvisioning))
			g.Expect(st.ReadySummary).To(Equal("1/2"))
		},
	},
	{
		name: "members held by the rollout say so", gen: 4, targets: []string{"a", "b"}, allowed: map[string]bool{"a": true},
		results: map[string]*Result{"a": readyResult("a", 3), "b": readyResult("b", 3)},
		check: func(g Gomega, st fleetv1alpha1.DatabaseStatus) {
			g.Expect(st.Clusters[1].Message).To(ContainSubstring("waiting for the rollout"))
			g.Expect(meta.FindStatusCondition(st.Conditions, fleetv1alpha1.ConditionReconciling).Reason).To(Equal(fleetv1alpha1.ReasonRollingOut))
		},
	},
	{
		name: "unreachable and conflicting members degrade and are named", gen: 1, targets: []string{"a", "b", "c"}, allowed: bothAllowed,
		results: map[string]*Result{
			"a": readyResult("a", 1),
			"c": {HasWorkload: true, Status: fleetv1alpha1.ClusterStatus{Phase: fleetv1alpha1.ClusterPhaseConflict, Message: "StatefulSet team-a/orders exists"}},
		},
		unreachable: func(n string) (bool, string) { return n == "b", "connection refused" },
		check: func(g Gomega, st fleetv1alpha1.DatabaseStatus) {
			deg := meta.FindStatusCondition(st.Conditions, fleetv1alpha1.ConditionDegraded)
			g.Expect(deg.Status).To(Equal(metav1.ConditionTrue))
			g.Expect(deg.Message).To(And(ContainSubstring("unreachable: b"), ContainSubstring("c")))
			g.Expect(st.Clusters[1].Phase).To(Equal(fleetv1alpha1.ClusterPhaseUnreachable))
			g.Expect(st.Clusters[1].Message).To(ContainSubstring("connection refused"))
			g.Expect(st.Clusters[2].Phase).To(Equal(fleetv1alpha1.ClusterPhaseConflict))
			g.Expect(st.Phase).To(Equal(fleetv1alpha1.PhaseDegraded))
		},
	},
	{
		name: "nothing placed", gen: 1, targets: nil,
		check: func(g Gomega, st fleetv1alpha1.DatabaseStatus) {
			placed := meta.FindStatusCondition(st.Conditions, fleetv1alpha1.ConditionPlaced)
			g.Expect(placed.Status).To(Equal(metav1.ConditionFalse))
			g.Expect(placed.Reason).To(Equal(fleetv1alpha1.ReasonNoMatchingClusters))
			g.Expect(meta.IsStatusConditionTrue(st.Conditions, fleetv1alpha1.ConditionReady)).To(BeFalse())
			g.Expect(st.Phase).To(Equal(fleetv1alpha1.PhasePending))
		},
	},
	{
		name: "members being torn down are listed and keep Ready false", gen: 2, targets: []string{"a"}, allowed: bothAllowed, teardown: []string{"z"},
		results: map[string]*Result{"a": readyResult("a", 2), "z": {Status: fleetv1alpha1.ClusterStatus{Phase: fleetv1alpha1.ClusterPhaseDeleting}}},
		check: func(g Gomega, st fleetv1alpha1.DatabaseStatus) {
			g.Expect(st.Clusters).To(HaveLen(2))
			g.Expect(st.Clusters[1].Phase).To(Equal(fleetv1alpha1.ClusterPhaseDeleting))
			g.Expect(st.TargetClusters).To(BeEquivalentTo(1))
			g.Expect(meta.IsStatusConditionTrue(st.Conditions, fleetv1alpha1.ConditionReconciling)).To(BeTrue())
		},
	},
}

func TestComputeStatus(t *testing.T) {
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	for _, tc := range computeStatusCases {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			un := tc.unreachable
			if un == nil {
				un = reachableAll
			}
			st := Compute(Input{
				DB: statusDB(tc.gen), Placement: placement.Result{Targets: tc.targets}, Allowed: tc.allowed,
				Results: tc.results, Unreachable: un, Teardown: tc.teardown, Now: now,
			})
			tc.check(g, st)
		})
	}
}

func TestComputeStatusIsStable(t *testing.T) {
	g := NewWithT(t)
	db := statusDB(1)
	in := Input{
		DB: db, Placement: placement.Result{Targets: []string{"a", "b"}}, Allowed: map[string]bool{"a": true, "b": true},
		Results:     map[string]*Result{"a": readyResult("a", 1), "b": readyResult("b", 1)},
		Unreachable: reachableAll, Now: time.Now(),
	}
	first := Compute(in)
	for i := range first.Clusters {
		ts := metav1.NewTime(time.Now().Add(-time.Hour).Truncate(time.Second))
		first.Clusters[i].LastSyncTime = &ts
	}
	db.Status = first
	// A later observation of the same state (new sync time) changes nothing.
	in.Results["a"].Status.LastSyncTime = &metav1.Time{Time: time.Now()}
	second := Compute(in)
	g.Expect(second).To(Equal(first))
}

func TestStatusStaysBoundedAt100Members(t *testing.T) {
	g := NewWithT(t)
	db := statusDB(7)
	var targets []string
	results := map[string]*Result{}
	for i := range 100 {
		name := fmt.Sprintf("member-cluster-in-region-%03d", i)
		targets = append(targets, name)
		r := readyResult(name, 6)
		r.Status.Phase = fleetv1alpha1.ClusterPhaseDegraded
		r.Status.Message = strings.Repeat("x", 2000)
		results[name] = r
	}
	st := Compute(Input{
		DB: db, Placement: placement.Result{Targets: targets, Missing: targets}, Results: results,
		Unreachable: func(string) (bool, string) { return true, strings.Repeat("y", 5000) }, Now: time.Now(),
	})
	b, err := json.Marshal(st)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(len(b)).To(BeNumerically("<", 100*1024), "status is %d bytes", len(b))
	for _, c := range st.Conditions {
		g.Expect(len(c.Message)).To(BeNumerically("<=", 32*1024))
	}
}

func TestLastChangeTraceID(t *testing.T) {
	g := NewWithT(t)
	const old, fresh = "0af7651916cd43dd8448eb211c80319c", "4bf92f3577b34da6a3ce929d0e0e4736"
	tp := fresh // the trace of the change now published (telemetry.TraceIDOf of its traceparent)
	db := &fleetv1alpha1.Database{}
	db.Generation = 2
	db.Status.ObservedGeneration, db.Status.LastChangeTraceID = 2, old
	g.Expect(LastChangeTraceID(db, tp)).To(Equal(old), "kept while its generation is observed: a hub restart's new traces write nothing")
	db.Generation = 3
	g.Expect(LastChangeTraceID(db, tp)).To(Equal(fresh), "a new generation takes the trace of the change now published")
	g.Expect(LastChangeTraceID(db, "")).To(Equal(old), "no plan: kept")
	db.Status.LastChangeTraceID = ""
	db.Generation = 2
	g.Expect(LastChangeTraceID(db, tp)).To(Equal(fresh), "an empty one is filled in")
}

// TestStalledGenerationGetsItsOwnChangeTrace: a new generation that stalls
// (observed, nothing published) does not keep the earlier generation's
// change trace: when the stall clears without a spec edit, the status takes
// the trace of the change then published, not the earlier one.
func TestStalledGenerationGetsItsOwnChangeTrace(t *testing.T) {
	g := NewWithT(t)
	const old, fresh = "0af7651916cd43dd8448eb211c80319c", "4bf92f3577b34da6a3ce929d0e0e4736"
	db := &fleetv1alpha1.Database{}
	db.Generation = 3
	db.Status.ObservedGeneration, db.Status.LastChangeTraceID = 2, old
	db.Status = Stalled(db, fleetv1alpha1.ReasonNamespaceNotAllowed, "namespace may not use eu-2")
	g.Expect(db.Status.ObservedGeneration).To(Equal(int64(3)))
	g.Expect(db.Status.LastChangeTraceID).To(BeEmpty())
	g.Expect(LastChangeTraceID(db, fresh)).To(Equal(fresh))

	// Stalled again on the same generation: nothing changes (no write).
	again := Stalled(db, fleetv1alpha1.ReasonNamespaceNotAllowed, "namespace may not use eu-2")
	g.Expect(again.LastChangeTraceID).To(Equal(db.Status.LastChangeTraceID))
	db.Status.LastChangeTraceID = fresh
	g.Expect(Stalled(db, fleetv1alpha1.ReasonNamespaceNotAllowed, "x").LastChangeTraceID).To(Equal(fresh), "a stall of an acted-on generation keeps its trace")
}
