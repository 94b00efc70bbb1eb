package database

import (
	"context"

	"sigs.k8s.io/controller-runtime/pkg/client"

	fleetv1alpha1 "github.com/fleetdb/fleetdb/apis/v1alpha1"
	"github.com/fleetdb/fleetdb/clusters"
	"github.com/fleetdb/fleetdb/internal/telemetry"
)

// fleetSource is what the fleet gauges are computed from: the hub cache, the
// controllers' in-memory state and the registry.
type fleetSource struct {
	hub      client.Reader
	state    *state
	provider *clusters.Provider
}

var _ telemetry.FleetSource = &fleetSource{}

// Fleet implements telemetry.FleetSource. Reads come from the hub cache; a
// cache that has not started yet gives no series rather than wrong zeros.
func (src *fleetSource) Fleet(ctx context.Context) telemetry.Fleet {
	var f telemetry.Fleet
	var dbs fleetv1alpha1.DatabaseList
	if err := src.hub.List(ctx, &dbs, client.UnsafeDisableDeepCopy); err == nil {
		f.Databases = map[fleetv1alpha1.Phase]int{}
		for i := range dbs.Items {
			p := dbs.Items[i].Status.Phase
			if p == "" {
				p = fleetv1alpha1.PhasePending
			}
			f.Databases[p]++
		}
	}
	var members fleetv1alpha1.MemberClusterList
	if err := src.hub.List(ctx, &members, client.UnsafeDisableDeepCopy); err == nil {
		f.Reachable = map[string]bool{}
		for i := range members.Items {
			name := members.Items[i].Name
			h := src.provider.Health(name)
			if !h.Engaged && h.Since.IsZero() {
				// Not (yet) known to this instance's registry, e.g. a standby replica.
				continue
			}
			f.Reachable[name] = h.Engaged && h.Ready
		}
	}
	f.TeardownWaiting = src.state.teardownWaitingOn(func(cluster string) bool { return !src.provider.Health(cluster).Ready })
	return f
}

// teardownWaitingOn counts the Databases whose plan tears down at least one
// member that down reports unreachable. Plans only hold members that still
// block: one unreachable past spec.teardown.unreachableTimeout has left them.
func (s *state) teardownWaitingOn(down func(cluster string) bool) int {
	s.mu.RLock()
	teardowns := make([][]string, 0, len(s.plans))
	for _, p := range s.plans {
		if len(p.teardown) > 0 {
			teardowns = append(teardowns, sortedKeys(p.teardown))
		}
	}
	s.mu.RUnlock()
	n := 0
	for _, members := range teardowns {
		for _, m := range members {
			if down(m) {
				n++
				break
			}
		}
	}
	return n
}
