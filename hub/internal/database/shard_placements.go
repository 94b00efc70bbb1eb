package database

import (
	"context"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleetv1alpha1 "github.com/fleetdb/fleetdb/apis/v1alpha1"
	"github.com/fleetdb/fleetdb/hub/internal/queue"
	"github.com/fleetdb/fleetdb/hub/internal/sharding"
)

// shardRuntime is what a sharded hub adds to the controllers: the plan of
// every member×Database and the member owners' reports, persisted as
// DatabasePlacements in the hub namespace, so that every replica can read
// them (see docs/sharding.md).
//
//   - The elected leader (the Database controller, sole writer of Database
//     status) writes each placement's spec when its plan changes (publish)
//     and deletes the placements a plan no longer names (and all of a
//     Database that is gone).
//   - The member's owner acts on the spec and writes the status when what
//     it observed changed (report): nothing is written at rest.
//   - Every replica watches the placements: an owner is woken by a new
//     spec, and the others (the leader among them) fold the owners'
//     reports into their in-memory results, where the status fold reads them.
type shardRuntime struct {
	coord *sharding.Coordinator
	hub   client.Client
	// store reads and writes the placements.
	store *sharding.Placements
	state *state
	// databases and members are the two controllers' queues.
	databases, members *queue.Ref
	// elected reports whether this replica is the elected leader now.
	elected func() bool

	mu     sync.RWMutex
	byName map[string]placementEntry
}

// placementEntry is a placement's spec as this replica last saw it.
type placementEntry struct {
	key     types.NamespacedName
	cluster string
	spec    fleetv1alpha1.DatabasePlacementSpec
}

// plan is the member sync's plan for a member from the placement the
// leader wrote; nil when there is none.
func (s *shardRuntime) plan(key types.NamespacedName, cluster string) (*plan, bool) {
	s.mu.RLock()
	e, ok := s.byName[sharding.PlacementName(key, cluster)]
	s.mu.RUnlock()
	if !ok {
		return nil, false
	}
	sp := e.spec
	p := &plan{uid: types.UID(sp.Database.UID), generation: sp.Generation, policy: sp.DeletionPolicy, traceparent: sp.Traceparent,
		instanceCertificate: sp.InstanceCertificate, allowed: map[string]bool{}, targets: map[string]bool{}, teardown: map[string]bool{}}
	if sp.NodeMaintenance {
		p.nodeMaintenance = map[string]bool{cluster: true}
	}
	switch sp.Role {
	case fleetv1alpha1.PlacementRoleApply:
		p.allowed[cluster], p.targets[cluster] = true, true
	case fleetv1alpha1.PlacementRoleHold:
		p.targets[cluster] = true
	case fleetv1alpha1.PlacementRoleTeardown:
		p.teardown[cluster] = true
	}
	return p, sp.FinalBackup
}

// databasesOn lists the Databases placed on (or being removed from) a member.
func (s *shardRuntime) databasesOn(cluster string) []types.NamespacedName {
	s.mu.RLock()
	defer s.mu.RUnlock()
	var out []types.NamespacedName
	for _, e := range s.byName {
		if e.cluster == cluster {
			out = append(out, e.key)
		}
	}
	return out
}

// owned wakes the member syncs of a member this replica just took over,
// once the member sync controller runs (it may start after the coordinator).
func (s *shardRuntime) owned(cluster string) {
	go func() {
		<-s.members.Ready
		for _, key := range append(s.databasesOn(cluster), s.state.databasesOn(cluster)...) {
			s.members.AddWith(cluster, key, queue.PriorityChange, 0)
		}
	}()
}

// desiredSpecs are the placements of a plan, by member.
func desiredSpecs(key types.NamespacedName, p *plan) map[string]fleetv1alpha1.DatabasePlacementSpec {
	out := map[string]fleetv1alpha1.DatabasePlacementSpec{}
	var instanceCert string
	if p.instanceTLS != nil {
		instanceCert = p.instanceTLS.Fingerprint()
	}
	for _, m := range []map[string]bool{p.targets, p.teardown} {
		for cluster := range m {
			role := fleetv1alpha1.PlacementRoleHold
			switch p.role(cluster) {
			case roleTeardown:
				role = fleetv1alpha1.PlacementRoleTeardown
			case roleApply:
				role = fleetv1alpha1.PlacementRoleApply
			}
			out[cluster] = fleetv1alpha1.DatabasePlacementSpec{
				Database: fleetv1alpha1.DatabaseRef{Namespace: key.Namespace, Name: key.Name, UID: string(p.uid)},
				Cluster:  cluster, Role: role, Generation: p.generation, DeletionPolicy: p.policy,
				FinalBackup: p.finalBackup != nil && p.finalBackup.policy != fleetv1alpha1.FinalBackupSkip,
				Traceparent: p.traceparent, InstanceCertificate: instanceCert, NodeMaintenance: p.nodeMaintenance[cluster],
			}
		}
	}
	return out
}

// placementStatus is what a member result reports, without timestamps.
func placementStatus(res *memberResult, reporter string) fleetv1alpha1.DatabasePlacementStatus {
	cs := res.Status
	cs.LastSyncTime = nil
	return fleetv1alpha1.DatabasePlacementStatus{Cluster: &cs, HasWorkload: res.HasWorkload, TornDown: res.TornDown,
		Unreachable: res.Unreachable, Reporter: reporter}
}

// resultOf is a placement's report as a member result; nil without one (or
// with one about another incarnation of the Database).
func resultOf(pl *fleetv1alpha1.DatabasePlacement) *memberResult {
	if pl.Status.Cluster == nil || pl.Status.DatabaseUID != pl.Spec.Database.UID {
		return nil
	}
	return &memberResult{Status: *pl.Status.Cluster, HasWorkload: pl.Status.HasWorkload, TornDown: pl.Status.TornDown,
		Unreachable: pl.Status.Unreachable, At: time.Now()}
}

// publish writes the plan's placements (the leader).
func (s *shardRuntime) publish(ctx context.Context, key types.NamespacedName, p *plan) error {
	return s.store.Publish(ctx, key, desiredSpecs(key, p))
}

// report writes the member's result on its placement when it changed (the member's owner).
func (s *shardRuntime) report(ctx context.Context, key types.NamespacedName, cluster string, res *memberResult) error {
	return s.store.Report(ctx, key, cluster, placementStatus(res, s.coord.Self()))
}
