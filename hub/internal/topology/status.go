package topology

import (
	"maps"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	fleetv1alpha1 "github.com/fleetdb/fleetdb/apis/v1alpha1"
	"github.com/fleetdb/fleetdb/internal/statusmsg"
)

// summarise sets the topology phase and the TopologyStable condition.
func (t *Pass) summarise() {
	st, sw := &t.Status, t.Status.Switchover
	p := st.PrimaryCluster
	pv := t.in.Views[p]
	set := func(phase fleetv1alpha1.TopologyPhase, reason, msg string) {
		st.Phase, t.CondReason, t.Msg = phase, reason, msg
		t.condStatus = metav1.ConditionFalse
		if reason == fleetv1alpha1.ReasonTopologyStable {
			t.condStatus = metav1.ConditionTrue
		}
	}
	prev := meta.FindStatusCondition(t.in.DB.Status.Conditions, fleetv1alpha1.ConditionTopologyStable)
	switch {
	case sw == nil && !pv.Reported && !pv.Unreachable && prev != nil && t.in.DB.Status.Topology != nil:
		// A hub that just started has no report of the primary yet: the
		// stored summary stands until one arrives.
		st.Phase, t.condStatus, t.CondReason, t.Msg = t.in.DB.Status.Topology.Phase, prev.Status, prev.Reason, prev.Message
	case t.abortWaiting:
		set(fleetv1alpha1.TopologySwitchingOver, fleetv1alpha1.ReasonAbortWaitingForDemotion, sw.Message)
	case sw != nil && sw.Outcome == SwitchoverFailed && strings.HasPrefix(sw.Message, refusedPrefix):
		set(fleetv1alpha1.TopologyDegraded, fleetv1alpha1.ReasonSwitchoverRefused, sw.Message+abortHint(sw))
	case sw != nil && sw.Outcome == SwitchoverFailed && sw.Step == fleetv1alpha1.StepCheckTarget:
		set(fleetv1alpha1.TopologyDegraded, fleetv1alpha1.ReasonTargetUnhealthy, sw.Message+abortHint(sw))
	case sw != nil && sw.Outcome == SwitchoverFailed:
		set(fleetv1alpha1.TopologyDegraded, fleetv1alpha1.ReasonSwitchoverStepTimedOut, sw.Message+abortHint(sw))
	case sw != nil && sw.Kind == fleetv1alpha1.SwitchoverForced:
		set(fleetv1alpha1.TopologyFailingOver, fleetv1alpha1.ReasonFailingOver, "step "+string(sw.Step)+": "+sw.Message)
	case sw != nil && t.in.Views[sw.From].Unreachable && !reached(sw, fleetv1alpha1.StepPromote):
		set(fleetv1alpha1.TopologySwitchingOver, fleetv1alpha1.ReasonPrimaryUnreachable, "the primary "+sw.From+" is unreachable during the switchover; "+sw.Message)
	case sw != nil:
		set(fleetv1alpha1.TopologySwitchingOver, fleetv1alpha1.ReasonSwitchingOver, "step "+string(sw.Step)+": "+sw.Message)
	case pv.Unreachable:
		set(fleetv1alpha1.TopologyDegraded, fleetv1alpha1.ReasonPrimaryUnreachable, "the primary "+p+
			" is unreachable; fleetdb does not fail over by itself: to promote a standby, set spec.topology.primaryCluster and spec.topology.failover.targetCluster to it")
	case len(st.Fenced) > 0:
		msg := t.fencedMessage()
		if unproven := t.unprovenSinceForced(); len(unproven) > 0 {
			msg += "; and " + unprovenMessage(p, unproven)
		}
		set(fleetv1alpha1.TopologyDegraded, fleetv1alpha1.ReasonFenced, msg)
	case pv.Replication == nil || pv.Replication.Primary != p || !pv.Replication.Healthy:
		set(fleetv1alpha1.TopologyDegraded, fleetv1alpha1.ReasonPrimaryNotReady, "waiting for "+p+"'s Cluster to be a healthy primary")
	default:
		if behind := t.notFollowing(); len(behind) > 0 {
			set(fleetv1alpha1.TopologyDegraded, fleetv1alpha1.ReasonStandbyNotFollowing, "waiting for "+strings.Join(behind, ", ")+" to follow "+p)
			return
		}
		if unproven := t.unprovenSinceForced(); len(unproven) > 0 {
			set(fleetv1alpha1.TopologyDegraded, fleetv1alpha1.ReasonStandbyNotFollowing, unprovenMessage(p, unproven))
			return
		}
		if msg := t.commitsWaiting(); msg != "" {
			set(fleetv1alpha1.TopologyDegraded, fleetv1alpha1.ReasonCommitsWaiting, msg)
			return
		}
		set(fleetv1alpha1.TopologyStable, fleetv1alpha1.ReasonTopologyStable, p+" is the primary; every reachable standby follows it")
	}
}

