package hub

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	fleetv1alpha1 "github.com/fleetdb/fleetdb/apis/v1alpha1"
)

// maxNamesInMessage bounds how many member names a condition message lists,
// so the status stays small on large fleets.
const maxNamesInMessage = 10

// statusInput is everything the status of a Database is computed from.
type statusInput struct {
	db        *fleetv1alpha1.Database
	placement placementResult
	// teardown are members being torn down (dropped from placement, or all on deletion).
	teardown []string
	// allowed are targets the rollout lets run the current generation.
	allowed map[string]bool
	results map[string]*memberResult
	// unreachable reports a member the registry cannot reach, with why.
	unreachable func(cluster string) (bool, string)
	now         time.Time
}

// computeStatus folds member observations into the Database's status. It is
// pure: the same input gives the same status, so an unchanged fleet gives an
// unchanged status and no write.
func computeStatus(in statusInput) fleetv1alpha1.DatabaseStatus {
	db := in.db
	gen := db.Generation
	deleting := !db.DeletionTimestamp.IsZero()
	prev := map[string]fleetv1alpha1.ClusterStatus{}
	for _, c := range db.Status.Clusters {
		prev[c.Name] = c
	}

	st := fleetv1alpha1.DatabaseStatus{ObservedGeneration: gen, Conditions: slices.Clone(db.Status.Conditions)}
	var ready, unreachable, conflict, degraded, progressing []string
	entry := func(name string, tearingDown bool) fleetv1alpha1.ClusterStatus {
		r := in.results[name]
		cs := fleetv1alpha1.ClusterStatus{Name: name, Phase: fleetv1alpha1.ClusterPhasePending}
		if r != nil {
			cs = r.Status
			cs.Name = name
		} else if p, ok := prev[name]; ok {
			// Not observed since the hub started: keep what was reported.
			cs = p
		}
		if down, why := in.unreachable(name); down || (r != nil && r.Unreachable) {
			if why == "" && r != nil {
				why = r.Status.Message
			}
			cs.Phase = fleetv1alpha1.ClusterPhaseUnreachable
			cs.Message = truncate("member unreachable: " + why)
		}
		if tearingDown && cs.Phase != fleetv1alpha1.ClusterPhaseUnreachable {
			cs.Phase = fleetv1alpha1.ClusterPhaseDeleting
			if cs.Message == "" {
				cs.Message = "removing the Database from this member"
			}
		}
		if !tearingDown && cs.Phase == fleetv1alpha1.ClusterPhaseReady && cs.ObservedGeneration != gen {
			cs.Phase = fleetv1alpha1.ClusterPhaseProvisioning
			cs.Message = fmt.Sprintf("running generation %d, rolling out %d", cs.ObservedGeneration, gen)
		}
		if !tearingDown && !in.allowed[name] && cs.ObservedGeneration != gen && cs.Phase != fleetv1alpha1.ClusterPhaseUnreachable && cs.Phase != fleetv1alpha1.ClusterPhaseConflict {
			cs.Message = fmt.Sprintf("waiting for the rollout (maxUnavailable %d) to reach this member", db.Spec.Rollout.MaxUnavailable)
		}
		// lastSyncTime moves only when the entry changes, so a steady fleet writes nothing.
		if p, ok := prev[name]; ok && sameEntry(p, cs) {
			cs.LastSyncTime = p.LastSyncTime
		}
		return cs
	}

	for _, name := range in.placement.Targets {
		cs := entry(name, deleting)
		st.Clusters = append(st.Clusters, cs)
		switch cs.Phase {
		case fleetv1alpha1.ClusterPhaseReady:
			ready = append(ready, name)
		case fleetv1alpha1.ClusterPhaseUnreachable:
			unreachable = append(unreachable, name)
		case fleetv1alpha1.ClusterPhaseConflict:
			conflict = append(conflict, name)
		case fleetv1alpha1.ClusterPhaseDegraded:
			degraded = append(degraded, name)
		default:
			progressing = append(progressing, name)
		}
	}
	for _, name := range in.teardown {
		if slices.Contains(in.placement.Targets, name) {
			continue
		}
		cs := entry(name, true)
		st.Clusters = append(st.Clusters, cs)
		if cs.Phase == fleetv1alpha1.ClusterPhaseUnreachable {
			unreachable = append(unreachable, name)
		}
	}
	slices.SortFunc(st.Clusters, func(a, b fleetv1alpha1.ClusterStatus) int { return strings.Compare(a.Name, b.Name) })

	targets := len(in.placement.Targets)
	st.TargetClusters = int32(targets)
	st.ReadyClusters = int32(len(ready))
	st.ReadySummary = fmt.Sprintf("%d/%d", len(ready), targets)

	set := func(t string, status metav1.ConditionStatus, reason, msg string) {
		meta.SetStatusCondition(&st.Conditions, metav1.Condition{
			Type: t, Status: status, Reason: reason, Message: truncate(msg), ObservedGeneration: gen,
		})
	}

	// Placed.
	if targets == 0 {
		msg := "placement selects no member cluster"
		if len(in.placement.Missing) > 0 {
			msg += "; not registered: " + names(in.placement.Missing)
		}
		if len(in.placement.Cordoned) > 0 {
			msg += "; unschedulable: " + names(in.placement.Cordoned)
		}
		set(fleetv1alpha1.ConditionPlaced, metav1.ConditionFalse, fleetv1alpha1.ReasonNoMatchingClusters, msg)
	} else {
		msg := fmt.Sprintf("placed on %d member(s): %s", targets, names(in.placement.Targets))
		if len(in.placement.Missing) > 0 {
			msg += "; not registered: " + names(in.placement.Missing)
		}
		set(fleetv1alpha1.ConditionPlaced, metav1.ConditionTrue, fleetv1alpha1.ReasonPlaced, msg)
	}

	// Degraded.
	var problems []string
	if len(unreachable) > 0 {
		problems = append(problems, "unreachable: "+names(unreachable))
	}
	if len(conflict) > 0 {
		problems = append(problems, "conflict with objects fleetdb does not own: "+names(conflict))
	}
	if len(degraded) > 0 {
		problems = append(problems, "failing: "+names(degraded))
	}
	if len(problems) > 0 {
		set(fleetv1alpha1.ConditionDegraded, metav1.ConditionTrue, fleetv1alpha1.ReasonMembersDegraded, strings.Join(problems, "; "))
	} else {
		set(fleetv1alpha1.ConditionDegraded, metav1.ConditionFalse, fleetv1alpha1.ReasonAsExpected, "no member is degraded")
	}

	// Ready, Progressing/Reconciling.
	allReady := targets > 0 && len(ready) == targets && len(in.teardown) == 0 && !deleting
	switch {
	case deleting:
		set(fleetv1alpha1.ConditionReady, metav1.ConditionFalse, fleetv1alpha1.ReasonTeardown, "the Database is being deleted")
	case allReady:
		set(fleetv1alpha1.ConditionReady, metav1.ConditionTrue, fleetv1alpha1.ReasonReady,
			fmt.Sprintf("generation %d is ready on all %d member(s)", gen, targets))
	case targets == 0:
		set(fleetv1alpha1.ConditionReady, metav1.ConditionFalse, fleetv1alpha1.ReasonNoMatchingClusters, "no member cluster is placed")
	default:
		set(fleetv1alpha1.ConditionReady, metav1.ConditionFalse, fleetv1alpha1.ReasonProgressing,
			fmt.Sprintf("%d of %d member(s) ready on generation %d", len(ready), targets, gen))
	}
	inProgress := !allReady && !deleting && targets > 0 && len(progressing)+len(in.teardown) > 0
	if inProgress {
		reason := fleetv1alpha1.ReasonProgressing
		msg := fmt.Sprintf("moving to generation %d: %s", gen, names(progressing))
		if len(in.teardown) > 0 {
			msg += "; removing from: " + names(in.teardown)
		}
		if len(in.allowed) < targets {
			reason = fleetv1alpha1.ReasonRollingOut
		}
		set(fleetv1alpha1.ConditionProgressing, metav1.ConditionTrue, reason, msg)
		set(fleetv1alpha1.ConditionReconciling, metav1.ConditionTrue, reason, msg)
	} else {
		set(fleetv1alpha1.ConditionProgressing, metav1.ConditionFalse, fleetv1alpha1.ReasonAsExpected, "nothing in progress")
		meta.RemoveStatusCondition(&st.Conditions, fleetv1alpha1.ConditionReconciling)
	}

	// Stalled is owned by the reconciler for terminal errors; a pass that got
	// this far has none.
	meta.RemoveStatusCondition(&st.Conditions, fleetv1alpha1.ConditionStalled)

	if deleting {
		set(fleetv1alpha1.ConditionDeleting, metav1.ConditionTrue, fleetv1alpha1.ReasonTeardown,
			"removing the Database from: "+names(in.teardown))
	} else {
		meta.RemoveStatusCondition(&st.Conditions, fleetv1alpha1.ConditionDeleting)
	}

	st.Phase = phaseOf(deleting, allReady, targets, len(problems) > 0)
	return st
}

