package sharding

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"sigs.k8s.io/controller-runtime/pkg/cluster"
	"sigs.k8s.io/multicluster-runtime/pkg/multicluster"
)

// recordingAware records the members it is engaged with.
type recordingAware struct {
	fail    bool
	mu      sync.Mutex
	engaged []string
}

func (a *recordingAware) Engage(_ context.Context, name multicluster.ClusterName, _ cluster.Cluster) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.engaged = append(a.engaged, string(name))
	if a.fail {
		return errors.New("cache stopped")
	}
	return nil
}

func (a *recordingAware) got() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]string(nil), a.engaged...)
}

// everyReplicaAware is what runs on every replica.
type everyReplicaAware struct{ *recordingAware }

func (everyReplicaAware) NeedLeaderElection() bool { return false }

// TestElectedCoordinator: on a standby, what runs on every replica is
// engaged with every member at once and the controllers with none; at
// election the controllers are engaged with the members live then (not with
// one that went before), and later members with both; a failed engagement
// at election is handed to Lost.
func TestElectedCoordinator(t *testing.T) {
	g := NewWithT(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	c := NewElectedCoordinator()
	var lost []string
	var lostMu sync.Mutex
	c.Lost = func(name string, _ cluster.Cluster, _ error) {
		lostMu.Lock()
		defer lostMu.Unlock()
		lost = append(lost, name)
	}
	warm := &recordingAware{}
	ctrl := &recordingAware{}
	c.AddAware(everyReplicaAware{warm})
	c.AddAware(ctrl)

	m1, m1Cancel := context.WithCancel(ctx)
	defer m1Cancel()
	gone, goneCancel := context.WithCancel(ctx)
	g.Expect(c.Engage(m1, "m1", nil)).To(Succeed())
	g.Expect(c.Engage(gone, "gone", nil)).To(Succeed())
	g.Expect(warm.got()).To(ConsistOf("m1", "gone"))
	g.Expect(ctrl.got()).To(BeEmpty(), "a standby engages no controller")
	goneCancel()

	elected := make(chan error, 1)
	go func() { elected <- c.Runnable().Start(ctx) }()
	g.Eventually(ctrl.got).Should(ConsistOf("m1"), "the live member, not the one that went")
	g.Consistently(ctrl.got, 200*time.Millisecond).Should(ConsistOf("m1"))

	g.Expect(c.Engage(ctx, "m3", nil)).To(Succeed())
	g.Expect(warm.got()).To(ConsistOf("m1", "gone", "m3"))
	g.Expect(ctrl.got()).To(ConsistOf("m1", "m3"))

	// A second coordinator whose controller fails to engage at election.
	c2 := NewElectedCoordinator()
	c2.Lost = c.Lost
	c2.AddAware(&recordingAware{fail: true})
	g.Expect(c2.Engage(ctx, "m4", nil)).To(Succeed())
	go func() { _ = c2.Runnable().Start(ctx) }()
	g.Eventually(func() []string {
		lostMu.Lock()
		defer lostMu.Unlock()
		return append([]string(nil), lost...)
	}).Should(Equal([]string{"m4"}))

	cancel()
	g.Eventually(elected).Should(Receive(BeNil()))
}
