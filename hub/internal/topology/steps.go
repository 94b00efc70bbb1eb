package topology

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	fleetv1alpha1 "github.com/fleetdb/fleetdb/apis/v1alpha1"
	"github.com/fleetdb/fleetdb/internal/statusmsg"
	"github.com/fleetdb/fleetdb/member"
)

// nextStep is the step after each (the forced promotion's Fence is followed
// by Promote: there is no demotion token to wait for).
var nextStep = map[fleetv1alpha1.SwitchoverStep]fleetv1alpha1.SwitchoverStep{
	fleetv1alpha1.StepCheckTarget:   fleetv1alpha1.StepDemote,
	fleetv1alpha1.StepDemote:        fleetv1alpha1.StepWaitDemotion,
	fleetv1alpha1.StepWaitDemotion:  fleetv1alpha1.StepPromote,
	fleetv1alpha1.StepFence:         fleetv1alpha1.StepPromote,
	fleetv1alpha1.StepPromote:       fleetv1alpha1.StepWaitPromotion,
	fleetv1alpha1.StepWaitPromotion: fleetv1alpha1.StepRepoint,
	fleetv1alpha1.StepRepoint:       fleetv1alpha1.StepDone,
}

// advance moves the switchover through every step whose end it can see. A
// step's end is seen on observations made after it started (and so after
// the status that renders it was stored), so a pass usually ends one step.
// A step that runs past spec.topology.stepTimeout stops the switchover
// (outcome Failed): before Promote nothing more happens until a person
// acts; from Promote on there is no way back, so the hub keeps waiting for
// the target and finishes when it reports.
func (t *Pass) advance() {
	for sw := t.Status.Switchover; sw != nil; sw = t.Status.Switchover {
		if sw.Outcome == SwitchoverFailed && !reached(sw, fleetv1alpha1.StepPromote) {
			return
		}
		done, waiting := t.stepDone(sw)
		if !done {
			t.wait(sw, waiting)
			return
		}
		t.Finished = append(t.Finished, FinishedStep{Switchover: *sw.DeepCopy(), Step: sw.Step, Started: sw.StepStarted.Time, Ended: t.in.Now, Outcome: "Done"})
		sw.Outcome, sw.Finished = "", nil
		next := nextStep[sw.Step]
		if next == fleetv1alpha1.StepDone {
			t.complete()
			return
		}
		t.setStep(next, "")
	}
}

// wait keeps the switchover at its step, or stops it when the step timed out.
func (t *Pass) wait(sw *fleetv1alpha1.SwitchoverStatus, waiting string) {
	timeout := t.in.DB.EffectiveStepTimeout()
	elapsed := t.in.Now.Sub(sw.StepStarted.Time)
	if sw.Outcome == SwitchoverFailed {
		return // past Promote: still waiting, the message says it timed out
	}
	if elapsed < timeout {
		sw.Message = waiting
		t.Requeue = timeout - elapsed + time.Second
		return
	}
	sw.Outcome, sw.Finished = SwitchoverFailed, timePtr(t.in.Now)
	sw.Message = statusmsg.Bound(fmt.Sprintf("step %s did not finish within %s: %s", sw.Step, timeout, waiting))
	t.Finished = append(t.Finished, FinishedStep{Switchover: *sw.DeepCopy(), Step: sw.Step, Started: sw.StepStarted.Time, Ended: t.in.Now, Outcome: "TimedOut"})
	reason := fleetv1alpha1.ReasonSwitchoverStepTimedOut
	if sw.Step == fleetv1alpha1.StepCheckTarget {
		reason = fleetv1alpha1.ReasonTargetUnhealthy
	}
	t.event(true, reason, "%s from %s to %s stopped: %s", sw.Kind, sw.From, sw.To, sw.Message)
}

