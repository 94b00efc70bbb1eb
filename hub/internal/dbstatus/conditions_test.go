package dbstatus

import (
	"testing"

	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	fleetv1alpha1 "github.com/fleetdb/fleetdb/apis/v1alpha1"
	"github.com/fleetdb/fleetdb/internal/placement"
)

// conditionAt runs a setter on a status at generation 5 that starts with
// conds and returns the condition of type condType (nil when absent).
func conditionAt(conds []metav1.Condition, condType string, set func(*fleetv1alpha1.DatabaseStatus)) *metav1.Condition {
	st := &fleetv1alpha1.DatabaseStatus{ObservedGeneration: 5, Conditions: conds}
	set(st)
	return meta.FindStatusCondition(st.Conditions, condType)
}

type wantCondition struct {
	status  metav1.ConditionStatus // "": the condition is absent
	reason  string
	message string // a substring
}

func expectCondition(g Gomega, c *metav1.Condition, want wantCondition) {
	if want.status == "" {
		g.Expect(c).To(BeNil())
		return
	}
	g.Expect(c).NotTo(BeNil())
	g.Expect(c.Status).To(Equal(want.status))
	g.Expect(c.Reason).To(Equal(want.reason))
	g.Expect(c.Message).To(ContainSubstring(want.message))
	g.Expect(c.ObservedGeneration).To(BeEquivalentTo(5))
}

func TestSetPlacedCondition(t *testing.T) {
	for _, tc := range []struct {
		name      string
		placement placement.Result
		want      wantCondition
	}{
		{"placed", placement.Result{Targets: []string{"a", "b"}},
			wantCondition{metav1.ConditionTrue, fleetv1alpha1.ReasonPlaced, "placed on 2 member(s): a, b"}},
		{"placed, a named member is not registered", placement.Result{Targets: []string{"a"}, Missing: []string{"x"}},
			wantCondition{metav1.ConditionTrue, fleetv1alpha1.ReasonPlaced, "; not registered: x"}},
		{"nothing selected", placement.Result{},
			wantCondition{metav1.ConditionFalse, fleetv1alpha1.ReasonNoMatchingClusters, "placement selects no member cluster"}},
		{"nothing placed: cordoned members are named", placement.Result{Missing: []string{"x"}, Cordoned: []string{"c"}},
			wantCondition{metav1.ConditionFalse, fleetv1alpha1.ReasonNoMatchingClusters, "not registered: x; unschedulable: c"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := conditionAt(nil, fleetv1alpha1.ConditionPlaced, func(st *fleetv1alpha1.DatabaseStatus) { setPlacedCondition(st, tc.placement) })
			expectCondition(NewWithT(t), c, tc.want)
		})
	}
}

func TestSetDegradedCondition(t *testing.T) {
	for _, tc := range []struct {
		name  string
		tally memberTally
		want  wantCondition
	}{
		{"all well", memberTally{targets: []string{"a"}, ready: []string{"a"}},
			wantCondition{metav1.ConditionFalse, fleetv1alpha1.ReasonAsExpected, "no member is degraded"}},
		{"progressing members do not degrade", memberTally{targets: []string{"a"}, progressing: []string{"a"}},
			wantCondition{metav1.ConditionFalse, fleetv1alpha1.ReasonAsExpected, ""}},
		{"every kind of problem is named", memberTally{unreachable: []string{"u"}, conflict: []string{"c"}, degraded: []string{"d"}},
			wantCondition{metav1.ConditionTrue, fleetv1alpha1.ReasonMembersDegraded,
				"unreachable: u; conflict with objects fleetdb does not own: c; failing: d"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := conditionAt(nil, fleetv1alpha1.ConditionDegraded, func(st *fleetv1alpha1.DatabaseStatus) { setDegradedCondition(st, tc.tally) })
			expectCondition(NewWithT(t), c, tc.want)
		})
	}
}

