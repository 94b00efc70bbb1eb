package database

import (
	"testing"

	. "github.com/onsi/gomega"

	fleetv1alpha1 "github.com/fleetdb/fleetdb/apis/v1alpha1"
)

func observedAt(gen int64, phase fleetv1alpha1.ClusterPhase) *memberResult {
	return &memberResult{HasWorkload: true, Status: fleetv1alpha1.ClusterStatus{ObservedGeneration: gen, Phase: phase}}
}

func TestPlanRollout(t *testing.T) {
	targets := []string{"a", "b", "c", "d"}
	ready := fleetv1alpha1.ClusterPhaseReady
	fresh := &memberResult{Status: fleetv1alpha1.ClusterStatus{Phase: fleetv1alpha1.ClusterPhasePending}}
	all := func(string) bool { return true }
	tests := []struct {
		name      string
		gen       int64
		maxU      int32
		observed  map[string]*memberResult
		prev      map[string]bool
		reachable func(string) bool
		switching *fleetv1alpha1.SwitchoverStatus
		fenced    []string
		want      []string
	}{
		{name: "first generation creates everywhere", gen: 1, maxU: 1, want: targets},
		{name: "unknown members are held", gen: 2, maxU: 1, observed: map[string]*memberResult{}, want: nil},
		{name: "one at a time", gen: 2, maxU: 1,
			observed: map[string]*memberResult{"a": observedAt(1, ready), "b": observedAt(1, ready), "c": observedAt(1, ready), "d": observedAt(1, ready)},
			want:     []string{"a"}},
		{name: "two at a time", gen: 2, maxU: 2,
			observed: map[string]*memberResult{"a": observedAt(1, ready), "b": observedAt(1, ready), "c": observedAt(1, ready), "d": observedAt(1, ready)},
			want:     []string{"a", "b"}},
		{name: "the next starts when the previous is ready", gen: 2, maxU: 1, prev: map[string]bool{"a": true},
			observed: map[string]*memberResult{"a": observedAt(2, ready), "b": observedAt(1, ready), "c": observedAt(1, ready), "d": observedAt(1, ready)},
			want:     []string{"a", "b"}},
		{name: "not while the previous is still rolling", gen: 2, maxU: 1, prev: map[string]bool{"a": true},
			observed: map[string]*memberResult{"a": observedAt(2, fleetv1alpha1.ClusterPhaseProvisioning), "b": observedAt(1, ready), "c": observedAt(1, ready), "d": observedAt(1, ready)},
			want:     []string{"a"}},
		{name: "an allowed member that has not caught up still counts", gen: 2, maxU: 1, prev: map[string]bool{"a": true},
			observed: map[string]*memberResult{"a": observedAt(1, ready), "b": observedAt(1, ready)},
			want:     []string{"a"}},
		{name: "fresh members are created at once", gen: 3, maxU: 1,
			observed: map[string]*memberResult{"a": observedAt(2, ready), "b": fresh, "c": fresh, "d": observedAt(2, ready)},
			want:     []string{"a", "b", "c"}},
		{name: "a forced promotion's target is not held behind its unreachable old primary", gen: 4, maxU: 1, prev: map[string]bool{"a": true},
			reachable: func(n string) bool { return n != "a" },
			switching: &fleetv1alpha1.SwitchoverStatus{Kind: fleetv1alpha1.SwitchoverForced, From: "a", To: "b", Step: fleetv1alpha1.StepPromote},
			observed:  map[string]*memberResult{"a": observedAt(3, ready), "b": observedAt(3, ready), "c": observedAt(3, ready)},
			want:      []string{"a", "b"}},
		{name: "a fenced member the rollout allowed first holds no other", gen: 4, maxU: 1, prev: map[string]bool{"a": true}, fenced: []string{"a"},
			reachable: func(n string) bool { return n != "a" },
			switching: &fleetv1alpha1.SwitchoverStatus{Kind: fleetv1alpha1.SwitchoverForced, From: "a", To: "b", Step: fleetv1alpha1.StepPromote},
			observed:  map[string]*memberResult{"a": observedAt(3, ready), "b": observedAt(3, ready), "c": observedAt(3, ready), "d": observedAt(3, ready)},
			want:      []string{"a", "b", "c"}},
		{name: "a fenced member on the generation, never Ready, holds no other", gen: 5, maxU: 1, fenced: []string{"a"},
			observed: map[string]*memberResult{"a": observedAt(5, fleetv1alpha1.ClusterPhaseUnreachable), "b": observedAt(4, ready), "c": observedAt(4, ready)},
			want:     []string{"a", "b"}},
		{name: "at Repoint every reachable member is allowed, whatever the budget", gen: 4, maxU: 1, prev: map[string]bool{"a": true},
			reachable: func(n string) bool { return n != "d" },
			switching: &fleetv1alpha1.SwitchoverStatus{Kind: fleetv1alpha1.SwitchoverForced, From: "a", To: "b", Step: fleetv1alpha1.StepRepoint},
			observed:  map[string]*memberResult{"a": observedAt(3, ready), "b": observedAt(4, ready), "c": observedAt(3, ready), "d": observedAt(3, ready)},
			want:      []string{"a", "b", "c"}},
		{name: "reachable members go first", gen: 2, maxU: 1, reachable: func(n string) bool { return n != "a" },
			observed: map[string]*memberResult{"a": observedAt(1, ready), "b": observedAt(1, ready)},
			want:     []string{"b"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			db := &fleetv1alpha1.Database{}
			db.Generation = tc.gen
			db.Spec.Rollout.MaxUnavailable = tc.maxU
			if tc.switching != nil || tc.fenced != nil {
				db.Status.Topology = &fleetv1alpha1.TopologyStatus{Switchover: tc.switching, Fenced: tc.fenced}
			}
			reach := tc.reachable
			if reach == nil {
				reach = all
			}
			got := planRollout(db, targets, tc.observed, tc.prev, reach)
			g.Expect(sortedKeys(got)).To(ConsistOf(tc.want))
		})
	}
}
