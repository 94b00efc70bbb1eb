package database

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"sync"
	"time"

	"github.com/hashicorp/go-multierror"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleetv1alpha1 "github.com/fleetdb/fleetdb/apis/v1alpha1"
	"github.com/fleetdb/fleetdb/hub/internal/queue"
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
	coord     *shardCoordinator
	hub       client.Client
	namespace string
	// reporter is this replica's identity, on the statuses it writes.
	reporter string
	state    *state
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

// placementTimeout bounds the placement writes of one plan or report.
const placementTimeout = 10 * time.Second

// placementName is the placement of a Database in a member: readable, and
// unique through a hash of the three names (names may contain dots).
func placementName(key types.NamespacedName, cluster string) string {
	sum := sha256.Sum256([]byte(key.Namespace + "/" + key.Name + "/" + cluster))
	prefix := key.Namespace + "." + key.Name + "." + cluster
	if len(prefix) > 200 {
		prefix = prefix[:200]
	}
	return prefix + "-" + hex.EncodeToString(sum[:5])
}

// plan is the member sync's plan for a member from the placement the
// leader wrote; nil when there is none.
func (s *shardRuntime) plan(key types.NamespacedName, cluster string) (*plan, bool) {
	s.mu.RLock()
	e, ok := s.byName[placementName(key, cluster)]
	s.mu.RUnlock()
	if !ok {
		return nil, false
	}
	sp := e.spec
	p := &plan{uid: types.UID(sp.Database.UID), generation: sp.Generation, policy: sp.DeletionPolicy, traceparent: sp.Traceparent,
		allowed: map[string]bool{}, targets: map[string]bool{}, teardown: map[string]bool{}}
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
				Traceparent: p.traceparent,
			}
		}
	}
	return out
}

func placementLabels(key types.NamespacedName) map[string]string {
	return map[string]string{
		fleetv1alpha1.LabelManagedBy:         fleetv1alpha1.ManagedByValue,
		fleetv1alpha1.LabelDatabaseNamespace: key.Namespace,
		fleetv1alpha1.LabelDatabaseName:      key.Name,
	}
}

// publish writes the plan's placements that changed (the leader) and deletes
// the Database's placements the plan no longer names.
func (s *shardRuntime) publish(ctx context.Context, key types.NamespacedName, p *plan) error {
	ctx, cancel := context.WithTimeout(ctx, placementTimeout)
	defer cancel()
	var errs *multierror.Error
	want := desiredSpecs(key, p)
	for cluster, spec := range want {
		errs = multierror.Append(errs, s.putSpec(ctx, key, cluster, spec))
	}
	var list fleetv1alpha1.DatabasePlacementList
	if err := s.hub.List(ctx, &list, client.InNamespace(s.namespace), client.MatchingLabels(placementLabels(key))); err != nil {
		return multierror.Append(errs, err).ErrorOrNil()
	}
	for i := range list.Items {
		if _, ok := want[list.Items[i].Spec.Cluster]; !ok {
			errs = multierror.Append(errs, client.IgnoreNotFound(s.hub.Delete(ctx, &list.Items[i])))
		}
	}
	return errs.ErrorOrNil()
}

// putSpec creates the placement, or updates its spec when it differs.
func (s *shardRuntime) putSpec(ctx context.Context, key types.NamespacedName, cluster string, spec fleetv1alpha1.DatabasePlacementSpec) error {
	pl := &fleetv1alpha1.DatabasePlacement{}
	name := types.NamespacedName{Namespace: s.namespace, Name: placementName(key, cluster)}
	err := s.hub.Get(ctx, name, pl)
	switch {
	case apierrors.IsNotFound(err):
		labels := placementLabels(key)
		labels[fleetv1alpha1.LabelPlacementCluster] = labelValue(cluster)
		pl = &fleetv1alpha1.DatabasePlacement{ObjectMeta: metav1.ObjectMeta{Namespace: name.Namespace, Name: name.Name, Labels: labels}, Spec: spec}
		err = s.hub.Create(ctx, pl)
		if apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("placement %s: created meanwhile; retrying", name.Name)
		}
		return err
	case err != nil:
		return err
	case apiequality.Semantic.DeepEqual(pl.Spec, spec):
		return nil
	}
	patch := client.MergeFrom(pl.DeepCopy())
	pl.Spec = spec
	return s.hub.Patch(ctx, pl, patch)
}

// labelValue is a member name as a label value (at most 63 characters).
func labelValue(s string) string {
	if len(s) > 63 {
		return s[:63]
	}
	return s
}

// forget deletes every placement of a Database that is gone.
func (s *shardRuntime) forget(ctx context.Context, key types.NamespacedName) error {
	ctx, cancel := context.WithTimeout(ctx, placementTimeout)
	defer cancel()
	return s.hub.DeleteAllOf(ctx, &fleetv1alpha1.DatabasePlacement{}, client.InNamespace(s.namespace), client.MatchingLabels(placementLabels(key)))
}

// placementStatus is what a member result reports, without timestamps.
func placementStatus(res *memberResult, reporter string) fleetv1alpha1.DatabasePlacementStatus {
	cs := res.Status
	cs.LastSyncTime = nil
	return fleetv1alpha1.DatabasePlacementStatus{Cluster: &cs, HasWorkload: res.HasWorkload, TornDown: res.TornDown,
		Unreachable: res.Unreachable, Reporter: reporter}
}

// report writes the member's result on its placement when it changed (the
// member's owner). A placement not written yet is no error: its creation
// wakes this member sync again.
func (s *shardRuntime) report(ctx context.Context, key types.NamespacedName, cluster string, res *memberResult) error {
	ctx, cancel := context.WithTimeout(ctx, placementTimeout)
	defer cancel()
	pl := &fleetv1alpha1.DatabasePlacement{}
	if err := s.hub.Get(ctx, types.NamespacedName{Namespace: s.namespace, Name: placementName(key, cluster)}, pl); err != nil {
		return client.IgnoreNotFound(err)
	}
	st := placementStatus(res, s.reporter)
	st.DatabaseUID = pl.Spec.Database.UID
	if apiequality.Semantic.DeepEqual(pl.Status, st) {
		return nil
	}
	patch := client.MergeFrom(pl.DeepCopy())
	pl.Status = st
	if err := s.hub.Status().Patch(ctx, pl, patch); err != nil {
		return fmt.Errorf("reporting to placement %s: %w", pl.Name, client.IgnoreNotFound(err))
	}
	return nil
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
