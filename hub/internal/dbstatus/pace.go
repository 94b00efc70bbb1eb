package dbstatus

import (
	apiequality "k8s.io/apimachinery/pkg/api/equality"

	fleetv1alpha1 "github.com/fleetdb/fleetdb/apis/v1alpha1"
)

// intermediatePhase: a phase on the way somewhere (or none yet).
func intermediatePhase(p fleetv1alpha1.Phase) bool {
	switch p {
	case "", fleetv1alpha1.PhasePending, fleetv1alpha1.PhaseProvisioning, fleetv1alpha1.PhaseDeleting:
		return true
	}
	return false
}

// Routine reports a status change that only shows a Database on its
// way: to Ready (Pending, Provisioning, from no status or another such
// step) or out (Deleting, from any phase: the deletion itself shows on the
// object at once), with no member leaving status.clusters. Only the summary may differ (phase, conditions, the
// members' entries and counts, observedGeneration, the change's trace id):
// what the hub reads back from its own status (topology, credential
// rotation, final backups, restores, members left behind) is never held.
func Routine(prev, next fleetv1alpha1.DatabaseStatus) bool {
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