// complete records a finished switchover: the target is the primary.
func (t *Pass) complete() {
	sw := t.Status.Switchover
	sw.Step, sw.Outcome, sw.Finished = fleetv1alpha1.StepDone, SwitchoverSucceeded, timePtr(t.in.Now)
	sw.Message = fmt.Sprintf("%s is the primary (was %s)", sw.To, sw.From)
	t.Status.PrimaryCluster, t.Status.LastSwitchover, t.Status.Switchover = sw.To, sw, nil
	t.event(false, fleetv1alpha1.ReasonSwitchoverSucceeded, "%s from %s to %s finished: %s is the primary", sw.Kind, sw.From, sw.To, sw.To)
}

// fresh returns m's observation when it was made after the step started.
func (t *Pass) fresh(m string, since time.Time) *member.ReplicationStatus {
	v, ok := t.in.Views[m]
	if !ok || v.Unreachable || v.Replication == nil || v.At.Before(since) {
		return nil
	}
	return v.Replication
}

// stepDone says whether the switchover's step has ended, or what it waits for.
func (t *Pass) stepDone(sw *fleetv1alpha1.SwitchoverStatus) (bool, string) {
	// Demote and Promote end on what the member wrote, which a sync woken by
	// the stored step observes (fresh); the other steps end on tokens and
	// reports CloudNativePG makes only after those writes.
	since := sw.StepStarted.Time
	from, to := t.fresh(sw.From, since), t.fresh(sw.To, since)
	fromAny, toAny := t.fresh(sw.From, time.Time{}), t.fresh(sw.To, time.Time{})
	switch sw.Step {
	case fleetv1alpha1.StepCheckTarget:
		return t.checkTarget(sw)
	case fleetv1alpha1.StepDemote:
		return from != nil && from.Primary == sw.To, "waiting for " + sw.From + "'s Cluster to follow " + sw.To + " (demotion)"
	case fleetv1alpha1.StepWaitDemotion:
		if !t.demoted(sw, fromAny) {
			msg := "waiting for " + sw.From + " to shut down and publish its demotion token"
			if fromAny != nil && fromAny.SwitchInProgress {
				// Said, so that a person (and a test) knows an abort now
				// waits for the demotion to end (startOrAbort).
				msg += " (CloudNativePG's replica switch is in progress)"
			}
			return false, msg
		}
		sw.DemotionToken = fromAny.DemotionToken
		return true, ""
	case fleetv1alpha1.StepFence:
		return t.fenced(sw)
	case fleetv1alpha1.StepPromote:
		return to != nil && to.Primary == sw.To, "waiting for " + sw.To + "'s Cluster to be written as the primary"
	case fleetv1alpha1.StepWaitPromotion:
		return t.promoted(sw, toAny), "waiting for " + sw.To + " to complete its promotion and be healthy"
	case fleetv1alpha1.StepRepoint:
		return t.repointed(sw)
	}
	return false, "unknown step " + string(sw.Step)
}

// checkTarget: the target is a healthy standby of the primary, and the
// primary is reachable (a switchover needs it to demote cleanly).
func (t *Pass) checkTarget(sw *fleetv1alpha1.SwitchoverStatus) (bool, string) {
	// Reports from before the switchover started may be stale: both members
	// are woken when it is stored (roleKey) and decided on afresh.
	from, to := t.fresh(sw.From, sw.Started.Time), t.fresh(sw.To, sw.Started.Time)
	switch {
	case from == nil:
		return false, "waiting for a report of the primary " + sw.From + " (a switchover needs it reachable; to promote without it, set spec.topology.failover)"
	case to == nil || !to.Healthy || to.Primary != sw.From:
		return false, "waiting for " + sw.To + " to be a healthy standby of " + sw.From
	case !to.StreamsFrom(from) && !t.demotedCleanly(sw.To, to, from):
		// Healthy is pg_isready; promoting a standby that does not stream
		// from the primary loses what it did not receive. A standby that
		// does reports the primary's timeline only from its next
		// restartpoint, which its operator publishes when it reconciles.
		t.await(sw.To, sw.Started.Time)
		return false, "waiting for " + sw.To + " to stream from " + sw.From + ": " + streamGap(sw.To, to, sw.From, from)
	}
	sw.IgnoredDemotionToken = from.DemotionToken
	return true, ""
}