// commitsWaiting says why the primary's commits wait, "" when they need
// not: with durability Synchronous a commit waits for every other member's
// standby (SynchronousStandbys), and one of them is not reachable, healthy
// and following the primary.
func (t *Pass) commitsWaiting() string {
	p := t.Status.PrimaryCluster
	sync := SynchronousStandbys(t.in.DB, p, slices.Sorted(maps.Keys(t.in.Targets)))
	var why []string
	for _, m := range sync {
		v := t.in.Views[m]
		switch {
		case v.Unreachable:
			why = append(why, m+" unreachable")
		case v.Replication == nil || v.Replication.Primary != p || !v.Replication.Healthy:
			why = append(why, m+" not a healthy standby of "+p)
		}
	}
	if len(why) == 0 {
		return ""
	}
	return "commits on the primary " + p + " wait for the standby of every other member (durability Synchronous), and not all can take them (" +
		strings.Join(why, ", ") + "): they finish when it streams again, or once a lost member is taken out of the placement; spec.topology.durability Asynchronous would stop the waiting at the cost of losing them in a failover (docs/topology.md, \"Durability\")"
}

// fencedMessage names each fenced member, why it is still fenced and, for
// one that reports healthy but does not stream from the primary, what the
// operator must do: CloudNativePG demotes a former primary without
// pg_rewind (verifyPgDataCoherenceForPrimary in
// internal/management/controller/instance_startup.go, v1.30.0: an old
// primary inside a replica cluster is demoted at once, only the in-cluster
// failover path runs pg_rewind), so one whose timeline went past the new
// primary's never follows it by itself.
func (t *Pass) fencedMessage() string {
	p := t.Status.PrimaryCluster
	pr := t.in.Views[p].Replication
	var parts []string
	for _, m := range t.Status.Fenced {
		v := t.in.Views[m]
		switch {
		case v.Unreachable:
			parts = append(parts, m+" is unreachable: it is written as a standby of "+p+" when it is back")
		case v.Replication == nil || v.Replication.Primary != p || !v.Replication.Healthy || pr == nil:
			parts = append(parts, m+" is not yet a healthy standby of "+p)
		default:
			parts = append(parts, m+" does not stream from "+p+" ("+streamGap(m, v.Replication, p, pr)+
				"): if that lasts it diverged (CloudNativePG demotes without pg_rewind) and stays fenced; to rebuild it, save what you need from its volumes "+
				"and delete its CloudNativePG Cluster in "+m+": the hub re-creates it as a clone of "+p)
		}
	}
	return "replaced by a forced promotion: " + strings.Join(parts, "; ")
}

