package sharding

import (
	"context"
	"fmt"
	"sync"

	"sigs.k8s.io/controller-runtime/pkg/cluster"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/multicluster-runtime/pkg/multicluster"
)

// ElectedCoordinator is the coordinator of an unsharded hub whose provider
// runs on every replica (a warm standby, NewEveryReplicaManager): what runs
// on every replica (NeedLeaderElection false: the member cache warmer, the
// Secret watches) is engaged with every member at once; everything else
// (the controllers) only once this replica is elected, with the members
// engaged then and later.
//
// multicluster-runtime's basic coordinator engages everything at once. On a
// standby that queues the controllers' member watches until they start at
// election, and a member that went meanwhile leaves a watch on its stopped
// cache, which fails the controller's start and stops the hub (seen in the
// e2e suite: a member registered and removed before a fail-over).
type ElectedCoordinator struct {
	// Lost is told of a member whose engagement at election failed (its
	// cache stopped meanwhile, say); the provider reconnects it
	// (clusters.Provider.Lost). Nil: the error is dropped.
	Lost func(name string, cl cluster.Cluster, err error)

	// engaging serialises engagements: the engagements at election and a
	// member engaged (again) meanwhile never interleave, so a reconnected
	// member is never engaged with its old, dead cluster after its new one.
	engaging sync.Mutex
	mu       sync.Mutex
	always   []multicluster.Aware
	leader   []multicluster.Aware
	members  map[multicluster.ClusterName]engagedMember
	elected  bool
}

type engagedMember struct {
	ctx context.Context
	cl  cluster.Cluster
}

// NewElectedCoordinator returns an ElectedCoordinator with nothing engaged.
func NewElectedCoordinator() *ElectedCoordinator {
	return &ElectedCoordinator{members: map[multicluster.ClusterName]engagedMember{}}
}

// AddAware registers a; it runs on every replica when it says so.
func (c *ElectedCoordinator) AddAware(a multicluster.Aware) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if r, ok := a.(manager.LeaderElectionRunnable); ok && !r.NeedLeaderElection() {
		c.always = append(c.always, a)
		return
	}
	c.leader = append(c.leader, a)
}

// Engage engages the member with what runs on every replica, and with the
// rest when this replica is elected.
func (c *ElectedCoordinator) Engage(ctx context.Context, name multicluster.ClusterName, cl cluster.Cluster) error {
	c.engaging.Lock()
	defer c.engaging.Unlock()
	c.mu.Lock()
	c.members[name] = engagedMember{ctx: ctx, cl: cl}
	awares := append([]multicluster.Aware(nil), c.always...)
	if c.elected {
		awares = append(awares, c.leader...)
	}
	c.mu.Unlock()
	go func() {
		<-ctx.Done()
		c.mu.Lock()
		defer c.mu.Unlock()
		if m, ok := c.members[name]; ok && m.ctx == ctx {
			delete(c.members, name)
		}
	}()
	return engage(ctx, name, cl, awares)
}

// Runnable engages, once this replica is elected, the members engaged so
// far with what runs on the leader only.
func (c *ElectedCoordinator) Runnable() manager.Runnable {
	return manager.RunnableFunc(func(ctx context.Context) error {
		c.engaging.Lock()
		c.mu.Lock()
		c.elected = true
		leader := append([]multicluster.Aware(nil), c.leader...)
		live := map[multicluster.ClusterName]engagedMember{}
		for name, m := range c.members {
			if m.ctx.Err() == nil {
				live[name] = m
			}
		}
		c.mu.Unlock()
		for name, m := range live {
			if err := engage(m.ctx, name, m.cl, leader); err != nil && c.Lost != nil {
				c.Lost(string(name), m.cl, fmt.Errorf("engaging the member cluster at election: %w", err))
			}
		}
		c.engaging.Unlock()
		<-ctx.Done()
		return nil
	})
}

func engage(ctx context.Context, name multicluster.ClusterName, cl cluster.Cluster, awares []multicluster.Aware) error {
	for _, a := range awares {
		if err := a.Engage(ctx, name, cl); err != nil {
			return err
		}
	}
	return nil
}