func TestSetReadyCondition(t *testing.T) {
	ab := []string{"a", "b"}
	for _, tc := range []struct {
		name  string
		tally memberTally
		want  wantCondition
	}{
		{"every member ready", memberTally{targets: ab, ready: ab},
			wantCondition{metav1.ConditionTrue, fleetv1alpha1.ReasonReady, "generation 5 is ready on all 2 member(s)"}},
		{"one member behind", memberTally{targets: ab, ready: ab[:1], progressing: ab[1:]},
			wantCondition{metav1.ConditionFalse, fleetv1alpha1.ReasonProgressing, "1 of 2 member(s) ready on generation 5"}},
		{"a member still being removed", memberTally{targets: ab, ready: ab, teardown: []string{"z"}},
			wantCondition{metav1.ConditionFalse, fleetv1alpha1.ReasonProgressing, "2 of 2"}},
		{"nothing placed", memberTally{},
			wantCondition{metav1.ConditionFalse, fleetv1alpha1.ReasonNoMatchingClusters, "no member cluster is placed"}},
		{"deleting", memberTally{deleting: true, teardown: ab},
			wantCondition{metav1.ConditionFalse, fleetv1alpha1.ReasonTeardown, "being deleted"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := conditionAt(nil, fleetv1alpha1.ConditionReady, func(st *fleetv1alpha1.DatabaseStatus) { setReadyCondition(st, tc.tally) })
			expectCondition(NewWithT(t), c, tc.want)
		})
	}
}

func TestSetReconcilingCondition(t *testing.T) {
	ab := []string{"a", "b"}
	earlier := []metav1.Condition{
		{Type: fleetv1alpha1.ConditionReconciling, Status: metav1.ConditionTrue, Reason: fleetv1alpha1.ReasonProgressing},
		{Type: fleetv1alpha1.ConditionProgressing, Status: metav1.ConditionTrue, Reason: fleetv1alpha1.ReasonProgressing},
	}
	for _, tc := range []struct {
		name  string
		tally memberTally
		want  wantCondition
	}{
		{"members moving to the generation", memberTally{targets: ab, allowed: 2, ready: ab[:1], progressing: ab[1:]},
			wantCondition{metav1.ConditionTrue, fleetv1alpha1.ReasonProgressing, "moving to generation 5: b"}},
		{"the rollout holds members back", memberTally{targets: ab, allowed: 1, progressing: ab},
			wantCondition{metav1.ConditionTrue, fleetv1alpha1.ReasonRollingOut, "moving to generation 5: a, b"}},
		{"a dropped member being removed", memberTally{targets: ab[:1], allowed: 1, ready: ab[:1], teardown: []string{"z"}},
			wantCondition{metav1.ConditionTrue, fleetv1alpha1.ReasonProgressing, "; removing from: z"}},
		{"all ready: absent", memberTally{targets: ab, allowed: 2, ready: ab}, wantCondition{}},
		{"only degraded members: absent", memberTally{targets: ab, allowed: 2, degraded: ab}, wantCondition{}},
		{"nothing placed: absent", memberTally{}, wantCondition{}},
		{"deleting: absent", memberTally{deleting: true, teardown: ab}, wantCondition{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			st := &fleetv1alpha1.DatabaseStatus{ObservedGeneration: 5, Conditions: append([]metav1.Condition(nil), earlier...)}
			setReconcilingCondition(st, tc.tally)
			expectCondition(g, meta.FindStatusCondition(st.Conditions, fleetv1alpha1.ConditionReconciling), tc.want)
			g.Expect(meta.FindStatusCondition(st.Conditions, fleetv1alpha1.ConditionProgressing)).To(BeNil(), "Progressing is not kept beside Reconciling")
		})
	}
}