// unprovenSinceForced are the standbys, other than the fenced old primary,
// that have not shown they stream from the primary since a forced promotion
// made it one, each with what they report. A forced promotion has no
// demotion token: a standby of the lost primary may have received WAL the
// promoted one never had (in flight when the primary was lost), and such a
// standby can never follow the new timeline (CloudNativePG runs no
// pg_rewind for a replica cluster, docs/cloudnativepg.md) while it still
// reports a healthy standby whose spec follows the new primary. Only its
// report of the new primary's system identifier and timeline proves it
// streams (ReplicationStatus.StreamsFrom): until then the topology is not
// stable, the hub asks CloudNativePG for the report (a standby reports the
// timeline of its last restartpoint, see ReportRequest), and one that never
// reports it is named with what to do. It stays in the primary's
// synchronous standbys: commits wait for it rather than be acknowledged by
// the primary alone (durability Synchronous).
func (t *Pass) unprovenSinceForced() []string {
	p := t.Status.PrimaryCluster
	last := t.Status.LastSwitchover
	if last == nil || last.Kind != fleetv1alpha1.SwitchoverForced || last.To != p || t.Status.Switchover != nil {
		return nil
	}
	pr := t.in.Views[p].Replication
	if pr == nil {
		return nil
	}
	var out []string
	for _, m := range slices.Sorted(maps.Keys(t.in.Targets)) {
		v := t.in.Views[m]
		if m == p || v.Unreachable || v.Replication == nil || v.Replication.Primary != p || slices.Contains(t.Status.Fenced, m) {
			continue
		}
		if !v.Replication.StreamsFrom(pr) {
			t.await(m, t.fencedSince())
			out = append(out, m+" ("+streamGap(m, v.Replication, p, pr)+")")
		}
	}
	return out
}

// unprovenMessage says which standbys have not shown they stream from the
// primary p since its forced promotion, and what to do if they never do.
func unprovenMessage(p string, unproven []string) string {
	return "since the forced promotion of " + p + ", not yet shown to stream from it: " + strings.Join(unproven, ", ") +
		"; a standby reports the new timeline at its next restartpoint (the hub asks for it). If it never does, it diverged (it had WAL " + p +
		" never had; no pg_rewind): rebuild it by deleting its CloudNativePG Cluster in that member (re-created as a clone of " + p +
		"); until then a switchover to it is refused and Synchronous commits wait for it"
}

// abortHint says what a person can do about a stopped switchover.
func abortHint(sw *fleetv1alpha1.SwitchoverStatus) string {
	if reached(sw, fleetv1alpha1.StepPromote) {
		return "; " + sw.To + " has its promotion: the hub waits for it (it cannot go back)"
	}
	return "; nothing more is changed: set spec.topology.primaryCluster back to " + sw.From + " to abort"
}

// notFollowing are the reachable standbys whose Cluster does not follow the primary.
func (t *Pass) notFollowing() []string {
	var out []string
	for _, m := range slices.Sorted(maps.Keys(t.in.Targets)) {
		v := t.in.Views[m]
		if m == t.Status.PrimaryCluster || v.Unreachable {
			continue
		}
		if v.Replication == nil || v.Replication.Primary != t.Status.PrimaryCluster {
			out = append(out, m)
		}
	}
	return out
}

// Apply puts the topology into the status written at the end: status.topology,
// the TopologyStable condition and each member's role.
func (t *Pass) Apply(st *fleetv1alpha1.DatabaseStatus) {
	top := t.Status
	st.Topology = &top
	meta.SetStatusCondition(&st.Conditions, metav1.Condition{
		Type: fleetv1alpha1.ConditionTopologyStable, Status: t.condStatus, Reason: t.CondReason,
		Message: statusmsg.Bound(t.Msg), ObservedGeneration: st.ObservedGeneration,
	})
	for i := range st.Clusters {
		st.Clusters[i].Role = MemberRoleOf(&top, st.Clusters[i].Name)
	}
}

// MemberRoleOf is a member's role in status.clusters.
func MemberRoleOf(st *fleetv1alpha1.TopologyStatus, m string) fleetv1alpha1.MemberRole {
	sw := st.Switchover
	primary := st.PrimaryCluster
	if sw != nil && reached(sw, fleetv1alpha1.StepRepoint) {
		primary = sw.To
	}
	switch {
	case slices.Contains(st.Fenced, m):
		return fleetv1alpha1.RoleFenced
	case sw != nil && (m == sw.From || m == sw.To) && reached(sw, fleetv1alpha1.StepDemote) && !reached(sw, fleetv1alpha1.StepRepoint):
		return fleetv1alpha1.RoleSwitching
	case m == primary:
		return fleetv1alpha1.RolePrimary
	}
	return fleetv1alpha1.RoleStandby
}
