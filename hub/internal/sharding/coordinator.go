package sharding

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/cluster"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	mcmanager "sigs.k8s.io/multicluster-runtime/pkg/manager"
	"sigs.k8s.io/multicluster-runtime/pkg/manager/coordinator/sharded"
	"sigs.k8s.io/multicluster-runtime/pkg/multicluster"
	"sigs.k8s.io/multicluster-runtime/pkg/util/sanitize"

	fleetv1alpha1 "github.com/fleetdb/fleetdb/apis/v1alpha1"
	"github.com/fleetdb/fleetdb/clusters"
)

// Sharding (--sharding): every member is owned by one hub replica, the one
// holding the member's fence Lease ShardFencePrefix-<member> in the hub
// namespace; member syncs and member watches run on the owner only.
// multicluster-runtime's sharded coordinator (v0.24.1, experimental) decides
// who should own a member (rendezvous hashing over the live peers) and takes
// the fence; this file is the one place that configures it, with the
// durations pinned here.
//
// Takeover of a SIGKILLed replica's members: its peer Lease expires after
// ShardPeerTTL and the survivors see that within ShardPeerRenew; its fences
// expire ShardFenceDuration after their last renewal; a survivor tries every
// ShardProbe. So the worst case is max(ShardPeerTTL+ShardPeerRenew,
// ShardFenceDuration) + ShardProbe = 17 s, then the new owner connects its
// watches and syncs the member's Databases.
const (
	// ShardFencePrefix names the per-member fence Leases ("fleetdb-shard-<member>").
	ShardFencePrefix = "fleetdb-shard"
	// ShardPeerPrefix names the replicas' peer Leases ("fleetdb-peer-<replica>").
	ShardPeerPrefix = "fleetdb-peer"
	// ShardFenceDuration is a fence's lifetime after its last renewal.
	ShardFenceDuration = 15 * time.Second
	// ShardFenceRenew is how often an owner renews each fence: one small
	// hub write per member and period, also at rest.
	ShardFenceRenew = 5 * time.Second
	// ShardFenceThrottle spaces out failed attempts on one fence.
	ShardFenceThrottle = time.Second
	// ShardProbe is the coordinator's decision loop.
	ShardProbe = 2 * time.Second
	// ShardPeerTTL is a peer Lease's lifetime after its last renewal;
	// ShardPeerRenew how often a replica renews it and lists the others.
	ShardPeerTTL   = 9 * time.Second
	ShardPeerRenew = 3 * time.Second
	// shardCallTimeout bounds every Lease call: an owner that cannot renew
	// gives its members up after ShardFenceRenew+shardCallTimeout, well
	// before another replica may take the fence (ShardFenceDuration).
	shardCallTimeout = 4 * time.Second
)

// Coordinator is the sharded coordinator, pinned and wrapped: its loop
// runs on every replica (not only the elected leader), and it tells which
// members this replica owns now.
type Coordinator struct {
	*sharded.Coordinator
	self  string
	peers *peerRegistry

	mu    sync.Mutex
	owned map[string]context.Context
	// onOwned is called (outside the lock) when this replica starts owning a member.
	onOwned func(cluster string)
}

var _ mcmanager.Coordinator = &Coordinator{}

// newCoordinator builds the coordinator for replica replicaID; its
// Leases live in namespace and are written with an uncached client whose
// calls are bounded by shardCallTimeout.
func newCoordinator(cfg *rest.Config, c client.Options, namespace, replicaID string, log logr.Logger) (*Coordinator, error) {
	lc := rest.CopyConfig(cfg)
	lc.Timeout = shardCallTimeout
	kube, err := client.New(lc, c)
	if err != nil {
		return nil, err
	}
	log = log.WithName("shards")
	self := sanitize.DNS1123(replicaID)
	peers := newPeerRegistry(kube, namespace, self, log)
	sc := &Coordinator{self: self, peers: peers, owned: map[string]context.Context{}}
	sc.Coordinator = sharded.New(kube, log,
		sharded.WithShardLease(namespace, ShardFencePrefix),
		sharded.WithPerClusterLease(true),
		sharded.WithLeaseTimings(ShardFenceDuration, ShardFenceRenew, ShardFenceThrottle),
		sharded.WithSynchronizationIntervals(ShardProbe, 15*time.Second),
		sharded.WithPeerRegistry(peers),
	)
	// The ownership record is engaged first, before any controller.
	sc.AddAware(ownershipAware{sc})
	return sc, nil
}

// Runnable is the coordinator's loop, run on every replica.
func (s *Coordinator) Runnable() manager.Runnable {
	return leaderless{s.Coordinator.Runnable()}
}

