package sharding

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
)

// Placements are the plans of every member×Database and the member owners'
// reports, persisted as DatabasePlacements in the hub namespace so that
// every replica can read them (see docs/sharding.md): the elected leader
// writes the specs (Publish, Forget), a member's owner writes the status
// when what it observed changed (Report): nothing is written at rest.
type Placements struct {
	// Hub is the hub's client; Namespace the hub namespace the placements live in.
	Hub       client.Client
	Namespace string
}

// placementTimeout bounds the placement writes of one plan or report.
const placementTimeout = 10 * time.Second

// PlacementName is the placement of a Database in a member (placementName).
func PlacementName(key types.NamespacedName, cluster string) string {
	return placementName(key, cluster)
}

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

func placementLabels(key types.NamespacedName) map[string]string {
	return map[string]string{
		fleetv1alpha1.LabelManagedBy:         fleetv1alpha1.ManagedByValue,
		fleetv1alpha1.LabelDatabaseNamespace: key.Namespace,
		fleetv1alpha1.LabelDatabaseName:      key.Name,
	}
}

// publishParallelism bounds the placement writes one Publish has in flight.
const publishParallelism = 16

// Publish writes the placements of a plan that changed, want by member (the
// leader), and deletes the Database's placements the plan no longer names.
// The placements are independent objects, written at once (at most
// publishParallelism in flight): one after the other, a Database on N
// members held its status write (which comes after) N hub round trips back,
// and a new leader's first status writes grew with the fleet.
func (s *Placements) Publish(ctx context.Context, key types.NamespacedName, want map[string]fleetv1alpha1.DatabasePlacementSpec) error {
	ctx, cancel := context.WithTimeout(ctx, placementTimeout)
	defer cancel()
	var (
		errs *multierror.Error
		mu   sync.Mutex
		wg   sync.WaitGroup
		slot = make(chan struct{}, publishParallelism)
	)
	for cluster, spec := range want {
		slot <- struct{}{}
		wg.Go(func() {
			defer func() { <-slot }()
			err := s.putSpec(ctx, key, cluster, spec)
			mu.Lock()
			errs = multierror.Append(errs, err)
			mu.Unlock()
		})
	}
	wg.Wait()
	var list fleetv1alpha1.DatabasePlacementList
	if err := s.Hub.List(ctx, &list, client.InNamespace(s.Namespace), client.MatchingLabels(placementLabels(key))); err != nil {
		return multierror.Append(errs, err).ErrorOrNil()
	}
	for i := range list.Items {
		if _, ok := want[list.Items[i].Spec.Cluster]; !ok {
			errs = multierror.Append(errs, client.IgnoreNotFound(s.Hub.Delete(ctx, &list.Items[i])))
		}
	}
	return errs.ErrorOrNil()
}

// putSpec creates the placement, or updates its spec when it differs.
func (s *Placements) putSpec(ctx context.Context, key types.NamespacedName, cluster string, spec fleetv1alpha1.DatabasePlacementSpec) error {
	pl := &fleetv1alpha1.DatabasePlacement{}
	name := types.NamespacedName{Namespace: s.Namespace, Name: placementName(key, cluster)}
	err := s.Hub.Get(ctx, name, pl)
	switch {
	case apierrors.IsNotFound(err):
		labels := placementLabels(key)
		labels[fleetv1alpha1.LabelPlacementCluster] = labelValue(cluster)
		pl = &fleetv1alpha1.DatabasePlacement{ObjectMeta: metav1.ObjectMeta{Namespace: name.Namespace, Name: name.Name, Labels: labels}, Spec: spec}
		err = s.Hub.Create(ctx, pl)
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
	return s.Hub.Patch(ctx, pl, patch)
}

// labelValue is a member name as a label value (at most 63 characters).
func labelValue(s string) string {
	if len(s) > 63 {
		return s[:63]
	}
	return s
}

// Forget deletes every placement of a Database that is gone.
func (s *Placements) Forget(ctx context.Context, key types.NamespacedName) error {
	ctx, cancel := context.WithTimeout(ctx, placementTimeout)
	defer cancel()
	return s.Hub.DeleteAllOf(ctx, &fleetv1alpha1.DatabasePlacement{}, client.InNamespace(s.Namespace), client.MatchingLabels(placementLabels(key)))
}

// Report writes a member's result (st, without timestamps) on its
// placement when it changed (the member's owner). A
// placement not written yet is no error: its creation wakes the member
// sync again.
func (s *Placements) Report(ctx context.Context, key types.NamespacedName, cluster string, st fleetv1alpha1.DatabasePlacementStatus) error {
	ctx, cancel := context.WithTimeout(ctx, placementTimeout)
	defer cancel()
	pl := &fleetv1alpha1.DatabasePlacement{}
	if err := s.Hub.Get(ctx, types.NamespacedName{Namespace: s.Namespace, Name: placementName(key, cluster)}, pl); err != nil {
		return client.IgnoreNotFound(err)
	}
	st.DatabaseUID = pl.Spec.Database.UID
	if apiequality.Semantic.DeepEqual(pl.Status, st) {
		return nil
	}
	patch := client.MergeFrom(pl.DeepCopy())
	pl.Status = st
	if err := s.Hub.Status().Patch(ctx, pl, patch); err != nil {
		return fmt.Errorf("reporting to placement %s: %w", pl.Name, client.IgnoreNotFound(err))
	}
	return nil
}
