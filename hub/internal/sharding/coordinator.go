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
	"sigs.k8s.io/multicluster-runtime/pkg/manager/coordinator/sharded/sharder"
	"sigs.k8s.io/multicluster-runtime/pkg/multicluster"
	"sigs.k8s.io/multicluster-runtime/pkg/util/sanitize"

	fleetv1alpha1 "github.com/fleetdb/fleetdb/apis/v1alpha1"
	"github.com/fleetdb/fleetdb/clusters"
)

// Sharding (--sharding): every member is owned by one hub replica, the one
// named by the member's fence Lease ShardFencePrefix-<member> in the hub
// namespace while that replica's own peer Lease ShardPeerPrefix-<replica>
// is live. Member syncs and member watches run on the owner only.
//
// Which replica should own a member is rendezvous hashing (HRW, the sharder
// of multicluster-runtime v0.24.1) over the live peers; who does own it is
// the fence. A fence has no lifetime of its own: it is written only when it
// changes hands (taken, released), never renewed, so a fleet at rest writes
// nothing but one peer Lease renewal per replica and ShardPeerRenew (the
// library's coordinator renews one Lease per member: ≈ 200 writes/s at rest
// at 1,000 members). The rules:
//
//   - a replica takes a fence only when it is free (no holder), or its
//     holder's peer Lease, read right before, is expired or gone; every
//     fence write is an update at the resourceVersion read (or a create),
//     so of two replicas racing for one fence exactly one wins;
//   - a replica acts on a member only while its own peer Lease is current:
//     when a renewal has not succeeded ShardPeerRenew+shardCallTimeout after
//     the renewal time it last stored, it stops every member at once (2 s
//     before the others may see the Lease expired, ShardPeerTTL), and takes
//     each fence again, by a write, once renewed;
//   - a replica that should no longer own a member (a peer joined) stops the
//     member's syncs first, then clears the fence.
//
// Takeover of a SIGKILLed replica's members: its peer Lease expires after
// ShardPeerTTL and the survivors see that within ShardPeerRenew; the one HRW
// now picks takes the fence at once (its decision runs on every change of
// the peers, and every ShardProbe): worst case ShardPeerTTL+ShardPeerRenew =
// 12 s, then the new owner engages the member's watches and syncs its
// Databases.
const (
	// ShardFencePrefix names the per-member fence Leases ("fleetdb-shard-<member>").
	ShardFencePrefix = "fleetdb-shard"
	// ShardPeerPrefix names the replicas' peer Leases ("fleetdb-peer-<replica>").
	ShardPeerPrefix = "fleetdb-peer"
	// ShardProbe is the coordinator's periodic decision (it also decides
	// whenever the live peers change and when a member is engaged).
	ShardProbe = 2 * time.Second
	// ShardPeerTTL is a peer Lease's lifetime after its last renewal;
	// ShardPeerRenew how often a replica renews it and lists the others:
	// the one hub write per replica and period a sharded hub makes at rest.
	ShardPeerTTL   = 9 * time.Second
	ShardPeerRenew = 3 * time.Second
	// shardCallTimeout bounds every Lease call.
	shardCallTimeout = 4 * time.Second
	// shardActWindow is how long after the renewal time it last stored a
	// replica acts on its members: 2 s less than the others wait.
	shardActWindow = ShardPeerRenew + shardCallTimeout
)

// Coordinator decides which members this replica owns and engages them (the
// member sync's watches) on the owner only; its loop runs on every replica
// (not only the elected leader). It implements multicluster-runtime's
// Coordinator interface.
type Coordinator struct {
	self   string
	peers  *peerRegistry
	fences *fences
	hrw    sharder.Sharder
	log    logr.Logger
	awares []multicluster.Aware
	// kick asks the loop for a decision now.
	kick chan struct{}

	mu      sync.Mutex
	members map[string]*memberState
	owned   map[string]context.Context
	// stopping: the replica is stopping (its loop's context ended).
	stopping bool
	// onOwned is called (outside the lock) when this replica starts owning a member.
	onOwned func(cluster string)
	// onEngaged is called (in its own goroutine) when the provider engages
	// a member on this replica, owned or not (warm standby).
	onEngaged func(ctx context.Context, cluster string, cl cluster.Cluster)
}

// memberState is a member engaged by the provider on this replica.
type memberState struct {
	cl cluster.Cluster
	// ctx is the provider's engagement: it ends when the member is removed.
	ctx context.Context
	// held: the fence names this replica (as far as it knows: it took it
	// and did not clear it yet).
	held bool
	// cancel ends the ownership (the awares' context); nil when not owned.
	cancel context.CancelFunc
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
	sc := &Coordinator{
		self: self, hrw: sharder.NewHRW(), log: log, kick: make(chan struct{}, 1),
		members: map[string]*memberState{}, owned: map[string]context.Context{},
	}
	sc.peers = newPeerRegistry(kube, namespace, self, log)
	sc.peers.onChange = sc.wake
	sc.peers.onStale = sc.stopAll
	sc.fences = &fences{c: kube, namespace: namespace, self: self, peers: sc.peers}
	// The ownership record is engaged first, before any controller.
	sc.AddAware(ownershipAware{sc})
	return sc, nil
}

