package database

import (
	"slices"

	fleetv1alpha1 "github.com/fleetdb/fleetdb/apis/v1alpha1"
)

// planRollout decides which targets may run the Database's current generation
// now (SPEC 4.7): at most spec.rollout.maxUnavailable members are changed at
// once, the next starts when those are Ready on the new generation.
//
//   - On generation 1 nothing runs yet, so every target is created at once.
//   - A target with nothing in it yet (observed Pending) is created at once: a
//     creation makes nothing unavailable.
//   - A target already on the current generation stays allowed.
//   - prevAllowed are the members allowed earlier for this same generation:
//     they stay allowed (a rollout never goes back).
//   - Members whose state is not known yet are held until the first
//     observation, so a hub restart mid-rollout does not change them all.
//   - The two ends of a switchover under way (status.topology.switchover)
//     are never held: the switchover orders their writes itself (Demote,
//     Promote, one at a time, each after the other's report), and a forced
//     promotion is run precisely when the old primary is down. Held, the
//     target of a forced promotion waited for ever behind an unreachable
//     old primary that the rollout had allowed first and that never became
//     Ready (found on real nodes: test/realdb).
//   - A member fenced by a forced promotion (status.topology.fenced) takes
//     no part of the budget: it is out of the topology by the hub's own
//     decision until it is rebuilt, not made unavailable by the rollout.
//     Counted, a lost old primary that the rollout had allowed first held
//     every other standby for ever, and with it the promotion's Repoint
//     (and, with durability Synchronous, every commit of the new primary).
//   - From a switchover's Repoint on, every reachable member is allowed:
//     the switchover cannot end before each of them follows the new primary
//     (Repoint), and the new primary's synchronous commits wait for them
//     meanwhile. A spec change made in the same edit as the switchover then
//     reaches the others at once (the switchover's own ordering, not the
//     budget, bounds what is unavailable).
func planRollout(db *fleetv1alpha1.Database, targets []string, observed map[string]*memberResult, prevAllowed map[string]bool, reachable func(string) bool) map[string]bool {
	allowed := make(map[string]bool, len(targets))
	if db.Generation <= 1 {
		for _, t := range targets {
			allowed[t] = true
		}
		return allowed
	}
	var candidates []string
	var fenced []string
	if st := db.Status.Topology; st != nil {
		fenced = st.Fenced
	}
	inFlight := 0
	for _, t := range targets {
		r := observed[t]
		counts := !slices.Contains(fenced, t)
		switch {
		case r != nil && r.Fresh():
			allowed[t] = true
		case r != nil && r.Status.ObservedGeneration == db.Generation:
			allowed[t] = true
			if r.Status.Phase != fleetv1alpha1.ClusterPhaseReady && counts {
				inFlight++
			}
		case prevAllowed[t]:
			allowed[t] = true
			if counts {
				inFlight++
			}
		case r != nil:
			candidates = append(candidates, t)
		}
	}
	// Reachable members first so an unreachable one does not stall the rollout
	// before it starts; then by name, for a deterministic order.
	slices.SortStableFunc(candidates, func(a, b string) int {
		ra, rb := reachable(a), reachable(b)
		switch {
		case ra && !rb:
			return -1
		case rb && !ra:
			return 1
		}
		if a < b {
			return -1
		}
		if a > b {
			return 1
		}
		return 0
	})
	if st := db.Status.Topology; st != nil && st.Switchover != nil {
		repoint := st.Switchover.Step == fleetv1alpha1.StepRepoint || st.Switchover.Step == fleetv1alpha1.StepDone
		for _, t := range targets {
			if t == st.Switchover.From || t == st.Switchover.To || (repoint && reachable(t)) {
				allowed[t] = true
				candidates = slices.DeleteFunc(candidates, func(c string) bool { return c == t })
			}
		}
	}
	budget := int(max(db.Spec.Rollout.MaxUnavailable, 1)) - inFlight
	for _, t := range candidates {
		if budget <= 0 {
			break
		}
		allowed[t] = true
		budget--
	}
	return allowed
}
