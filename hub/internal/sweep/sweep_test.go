package sweep

import (
	"testing"

	. "github.com/onsi/gomega"

	"github.com/fleetdb/fleetdb/clusters"
)

// TestSweepRequests: a member is swept when it turns Ready (first connect,
// reconnect, probes passing again), not on every piece of registry news.
func TestSweepRequests(t *testing.T) {
	g := NewWithT(t)
	s := New(nil, nil, nil, nil, nil, 0)
	ready := clusters.Health{Engaged: true, Ready: true}
	down := clusters.Health{Engaged: true}
	steps := []struct {
		member string
		health clusters.Health
		sweep  bool
	}{
		{"m1", down, false},
		{"m1", ready, true},
		{"m1", ready, false},
		{"m2", ready, true},
		{"m1", clusters.Health{Ready: true}, false}, // disengaged
		{"m1", ready, true},
		{"m1", down, false},
		{"m1", ready, true},
	}
	for i, step := range steps {
		reqs := s.Requests(step.member, step.health)
		if !step.sweep {
			g.Expect(reqs).To(BeEmpty(), "step %d", i)
			continue
		}
		g.Expect(reqs).To(HaveLen(1), "step %d", i)
		g.Expect(reqs[0].Name).To(Equal(step.member))
	}
	g.Expect(s.countAttempt("m1")).To(Equal(1))
	s.Requests("m1", down)
	s.Requests("m1", ready)
	g.Expect(s.countAttempt("m1")).To(Equal(1), "a member that turns Ready again starts its attempts anew")
}
