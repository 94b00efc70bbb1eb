package dbstatus

import (
	"fmt"
	"slices"
	"strings"
	"time"

	fleetv1alpha1 "github.com/fleetdb/fleetdb/apis/v1alpha1"
	"github.com/fleetdb/fleetdb/internal/placement"
	"github.com/fleetdb/fleetdb/internal/statusmsg"
)

// Input is everything the status of a Database is computed from.
type Input struct {
	DB        *fleetv1alpha1.Database
	Placement placement.Result
	// Teardown are members being torn down (dropped from placement, or all on deletion).
	Teardown []string
	// Allowed are targets the rollout lets run the current generation.
	Allowed map[string]bool
	Results map[string]*Result
	// Unreachable reports a member the registry cannot reach, with why.
	Unreachable func(cluster string) (bool, string)
	Now         time.Time
	// ChangeTraceID is the trace ID of the change the published plan
	// belongs to ("" when none).
	ChangeTraceID string
}

// LastChangeTraceID is status.lastChangeTraceID: kept while the generation
// it was taken for is the observed one (a hub restart starts new traces for
// the same change, which must not rewrite the status), else the trace of the
// change now published (traceID; "": none).
func LastChangeTraceID(db *fleetv1alpha1.Database, traceID string) string {
	if db.Status.LastChangeTraceID != "" && db.Status.ObservedGeneration == db.Generation {
		return db.Status.LastChangeTraceID
	}
	if traceID != "" {
		return traceID
	}
	return db.Status.LastChangeTraceID
}

// memberTally sorts the members of a status by what they count towards;
// the condition setters read it.
type memberTally struct {
	deleting bool
	// targets are the placed members; teardown those being removed.
	targets, teardown []string
	// allowed counts the targets the rollout lets run the current generation.
	allowed int
	// The placed members by phase (unreachable also lists members being removed).
	ready, unreachable, conflict, degraded, progressing []string
}

// allReady: every placed member is ready on the current generation and
// nothing is being removed.
func (t memberTally) allReady() bool {
	return len(t.targets) > 0 && len(t.ready) == len(t.targets) && len(t.teardown) == 0 && !t.deleting
}

// problems name the members that degrade the Database, by kind.
func (t memberTally) problems() []string {
	var out []string
	if len(t.unreachable) > 0 {
		out = append(out, "unreachable: "+names(t.unreachable))
	}
	if len(t.conflict) > 0 {
		out = append(out, "conflict with objects fleetdb does not own: "+names(t.conflict))
	}
	if len(t.degraded) > 0 {
		out = append(out, "failing: "+names(t.degraded))
	}
	return out
}

// Compute folds member observations into the Database's status. It is
// pure: the same input gives the same status, so an unchanged fleet gives an
// unchanged status and no write. Each condition has its setter
// (conditions.go); the phase is derived from the conditions.
func Compute(in Input) fleetv1alpha1.DatabaseStatus {
	db := in.DB
	st := fleetv1alpha1.DatabaseStatus{ObservedGeneration: db.Generation, Conditions: slices.Clone(db.Status.Conditions),
		LastChangeTraceID: LastChangeTraceID(db, in.ChangeTraceID)}
	var t memberTally
	st.Clusters, t = memberEntries(in)
	st.TargetClusters = int32(len(t.targets))
	st.ReadyClusters = int32(len(t.ready))
	st.ReadySummary = fmt.Sprintf("%d/%d", len(t.ready), len(t.targets))

	setPlacedCondition(&st, in.Placement)
	setDegradedCondition(&st, t)
	setReadyCondition(&st, t)
	setReconcilingCondition(&st, t)
	setDeletingCondition(&st, t)
	// A pass that got this far met no terminal error.
	clearStalledCondition(&st)
	st.Phase = phaseOf(st.Conditions)
	return st
}

