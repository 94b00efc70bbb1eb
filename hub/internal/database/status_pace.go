package database

import (
	"time"

	apiequality "k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/types"

	fleetv1alpha1 "github.com/fleetdb/fleetdb/apis/v1alpha1"
)

// statusHoldDelay paces the routine status writes of a Database (see
// routineStatus): one is written this long after the first reconcile that
// held it back, so that a Database that turns Ready (or is gone) within that
// time never shows its steps on the way, and one that takes longer shows
// them at most once per statusHoldDelay. In a burst of new Databases the
// first reconcile of each then makes one hub round trip (finalizer and
// credentials) instead of two, and a deletion's none: the Database queue
// drains that much sooner. Ready, Degraded, Failed and a Ready Database
// leaving Ready still go out at once.
const statusHoldDelay = time.Second

// intermediatePhase: a phase on the way somewhere (or none yet).
func intermediatePhase(p fleetv1alpha1.Phase) bool {
	switch p {
	case "", fleetv1alpha1.PhasePending, fleetv1alpha1.PhaseProvisioning, fleetv1alpha1.PhaseDeleting:
		return true
	}
	return false
}

// routineStatus reports a status change that only shows a Database on its
// way: to Ready (Pending, Provisioning, from no status or another such
// step) or out (Deleting, from any phase: the deletion itself shows on the
// object at once), with no member leaving status.clusters. Only the summary may differ (phase, conditions, the
// members' entries and counts, observedGeneration, the change's trace id):
// what the hub reads back from its own status (topology, credential
// rotation, final backups, restores, members left behind) is never held.
func routineStatus(prev, next fleetv1alpha1.DatabaseStatus) bool {
	if !intermediatePhase(next.Phase) {
		return false
	}
	if next.Phase != fleetv1alpha1.PhaseDeleting && !intermediatePhase(prev.Phase) {
		return false
	}
	// A member leaving status.clusters (its teardown finished and its result
	// was dropped) is read back: the next reconcile would take it for a
	// member still to tear down.
	kept := map[string]bool{}
	for _, c := range next.Clusters {
		kept[c.Name] = true
	}
	for _, c := range prev.Clusters {
		if !kept[c.Name] {
			return false
		}
	}
	for _, s := range []*fleetv1alpha1.DatabaseStatus{&prev, &next} {
		s.ObservedGeneration, s.LastChangeTraceID, s.Phase = 0, "", ""
		s.ReadyClusters, s.TargetClusters, s.ReadySummary = 0, 0, ""
		s.Conditions, s.Clusters = nil, nil
	}
	return apiequality.Semantic.DeepEqual(prev, next)
}

// holdStatus says how long a routine status of key is still held back: it
// goes out statusHoldDelay after the first reconcile that held it since the
// last write (0: write it now).
func (s *state) holdStatus(key types.NamespacedName, now time.Time) time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	since, ok := s.statusHeld[key]
	if !ok {
		s.statusHeld[key] = now
		return statusHoldDelay
	}
	if left := since.Add(statusHoldDelay).Sub(now); left > 0 {
		return left
	}
	return 0
}

// statusSettled: key's status was written, or nothing differs any more;
// the next routine status is held anew.
func (s *state) statusSettled(key types.NamespacedName) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.statusHeld, key)
}
