package hub

import (
	"fmt"
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
func (t *topologyPass) advance() {
	for sw := t.st.Switchover; sw != nil; sw = t.st.Switchover {
		if sw.Outcome == switchoverFailed && !reached(sw, fleetv1alpha1.StepPromote) {
			return
		}
		done, waiting := t.stepDone(sw)
		if !done {
			t.wait(sw, waiting)
			return
		}
		t.finished = append(t.finished, finishedStep{sw: *sw.DeepCopy(), step: sw.Step, started: sw.StepStarted.Time, ended: t.in.now, outcome: "Done"})
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
func (t *topologyPass) wait(sw *fleetv1alpha1.SwitchoverStatus, waiting string) {
	timeout := t.in.db.EffectiveStepTimeout()
	elapsed := t.in.now.Sub(sw.StepStarted.Time)
	if sw.Outcome == switchoverFailed {
		return // past Promote: still waiting, the message says it timed out
	}
	if elapsed < timeout {
		sw.Message = waiting
		t.requeue = timeout - elapsed + time.Second
		return
	}
	sw.Outcome, sw.Finished = switchoverFailed, timePtr(t.in.now)
	sw.Message = statusmsg.Bound(fmt.Sprintf("step %s did not finish within %s: %s", sw.Step, timeout, waiting))
	t.finished = append(t.finished, finishedStep{sw: *sw.DeepCopy(), step: sw.Step, started: sw.StepStarted.Time, ended: t.in.now, outcome: "TimedOut"})
	reason := fleetv1alpha1.ReasonSwitchoverStepTimedOut
	if sw.Step == fleetv1alpha1.StepCheckTarget {
		reason = fleetv1alpha1.ReasonTargetUnhealthy
	}
	t.event(true, reason, "%s from %s to %s stopped: %s", sw.Kind, sw.From, sw.To, sw.Message)
}

// complete records a finished switchover: the target is the primary.
func (t *topologyPass) complete() {
	sw := t.st.Switchover
	sw.Step, sw.Outcome, sw.Finished = fleetv1alpha1.StepDone, switchoverSucceeded, timePtr(t.in.now)
	sw.Message = fmt.Sprintf("%s is the primary (was %s)", sw.To, sw.From)
	t.st.PrimaryCluster, t.st.LastSwitchover, t.st.Switchover = sw.To, sw, nil
	t.event(false, fleetv1alpha1.ReasonSwitchoverSucceeded, "%s from %s to %s finished: %s is the primary", sw.Kind, sw.From, sw.To, sw.To)
}

// fresh returns m's observation when it was made after the step started.
func (t *topologyPass) fresh(m string, since time.Time) *member.ReplicationStatus {
	v, ok := t.in.views[m]
	if !ok || v.unreachable || v.repl == nil || v.at.Before(since) {
		return nil
	}
	return v.repl
}

// stepDone says whether the switchover's step has ended, or what it waits for.
func (t *topologyPass) stepDone(sw *fleetv1alpha1.SwitchoverStatus) (bool, string) {
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
			return false, "waiting for " + sw.From + " to shut down and publish its demotion token"
		}
		sw.DemotionToken = fromAny.DemotionToken
		return true, ""
	case fleetv1alpha1.StepFence:
		// Fenced once the status that records it is stored.
		prev := t.in.db.Status.Topology
		return prev != nil && slices.Contains(prev.Fenced, sw.From) && prev.Switchover != nil && prev.Switchover.Step == fleetv1alpha1.StepFence, "recording " + sw.From + " as fenced"
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
func (t *topologyPass) checkTarget(sw *fleetv1alpha1.SwitchoverStatus) (bool, string) {
	// Reports from before the switchover started may be stale: both members
	// are woken when it is stored (roleKey) and decided on afresh.
	from, to := t.fresh(sw.From, sw.Started.Time), t.fresh(sw.To, sw.Started.Time)
	switch {
	case from == nil:
		return false, "waiting for a report of the primary " + sw.From + " (a switchover needs it reachable; to promote without it, set spec.topology.failover)"
	case to == nil || !to.Healthy || to.Primary != sw.From:
		return false, "waiting for " + sw.To + " to be a healthy standby of " + sw.From
	}
	sw.IgnoredDemotionToken = from.DemotionToken
	return true, ""
}

// demoted: the old primary follows the target, finished its switch and
// published a demotion token that is not one from an earlier demotion.
func (t *topologyPass) demoted(sw *fleetv1alpha1.SwitchoverStatus, from *member.ReplicationStatus) bool {
	if from == nil || from.Primary != sw.To || from.SwitchInProgress || from.DemotionToken == "" {
		return false
	}
	last := t.st.LastSwitchover
	return from.DemotionToken != sw.IgnoredDemotionToken && (last == nil || from.DemotionToken != last.DemotionToken)
}

// promoted: the target completed its promotion (with the token in a
// switchover) and is healthy.
func (t *topologyPass) promoted(sw *fleetv1alpha1.SwitchoverStatus, to *member.ReplicationStatus) bool {
	if to == nil || to.Primary != sw.To || !to.Healthy || to.SwitchInProgress {
		return false
	}
	return sw.Kind == fleetv1alpha1.SwitchoverForced || to.LastPromotionToken == sw.DemotionToken
}

// repointed: every other reachable standby follows the target (an
// unreachable one is written when it is back; a fenced one is rebuilt).
func (t *topologyPass) repointed(sw *fleetv1alpha1.SwitchoverStatus) (bool, string) {
	var behind []string
	for _, m := range sortedKeys(t.in.targets) {
		if m == sw.To || slices.Contains(t.st.Fenced, m) || t.in.views[m].unreachable {
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

// releaseFenced lets a fenced old primary go once it reports itself a
// healthy standby of the primary.
func (t *topologyPass) releaseFenced() {
	var sw = t.st.Switchover
	t.st.Fenced = slices.DeleteFunc(t.st.Fenced, func(m string) bool {
		if sw != nil && sw.From == m {
			return false
		}
		v := t.in.views[m]
		if v.unreachable || v.repl == nil || v.repl.Primary != t.st.PrimaryCluster || !v.repl.Healthy {
			return false
		}
		t.event(false, fleetv1alpha1.ReasonFenced, "%s, fenced by a forced promotion, is back as a healthy standby of %s", m, t.st.PrimaryCluster)
		return true
	})
	if len(t.st.Fenced) == 0 {
		t.st.Fenced = nil
	}
}