// demotedCleanly says whether target is a former primary that was demoted
// cleanly and has followed primary since: it reports a demotion token
// (status.demotionToken, which CloudNativePG keeps on the demoted Cluster
// and clears once the Cluster is no longer a replica: updateResourceStatus
// in internal/controller/cluster_status.go, v1.30.0) of the same system, it still reports that token's timeline, the primary
// is on the next one, and it is not fenced (a forced promotion does not
// wait for the old primary's last WAL). Such a member follows the primary
// although it reports the older timeline: its WAL ends at the shutdown
// checkpoint the token records, which a planned switchover's target replays
// before it promotes itself (verifyPromotionToken in
// internal/management/controller/instance_token.go, v1.30.0), and the
// primary's timeline branches after it; had it run as a primary again since,
// it would report a later timeline. The older timeline is what CloudNativePG
// reports for a standby until its next restartpoint, up to a
// checkpoint_timeout after the promotion's checkpoint
// (pg_control_checkpoint() in fillStatusFromReplica,
// pkg/management/postgres/probes.go, v1.30.0): without this a switchover back
// within minutes waited at CheckTarget until its step timed out (found on
// real nodes, test/realdb).
func (t *Pass) demotedCleanly(target string, to *member.ReplicationStatus, from *member.ReplicationStatus) bool {
	if slices.Contains(t.Status.Fenced, target) {
		return false
	}
	system, timeline, ok := member.DemotionTokenCheckpoint(to.DemotionToken)
	return ok && to.SystemID == system && from.SystemID == system && to.TimelineID == timeline && from.TimelineID == timeline+1
}

// streamGap says why m (reporting r) is not seen streaming from p
// (reporting pr): their timelines (the primary instance's timeLineID in
// CloudNativePG's status.instancesReportedState) and, when they differ,
// their system identifiers (status.systemID).
func streamGap(m string, r *member.ReplicationStatus, p string, pr *member.ReplicationStatus) string {
	out := fmt.Sprintf("%s on timeline %d, %s on timeline %d", m, r.TimelineID, p, pr.TimelineID)
	if r.SystemID != pr.SystemID {
		id := func(v string) string {
			if v == "" {
				return "none"
			}
			return v
		}
		out += fmt.Sprintf("; system identifier %s, %s's %s", id(r.SystemID), p, id(pr.SystemID))
	}
	return out
}

// fenced ends the Fence step of a forced promotion. The fence is recorded
// first (a stored status, so every write to the old primary from then on
// renders it a standby of the target). Then, when the old primary is
// reachable, its Cluster is written a standby of the target (decideRole
// renders it so from Fence on) and the target is promoted only once the
// old primary reports that spec and no instance that runs as a primary, in
// a report made after the step started, one in which CloudNativePG read
// every instance it knows of (an instance it could not read reports
// isPrimary false and may still run a primary: ReplicationStatus.
// NoPrimaryProven): two primaries never run at once when the hub can see
// the old one. A step timeout stops the promotion at Fence (before
// Promote): waiting never turns "unknown" into "demoted". An unreachable old primary cannot be
// demoted: the fence alone stands (it is written a standby when it is back;
// what it had not streamed is lost, as spec.topology.failover says).
func (t *Pass) fenced(sw *fleetv1alpha1.SwitchoverStatus) (bool, string) {
	prev := t.in.DB.Status.Topology
	if prev == nil || !slices.Contains(prev.Fenced, sw.From) || prev.Switchover == nil || prev.Switchover.Step != fleetv1alpha1.StepFence {
		return false, "recording " + sw.From + " as fenced"
	}
	if t.in.Views[sw.From].Unreachable {
		return true, ""
	}
	from := t.fresh(sw.From, sw.StepStarted.Time)
	switch {
	case from == nil:
		return false, sw.From + " is reachable: waiting for its report before promoting " + sw.To + " (it is demoted first)"
	case from.Primary != sw.To:
		return false, sw.From + " is reachable: waiting for its Cluster to follow " + sw.To + " (demotion) before promoting " + sw.To
	case from.SwitchInProgress || from.RunsPrimary:
		return false, sw.From + " is reachable and still runs a primary instance: waiting for its demotion before promoting " + sw.To
	case !from.NoPrimaryProven():
		t.await(sw.From, sw.StepStarted.Time)
		return false, sw.From + " is reachable but its CloudNativePG could not read instance " + strings.Join(from.UnreadInstances, ", ") +
			", which may still run a primary: waiting for a report of every instance before promoting " + sw.To +
			" (to promote without it, cut " + sw.From + " off from the hub)"
	}
	return true, ""
}

