package hub

import (
	"fmt"
	"slices"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	fleetv1alpha1 "github.com/fleetdb/fleetdb/apis/v1alpha1"
)

// placementResult is the outcome of resolving a Database's placement.
type placementResult struct {
	// Targets are the chosen members, in deterministic order.
	Targets []string
	// Missing are named clusters that are not registered.
	Missing []string
	// Cordoned are named or selected clusters left out because they are unschedulable.
	Cordoned []string
	// Drained are named or selected clusters left out because they are
	// being drained (MemberCluster spec.drain).
	Drained []string
	// DrainHeld are draining clusters kept because they hold the primary of
	// a PrimaryStandby Database (a drain never drops a primary).
	DrainHeld []string
}

// ResolvePlacement is the hub's placement of db over members (those its
// namespace may use), given the members it is placed on now: what
// `kubectl fleetdb drain` previews. It returns the chosen members, and the
// draining members kept because they hold db's primary.
func ResolvePlacement(db *fleetv1alpha1.Database, members []fleetv1alpha1.MemberCluster, current []string) (targets, drainHeld []string, err error) {
	res, err := resolvePlacement(db, members, current)
	return res.Targets, res.DrainHeld, err
}

// holdsPrimary reports whether member is, or is becoming, the primary of a
// PrimaryStandby Database: the one in the spec or the one in the status.
func holdsPrimary(db *fleetv1alpha1.Database, member string) bool {
	if db.TopologyMode() != fleetv1alpha1.TopologyPrimaryStandby {
		return false
	}
	if t := db.Spec.Topology; t != nil && t.PrimaryCluster == member {
		return true
	}
	return db.Status.Topology != nil && db.Status.Topology.PrimaryCluster == member
}

// resolvePlacement chooses the members of a Database: the clusters named in
// spec.placement.clusterNames followed by the clusters its selector matches
// (by name), capped by maxClusters. Unschedulable members get no new
// placement but keep an existing one (current lists the members the
// Database is placed on now). Members already placed come first when the cap
// bites, so a new registration never moves a running Database.
func resolvePlacement(db *fleetv1alpha1.Database, members []fleetv1alpha1.MemberCluster, current []string) (placementResult, error) {
	var res placementResult
	p := db.Spec.Placement
	var selector labels.Selector
	if p.ClusterSelector != nil {
		s, err := metav1.LabelSelectorAsSelector(p.ClusterSelector)
		if err != nil {
			return res, fmt.Errorf("spec.placement.clusterSelector: %w", err)
		}
		selector = s
	}
	byName := make(map[string]*fleetv1alpha1.MemberCluster, len(members))
	for i := range members {
		if members[i].DeletionTimestamp.IsZero() {
			byName[members[i].Name] = &members[i]
		}
	}
	eligible := func(name string) bool {
		m := byName[name]
		if m == nil {
			return false
		}
		if m.Spec.Drain {
			if slices.Contains(current, name) && holdsPrimary(db, name) {
				res.DrainHeld = append(res.DrainHeld, name)
				return true
			}
			res.Drained = append(res.Drained, name)
			return false
		}
		if m.Spec.Unschedulable && !slices.Contains(current, name) {
			res.Cordoned = append(res.Cordoned, name)
			return false
		}
		return true
	}

	var candidates []string
	seen := map[string]bool{}
	add := func(name string) {
		if !seen[name] && eligible(name) {
			candidates = append(candidates, name)
		}
		seen[name] = true
	}
	for _, name := range p.ClusterNames {
		if byName[name] == nil {
			res.Missing = append(res.Missing, name)
			seen[name] = true
			continue
		}
		add(name)
	}
	if selector != nil {
		names := make([]string, 0, len(byName))
		for name, m := range byName {
			if selector.Matches(labels.Set(m.Labels)) {
				names = append(names, name)
			}
		}
		slices.Sort(names)
		for _, name := range names {
			add(name)
		}
	}
	if p.MaxClusters != nil && len(candidates) > int(*p.MaxClusters) {
		// Stable under the cap: members placed now first, then candidate order.
		slices.SortStableFunc(candidates, func(a, b string) int {
			ca, cb := slices.Contains(current, a), slices.Contains(current, b)
			switch {
			case ca && !cb:
				return -1
			case cb && !ca:
				return 1
			}
			return 0
		})
		candidates = candidates[:*p.MaxClusters]
	}
	res.Targets = candidates
	return res, nil
}
