package dbstatus

import (
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/api/meta"

	fleetv1alpha1 "github.com/fleetdb/fleetdb/apis/v1alpha1"
	"github.com/fleetdb/fleetdb/clusters"
	"github.com/fleetdb/fleetdb/internal/placement"
)

// TestStatusAcrossHubRestart: a hub that has just started has no member
// results and has not finished connecting to the members yet; the status
// it computes for a Database the killed hub left Ready must stay Ready (and
// so unchanged: no write, no Degraded flap seen by kubectl wait or Argo
// CD), while a member whose connect failed or whose probes fail turns
// Unreachable at once. Found by the restart chaos run (docs/reports/chaos.md):
// every restart flipped Ready Databases to Degraded for a few seconds.
func TestStatusAcrossHubRestart(t *testing.T) {
	now := time.Date(2026, 12, 1, 3, 0, 0, 0, time.UTC)
	// The status the killed hub left: Ready on generation 2 in a and b.
	before := Compute(Input{
		DB: statusDB(2), Placement: placement.Result{Targets: []string{"a", "b"}}, Allowed: bothAllowed,
		Results: map[string]*Result{"a": readyResult("a", 2), "b": readyResult("b", 2)}, Unreachable: reachableAll, Now: now,
	})
	NewWithT(t).Expect(before.Phase).To(Equal(fleetv1alpha1.PhaseReady))

	for _, tc := range []struct {
		name   string
		health map[string]clusters.Health
		phase  fleetv1alpha1.Phase
	}{
		{"no member known to the registry yet", map[string]clusters.Health{}, fleetv1alpha1.PhaseReady},
		{"members connecting", map[string]clusters.Health{
			"a": {Reason: fleetv1alpha1.ReasonConnecting}, "b": {Reason: fleetv1alpha1.ReasonConnecting},
		}, fleetv1alpha1.PhaseReady},
		{"one member engaged and Ready, the other connecting", map[string]clusters.Health{
			"a": {Engaged: true, Ready: true}, "b": {Reason: fleetv1alpha1.ReasonConnecting},
		}, fleetv1alpha1.PhaseReady},
		{"a member whose connect failed", map[string]clusters.Health{
			"a": {Engaged: true, Ready: true}, "b": {Reason: "Unreachable", Message: "the member does not answer"},
		}, fleetv1alpha1.PhaseDegraded},
		{"an engaged member failing its probes", map[string]clusters.Health{
			"a": {Engaged: true, Ready: true}, "b": {Engaged: true, Reason: "ProbeFailed"},
		}, fleetv1alpha1.PhaseDegraded},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			db := statusDB(2)
			db.Status = before
			after := Compute(Input{
				DB: db, Placement: placement.Result{Targets: []string{"a", "b"}}, Allowed: bothAllowed,
				Results:     map[string]*Result{}, // nothing observed since the start
				Unreachable: func(n string) (bool, string) { return tc.health[n].StatusUnreachable() },
				Now:         now.Add(time.Second),
			})
			g.Expect(after.Phase).To(Equal(tc.phase))
			if tc.phase == fleetv1alpha1.PhaseReady {
				g.Expect(meta.IsStatusConditionTrue(after.Conditions, fleetv1alpha1.ConditionReady)).To(BeTrue())
				g.Expect(after.Clusters).To(Equal(before.Clusters), "the entries are kept as they were: no status write")
				return
			}
			g.Expect(clusterPhaseOf(after, "b")).To(Equal(fleetv1alpha1.ClusterPhaseUnreachable))
			g.Expect(clusterPhaseOf(after, "a")).To(Equal(fleetv1alpha1.ClusterPhaseReady))
		})
	}
}

// clusterPhaseOf is the phase of member name's entry ("" without one).
func clusterPhaseOf(st fleetv1alpha1.DatabaseStatus, name string) fleetv1alpha1.ClusterPhase {
	for _, c := range st.Clusters {
		if c.Name == name {
			return c.Phase
		}
	}
	return ""
}