// demoted: the old primary follows the target, finished its switch and
// published a demotion token that is not one from an earlier demotion.
func (t *Pass) demoted(sw *fleetv1alpha1.SwitchoverStatus, from *member.ReplicationStatus) bool {
	if from == nil || from.Primary != sw.To || from.SwitchInProgress || from.DemotionToken == "" {
		return false
	}
	last := t.Status.LastSwitchover
	return from.DemotionToken != sw.IgnoredDemotionToken && (last == nil || from.DemotionToken != last.DemotionToken)
}

// promoted: the target completed its promotion (with the token in a
// switchover) and is healthy.
func (t *Pass) promoted(sw *fleetv1alpha1.SwitchoverStatus, to *member.ReplicationStatus) bool {
	if to == nil || to.Primary != sw.To || !to.Healthy || to.SwitchInProgress {
		return false
	}
	return sw.Kind == fleetv1alpha1.SwitchoverForced || to.LastPromotionToken == sw.DemotionToken
}

// repointed: every other reachable standby follows the target (an
// unreachable one is written when it is back; a fenced one is rebuilt).
func (t *Pass) repointed(sw *fleetv1alpha1.SwitchoverStatus) (bool, string) {
	var behind []string
	for _, m := range slices.Sorted(maps.Keys(t.in.Targets)) {
		if m == sw.To || slices.Contains(t.Status.Fenced, m) || t.in.Views[m].Unreachable {
			continue
		}
		if r := t.fresh(m, time.Time{}); r == nil || r.Primary != sw.To {
			behind = append(behind, m)
		}
	}
	if len(behind) > 0 {
		return false, "waiting for " + strings.Join(behind, ", ") + " to follow " + sw.To
	}
	return true, ""
}

// fencedSince is when the forced promotion that fenced the members ended
// (the zero time when the status does not say: the slowest requests).
func (t *Pass) fencedSince() time.Time {
	if last := t.Status.LastSwitchover; last != nil && last.Finished != nil {
		return last.Finished.Time
	}
	return time.Time{}
}

// releaseFenced lets a fenced old primary go once it reports itself a
// healthy standby of the primary that streams from it (same system
// identifier and timeline: a former primary that diverged cannot follow the
// new timeline, CloudNativePG demotes without pg_rewind, and stays fenced).
func (t *Pass) releaseFenced() {
	var sw = t.Status.Switchover
	t.Status.Fenced = slices.DeleteFunc(t.Status.Fenced, func(m string) bool {
		if sw != nil && sw.From == m {
			return false
		}
		v, pv := t.in.Views[m], t.in.Views[t.Status.PrimaryCluster]
		if v.Unreachable || v.Replication == nil || v.Replication.Primary != t.Status.PrimaryCluster || !v.Replication.Healthy {
			return false
		}
		if !v.Replication.StreamsFrom(pv.Replication) {
			// A standby of the new primary reports its timeline from its
			// next restartpoint (see ReportRequest).
			t.await(m, t.fencedSince())
			return false
		}
		t.event(false, fleetv1alpha1.ReasonFenced, "%s, fenced by a forced promotion, is back as a healthy standby of %s", m, t.Status.PrimaryCluster)
		return true
	})
	if len(t.Status.Fenced) == 0 {
		t.Status.Fenced = nil
	}
}