// Owns reports whether this replica holds the member's fence now.
func (s *Coordinator) Owns(cluster string) bool {
	_, ok := s.Ownership(cluster)
	return ok
}

// Ownership is the context of this replica's ownership of the member: it
// ends when the fence is lost or handed over.
func (s *Coordinator) Ownership(cluster string) (context.Context, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	ctx, ok := s.owned[cluster]
	return ctx, ok && ctx.Err() == nil
}

// ownershipAware records the members the coordinator engages on this
// replica: from Engage until the engagement's context ends (fence lost or
// handed over, member removed).
type ownershipAware struct{ s *Coordinator }

func (o ownershipAware) Engage(ctx context.Context, name multicluster.ClusterName, _ cluster.Cluster) error {
	s, cluster := o.s, string(name)
	s.mu.Lock()
	s.owned[cluster] = ctx
	onOwned := s.onOwned
	s.mu.Unlock()
	go func() {
		<-ctx.Done()
		s.mu.Lock()
		if s.owned[cluster] == ctx {
			delete(s.owned, cluster)
		}
		s.mu.Unlock()
	}()
	if onOwned != nil {
		onOwned(cluster)
	}
	return nil
}

// leaderless runs a Runnable on every replica, leader or not.
type leaderless struct{ manager.Runnable }

func (leaderless) NeedLeaderElection() bool { return false }

// leaderlessFunc is a RunnableFunc run on every replica.
func leaderlessFunc(f func(context.Context) error) manager.Runnable {
	return leaderless{manager.RunnableFunc(f)}
}

// ownedOnly is the multicluster provider as the manager sees it under
// sharding: without its Start, which NewManager runs on every replica
// itself (the manager would run it on the elected leader only).
type ownedOnly struct{ p multicluster.Provider }

func (o ownedOnly) Get(ctx context.Context, name multicluster.ClusterName) (cluster.Cluster, error) {
	return o.p.Get(ctx, name)
}

func (o ownedOnly) IndexField(ctx context.Context, obj client.Object, field string, extract client.IndexerFunc) error {
	return o.p.IndexField(ctx, obj, field, extract)
}

// NewMCManager is the multicluster manager of a sharded hub: the sharded
// coordinator engages members with the controllers, and the provider runs
// on every replica, its MemberCluster status written by the elected leader
// only. The coordinator's Leases live in namespace.
func NewMCManager(hubCfg *rest.Config, provider *clusters.Provider, mopts manager.Options, log logr.Logger, replicaID, namespace string) (mcmanager.Manager, *Coordinator, error) {
	CacheOptions(&mopts.Cache, namespace)
	if log.GetSink() == nil {
		log = ctrl.Log // the manager's default too
	}
	coord, err := newCoordinator(hubCfg, client.Options{Scheme: mopts.Scheme}, namespace, replicaID, log)
	if err != nil {
		return nil, nil, fmt.Errorf("sharded coordinator: %w", err)
	}
	mgr, err := mcmanager.New(hubCfg, ownedOnly{provider}, mopts, mcmanager.WithCoordinator(coord))
	if err != nil {
		return nil, nil, err
	}
	local := mgr.GetLocalManager()
	provider.SetStatusWriter(func() bool {
		select {
		case <-local.Elected():
			return true
		default:
			return false
		}
	})
	if err := local.Add(leaderlessFunc(func(ctx context.Context) error { return provider.Start(ctx, mgr) })); err != nil {
		return nil, nil, err
	}
	return mgr, coord, nil
}

// Self is this replica's identity (on the placement reports it writes).
func (s *Coordinator) Self() string { return s.self }

// OnOwned sets what is called (outside the lock) when this replica starts
// owning a member.
func (s *Coordinator) OnOwned(f func(cluster string)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.onOwned = f
}

// CacheOptions keeps the hub's cache of placements to the hub namespace.
func CacheOptions(o *cache.Options, namespace string) {
	if o.ByObject == nil {
		o.ByObject = map[client.Object]cache.ByObject{}
	}
	o.ByObject[&fleetv1alpha1.DatabasePlacement{}] = cache.ByObject{Namespaces: map[string]cache.Config{namespace: {}}}
}

// EveryReplica is the manager as a controller built on it sees it: what it
// adds runs on every replica. multicluster-runtime's controllers do not pass
// controller-runtime's NeedLeaderElection option on, so the member sync
// controller of a sharded hub is added through it.
type EveryReplica struct{ mcmanager.Manager }

// Add adds r to run on every replica.
func (m EveryReplica) Add(r mcmanager.Runnable) error {
	return m.Manager.Add(leaderlessAware{r})
}

// leaderlessAware is a multicluster Runnable run on every replica.
type leaderlessAware struct{ mcmanager.Runnable }

func (leaderlessAware) NeedLeaderElection() bool { return false }