// memberEntries builds the status.clusters entries, sorted by name, and
// tallies them.
func memberEntries(in Input) ([]fleetv1alpha1.ClusterStatus, memberTally) {
	deleting := !in.DB.DeletionTimestamp.IsZero()
	t := memberTally{deleting: deleting, targets: in.Placement.Targets, teardown: in.Teardown, allowed: len(in.Allowed)}
	prev := map[string]fleetv1alpha1.ClusterStatus{}
	for _, c := range in.DB.Status.Clusters {
		prev[c.Name] = c
	}
	var entries []fleetv1alpha1.ClusterStatus
	for _, name := range in.Placement.Targets {
		cs := clusterEntry(in, prev, name, deleting)
		entries = append(entries, cs)
		switch cs.Phase {
		case fleetv1alpha1.ClusterPhaseReady:
			t.ready = append(t.ready, name)
		case fleetv1alpha1.ClusterPhaseUnreachable:
			t.unreachable = append(t.unreachable, name)
		case fleetv1alpha1.ClusterPhaseConflict:
			t.conflict = append(t.conflict, name)
		case fleetv1alpha1.ClusterPhaseDegraded:
			t.degraded = append(t.degraded, name)
		default:
			t.progressing = append(t.progressing, name)
		}
	}
	for _, name := range in.Teardown {
		if slices.Contains(in.Placement.Targets, name) {
			continue
		}
		cs := clusterEntry(in, prev, name, true)
		entries = append(entries, cs)
		if cs.Phase == fleetv1alpha1.ClusterPhaseUnreachable {
			t.unreachable = append(t.unreachable, name)
		}
	}
	slices.SortFunc(entries, func(a, b fleetv1alpha1.ClusterStatus) int { return strings.Compare(a.Name, b.Name) })
	return entries, t
}

// clusterEntry is one member's status entry: its last result (or what the
// status said before the hub started), overridden by what the hub knows
// better: the member is unreachable, being torn down, behind the current
// generation or held by the rollout.
func clusterEntry(in Input, prev map[string]fleetv1alpha1.ClusterStatus, name string, tearingDown bool) fleetv1alpha1.ClusterStatus {
	gen := in.DB.Generation
	r := in.Results[name]
	cs := fleetv1alpha1.ClusterStatus{Name: name, Phase: fleetv1alpha1.ClusterPhasePending}
	if r != nil {
		cs = r.Status
		cs.Name = name
	} else if p, ok := prev[name]; ok {
		// Not observed since the hub started: keep what was reported.
		cs = p
	}
	if down, why := in.Unreachable(name); down || (r != nil && r.Unreachable) {
		if why == "" && r != nil {
			why = r.Status.Message
		}
		cs.Phase = fleetv1alpha1.ClusterPhaseUnreachable
		cs.Message = statusmsg.Bound("member unreachable: " + why)
	}
	switch {
	case tearingDown:
		if cs.Phase != fleetv1alpha1.ClusterPhaseUnreachable {
			cs.Phase = fleetv1alpha1.ClusterPhaseDeleting
			if cs.Message == "" {
				cs.Message = "removing the Database from this member"
			}
		}
	case cs.ObservedGeneration != gen:
		if cs.Phase == fleetv1alpha1.ClusterPhaseReady {
			cs.Phase = fleetv1alpha1.ClusterPhaseProvisioning
			cs.Message = fmt.Sprintf("running generation %d, rolling out %d", cs.ObservedGeneration, gen)
		}
		if !in.Allowed[name] && cs.Phase != fleetv1alpha1.ClusterPhaseUnreachable && cs.Phase != fleetv1alpha1.ClusterPhaseConflict {
			cs.Message = fmt.Sprintf("waiting for the rollout (maxUnavailable %d) to reach this member", in.DB.Spec.Rollout.MaxUnavailable)
		}
	}
	// lastSyncTime moves only when the entry changes, so a steady fleet writes nothing.
	if p, ok := prev[name]; ok && sameEntry(p, cs) {
		cs.LastSyncTime = p.LastSyncTime
	}
	return cs
}

// sameEntry compares two cluster entries without their timestamps.
func sameEntry(a, b fleetv1alpha1.ClusterStatus) bool {
	a.LastSyncTime, b.LastSyncTime = nil, nil
	return a == b
}

// names lists member names for a message, bounded.
func names(list []string) string { return statusmsg.Names(list) }