func phaseOf(deleting, ready bool, targets int, degraded bool) fleetv1alpha1.Phase {
	switch {
	case deleting:
		return fleetv1alpha1.PhaseDeleting
	case ready:
		return fleetv1alpha1.PhaseReady
	case degraded:
		return fleetv1alpha1.PhaseDegraded
	case targets == 0:
		return fleetv1alpha1.PhasePending
	}
	return fleetv1alpha1.PhaseProvisioning
}

// sameEntry compares two cluster entries without their timestamps.
func sameEntry(a, b fleetv1alpha1.ClusterStatus) bool {
	a.LastSyncTime, b.LastSyncTime = nil, nil
	return a == b
}

// names lists member names for a message, bounded.
func names(list []string) string {
	if len(list) <= maxNamesInMessage {
		return strings.Join(list, ", ")
	}
	return fmt.Sprintf("%s and %d more", strings.Join(list[:maxNamesInMessage], ", "), len(list)-maxNamesInMessage)
}

// truncate bounds a message for the status.
func truncate(s string) string {
	const limit = 480
	if len(s) <= limit {
		return s
	}
	return s[:limit] + "..."
}

// stalledStatus is the status of a Database that cannot be acted on.
func stalledStatus(db *fleetv1alpha1.Database, reason, msg string) fleetv1alpha1.DatabaseStatus {
	st := *db.Status.DeepCopy()
	gen := db.Generation
	st.ObservedGeneration = gen
	st.Phase = fleetv1alpha1.PhaseFailed
	for _, c := range []metav1.Condition{
		{Type: fleetv1alpha1.ConditionStalled, Status: metav1.ConditionTrue, Reason: reason, Message: truncate(msg)},
		{Type: fleetv1alpha1.ConditionReady, Status: metav1.ConditionFalse, Reason: reason, Message: truncate(msg)},
		{Type: fleetv1alpha1.ConditionReconciling, Status: metav1.ConditionFalse, Reason: reason, Message: "retrying cannot fix this; change the Database"},
	} {
		c.ObservedGeneration = gen
		meta.SetStatusCondition(&st.Conditions, c)
	}
	return st
}