func TestSetDeletingCondition(t *testing.T) {
	present := []metav1.Condition{{Type: fleetv1alpha1.ConditionDeleting, Status: metav1.ConditionTrue, Reason: fleetv1alpha1.ReasonTeardown}}
	for _, tc := range []struct {
		name  string
		tally memberTally
		want  wantCondition
	}{
		{"deleting names the members left", memberTally{deleting: true, teardown: []string{"a", "b"}},
			wantCondition{metav1.ConditionTrue, fleetv1alpha1.ReasonTeardown, "removing the Database from: a, b"}},
		{"not deleting: absent", memberTally{teardown: []string{"z"}}, wantCondition{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := conditionAt(append([]metav1.Condition(nil), present...), fleetv1alpha1.ConditionDeleting,
				func(st *fleetv1alpha1.DatabaseStatus) { setDeletingCondition(st, tc.tally) })
			expectCondition(NewWithT(t), c, tc.want)
		})
	}
}

func TestSetStalledCondition(t *testing.T) {
	g := NewWithT(t)
	st := &fleetv1alpha1.DatabaseStatus{ObservedGeneration: 5, Conditions: []metav1.Condition{
		{Type: fleetv1alpha1.ConditionReady, Status: metav1.ConditionTrue, Reason: fleetv1alpha1.ReasonReady},
		{Type: fleetv1alpha1.ConditionReconciling, Status: metav1.ConditionTrue, Reason: fleetv1alpha1.ReasonProgressing},
	}}
	setStalledCondition(st, fleetv1alpha1.ReasonInvalidSpec, "bad selector")
	expectCondition(g, meta.FindStatusCondition(st.Conditions, fleetv1alpha1.ConditionStalled),
		wantCondition{metav1.ConditionTrue, fleetv1alpha1.ReasonInvalidSpec, "bad selector"})
	expectCondition(g, meta.FindStatusCondition(st.Conditions, fleetv1alpha1.ConditionReady),
		wantCondition{metav1.ConditionFalse, fleetv1alpha1.ReasonInvalidSpec, "bad selector"})
	expectCondition(g, meta.FindStatusCondition(st.Conditions, fleetv1alpha1.ConditionReconciling),
		wantCondition{metav1.ConditionFalse, fleetv1alpha1.ReasonInvalidSpec, "retrying cannot fix this"})
	g.Expect(phaseOf(st.Conditions)).To(Equal(fleetv1alpha1.PhaseFailed))

	clearStalledCondition(st)
	g.Expect(meta.FindStatusCondition(st.Conditions, fleetv1alpha1.ConditionStalled)).To(BeNil())
}

func TestPhaseOf(t *testing.T) {
	cond := func(condType string, status metav1.ConditionStatus) metav1.Condition {
		return metav1.Condition{Type: condType, Status: status}
	}
	const yes, no = metav1.ConditionTrue, metav1.ConditionFalse
	for _, tc := range []struct {
		name  string
		conds []metav1.Condition
		want  fleetv1alpha1.Phase
	}{
		{"deleting wins", []metav1.Condition{cond(fleetv1alpha1.ConditionDeleting, yes), cond(fleetv1alpha1.ConditionDegraded, yes)}, fleetv1alpha1.PhaseDeleting},
		{"stalled", []metav1.Condition{cond(fleetv1alpha1.ConditionStalled, yes), cond(fleetv1alpha1.ConditionPlaced, yes)}, fleetv1alpha1.PhaseFailed},
		{"ready", []metav1.Condition{cond(fleetv1alpha1.ConditionReady, yes), cond(fleetv1alpha1.ConditionDegraded, no)}, fleetv1alpha1.PhaseReady},
		{"degraded", []metav1.Condition{cond(fleetv1alpha1.ConditionReady, no), cond(fleetv1alpha1.ConditionDegraded, yes)}, fleetv1alpha1.PhaseDegraded},
		{"not placed", []metav1.Condition{cond(fleetv1alpha1.ConditionPlaced, no), cond(fleetv1alpha1.ConditionReady, no)}, fleetv1alpha1.PhasePending},
		{"placed, on its way", []metav1.Condition{cond(fleetv1alpha1.ConditionPlaced, yes), cond(fleetv1alpha1.ConditionReady, no)}, fleetv1alpha1.PhaseProvisioning},
	} {
		t.Run(tc.name, func(t *testing.T) {
			NewWithT(t).Expect(phaseOf(tc.conds)).To(Equal(tc.want))
		})
	}
}