// AddAware registers what is engaged on the members this replica owns.
func (s *Coordinator) AddAware(a multicluster.Aware) { s.awares = append(s.awares, a) }

// Engage records a member the provider connected on this replica (every
// replica connects to every member); the next decision tells whether this
// replica owns it.
func (s *Coordinator) Engage(ctx context.Context, name multicluster.ClusterName, cl cluster.Cluster) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	cluster := string(name)
	st := &memberState{cl: cl, ctx: ctx}
	s.mu.Lock()
	if old := s.members[cluster]; old != nil {
		// Engaged again (a new connection): the fence stays; the old
		// ownership ends, the next decision starts the new one.
		st.held = old.held
		if old.cancel != nil {
			old.cancel()
		}
	}
	s.members[cluster] = st
	onEngaged := s.onEngaged
	s.mu.Unlock()
	if onEngaged != nil {
		go onEngaged(ctx, cluster, cl)
	}
	go func() {
		<-ctx.Done()
		s.wake() // the loop clears the fence of a removed member
	}()
	s.wake()
	return nil
}

// wake asks the loop for a decision now.
func (s *Coordinator) wake() {
	select {
	case s.kick <- struct{}{}:
	default:
	}
}

// Runnable is the coordinator's loop, run on every replica.
func (s *Coordinator) Runnable() manager.Runnable {
	return leaderlessFunc(s.run)
}

func (s *Coordinator) run(ctx context.Context) error {
	s.log.Info("shard coordinator starting", "peer", s.self)
	peersDone := make(chan struct{})
	pctx, stopPeers := context.WithCancel(context.WithoutCancel(ctx))
	go func() { s.peers.Run(pctx); close(peersDone) }()
	t := time.NewTicker(ShardProbe)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			// A clean stop: members stopped, fences cleared, then the peer
			// Lease deleted, so the others take the members at once.
			s.mu.Lock()
			s.stopping = true
			s.mu.Unlock()
			s.stopAll()
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*shardCallTimeout)
			s.releaseAll(rctx)
			cancel()
			stopPeers()
			<-peersDone
			return nil
		case <-t.C:
		case <-s.kick:
		}
		s.decide(ctx)
	}
}

// decide starts the members HRW gives this replica (taking their fences)
// and stops the others (clearing their fences), one member at a time.
func (s *Coordinator) decide(ctx context.Context) {
	peers := s.peers.Snapshot()
	self := s.peers.Self()
	current := s.peers.Current()
	s.mu.Lock()
	names := make([]string, 0, len(s.members))
	for n := range s.members {
		names = append(names, n)
	}
	s.mu.Unlock()
	for _, name := range names {
		s.mu.Lock()
		st := s.members[name]
		s.mu.Unlock()
		if st == nil {
			continue
		}
		s.mu.Lock()
		running, held := st.cancel != nil, st.held
		s.mu.Unlock()
		removed := st.ctx.Err() != nil
		should := current && !removed && s.hrw.ShouldOwn(name, peers, self)
		switch {
		case should && !running:
			if !s.fences.take(ctx, name) {
				continue
			}
			s.start(name, st)
		case !should && (running || held):
			s.stop(name, st)
			if !current || ctx.Err() != nil {
				continue // not clearing it without a current Lease: taken again by a write
			}
			if err := s.fences.release(ctx, name); err != nil {
				s.log.Info("Clearing a fence failed; retrying at the next decision", "cluster", name, "error", err.Error())
				continue
			}
			s.mu.Lock()
			st.held = false
			s.mu.Unlock()
		}
		s.mu.Lock()
		held = st.held
		s.mu.Unlock()
		if removed && !held {
			s.mu.Lock()
			if s.members[name] == st {
				delete(s.members, name)
			}
			s.mu.Unlock()
		}
	}
}

// start engages the awares on a member whose fence this replica just took,
// if its peer Lease is still current (taking the fence may have taken up
// to two calls' timeouts): checked under the lock stopAll takes, so a
// member started here is stopped by the stopAll of an expiring Lease.
func (s *Coordinator) start(name string, st *memberState) {
	s.mu.Lock()
	st.held = true
	if s.members[name] != st || st.ctx.Err() != nil || st.cancel != nil || s.stopping || !s.peers.Current() {
		s.mu.Unlock()
		return
	}
	ctx, cancel := context.WithCancel(st.ctx)
	st.cancel = cancel
	s.mu.Unlock()
	s.log.Info("synchronization start", "cluster", name, "peer", s.self)
	go func() {
		for _, a := range s.awares {
			if err := a.Engage(ctx, multicluster.ClusterName(name), st.cl); err != nil {
				s.log.Error(err, "Engaging an owned member failed; retrying at the next decision", "cluster", name)
				s.mu.Lock()
				if st.cancel != nil {
					st.cancel()
					st.cancel = nil
				}
				s.mu.Unlock()
				return
			}
		}
	}()
}

// stop ends this replica's ownership of a member (its syncs are cancelled);
// the fence is left as it is.
func (s *Coordinator) stop(name string, st *memberState) {
	s.mu.Lock()
	cancel := st.cancel
	st.cancel = nil
	s.mu.Unlock()
	if cancel != nil {
		cancel()
		s.log.Info("synchronization stop", "cluster", name, "peer", s.self)
	}
}

// stopAll stops every member this replica owns: its peer Lease may be
// about to expire (or it is stopping). The fences stay; each is taken
// again by a write once the Lease is current.
func (s *Coordinator) stopAll() {
	s.mu.Lock()
	if s.peers.Current() && !s.stopping {
		s.mu.Unlock()
		return // renewed meanwhile
	}
	var stopped []string
	for name, st := range s.members {
		if st.cancel != nil {
			st.cancel()
			st.cancel = nil
			stopped = append(stopped, name)
		}
	}
	s.mu.Unlock()
	if len(stopped) > 0 {
		s.log.Info("synchronization stop: this replica is stopping or its peer Lease is not current", "clusters", stopped, "peer", s.self)
	}
}

// releaseAll clears every fence this replica holds (a clean stop).
func (s *Coordinator) releaseAll(ctx context.Context) {
	s.mu.Lock()
	var held []string
	for name, st := range s.members {
		if st.held {
			held = append(held, name)
		}
	}
	s.mu.Unlock()
	for _, name := range held {
		if err := s.fences.release(ctx, name); err != nil {
			s.log.Info("Clearing a fence on stop failed; the others take it once this replica's peer Lease is gone", "cluster", name, "error", err.Error())
		}
	}
}

func peerIDs(peers []sharder.PeerInfo) []string {
	out := make([]string, len(peers))
	for i, p := range peers {
		out[i] = p.ID
	}
	return out
}

// Owns reports whether this replica holds the member's fence now.
func (s *Coordinator) Owns(cluster string) bool {
	_, ok := s.Ownership(cluster)
	return ok
}

// Ownership is the context of this replica's ownership of the member: it
// ends when the member is stopped here (handed over, this replica's peer
// Lease not current, member removed).
func (s *Coordinator) Ownership(cluster string) (context.Context, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	ctx, ok := s.owned[cluster]
	return ctx, ok && ctx.Err() == nil
}

// ownershipAware records the members the coordinator engages on this
// replica: from Engage until the engagement's context ends.
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

// withoutStart is the multicluster provider as the manager sees it when the
// provider runs on every replica: without its Start, which
// NewEveryReplicaManager runs on every replica itself (the manager would run
// it on the elected leader only).
type withoutStart struct{ p multicluster.Provider }

func (o withoutStart) Get(ctx context.Context, name multicluster.ClusterName) (cluster.Cluster, error) {
	return o.p.Get(ctx, name)
}

func (o withoutStart) IndexField(ctx context.Context, obj client.Object, field string, extract client.IndexerFunc) error {
	return o.p.IndexField(ctx, obj, field, extract)
}

// NewEveryReplicaManager is a multicluster manager whose provider runs on
// every replica, leader or not: every replica connects to and probes every
// member (reads only), and the MemberCluster status is written by the
// elected leader only. What the manager engages members with is mcOpts'
// coordinator's choice (the sharded one, or multicluster-runtime's default
// that engages every member with everything).
func NewEveryReplicaManager(hubCfg *rest.Config, provider *clusters.Provider, mopts manager.Options, mcOpts ...mcmanager.Option) (mcmanager.Manager, error) {
	mgr, err := mcmanager.New(hubCfg, withoutStart{provider}, mopts, mcOpts...)
	if err != nil {
		return nil, err
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
		return nil, err
	}
	// Once elected, the status the standby computed but did not write.
	if err := local.Add(manager.RunnableFunc(func(ctx context.Context) error {
		provider.ResyncStatus()
		<-ctx.Done()
		return nil
	})); err != nil {
		return nil, err
	}
	return mgr, nil
}

// NewMCManager is the multicluster manager of a sharded hub: the sharded
// coordinator engages members with the controllers, and the provider runs
// on every replica (NewEveryReplicaManager). The coordinator's Leases live
// in namespace.
func NewMCManager(hubCfg *rest.Config, provider *clusters.Provider, mopts manager.Options, log logr.Logger, replicaID, namespace string) (mcmanager.Manager, *Coordinator, error) {
	CacheOptions(&mopts.Cache, namespace)
	if log.GetSink() == nil {
		log = ctrl.Log // the manager's default too
	}
	coord, err := newCoordinator(hubCfg, client.Options{Scheme: mopts.Scheme}, namespace, replicaID, log)
	if err != nil {
		return nil, nil, fmt.Errorf("sharded coordinator: %w", err)
	}
	mgr, err := NewEveryReplicaManager(hubCfg, provider, mopts, mcmanager.WithCoordinator(coord))
	if err != nil {
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

// OnEngaged sets what is called, in its own goroutine, when the provider
// engages a member on this replica, whether it owns the member or not: a
// standby for the member warms what it reads (docs/sharding.md).
func (s *Coordinator) OnEngaged(f func(ctx context.Context, cluster string, cl cluster.Cluster)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.onEngaged = f
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
