package hub

import (
	"fmt"
	"slices"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	fleetv1alpha1 "github.com/fleetdb/fleetdb/apis/v1alpha1"
	"github.com/fleetdb/fleetdb/member"
)

// Switchover outcomes (status.topology.switchover.outcome).
const (
	switchoverSucceeded = "Succeeded"
	switchoverFailed    = "Failed"
	switchoverAborted   = "Aborted"
)

// memberView is what the hub knows of one member's Cluster for the topology.
type memberView struct {
	// repl is the last observation; nil when there is none (not observed
	// yet, or the last sync failed).
	repl *member.ReplicationStatus
	// at is when it was observed.
	at time.Time
	// unreachable: the member could not be reached.
	unreachable bool
	// reported: a member sync recorded a result since the hub started.
	reported bool
}

// topologyInput is what one topology pass decides from.
type topologyInput struct {
	db      *fleetv1alpha1.Database
	targets map[string]bool
	views   map[string]memberView
	now     time.Time
	// newTraceID names the trace of a switchover that starts in this pass.
	newTraceID func() string
}

// topologyEvent is an Event the pass asks for.
type topologyEvent struct {
	warning bool
	reason  string
	message string
}

// finishedStep is a switchover step that ended in this pass (a span).
type finishedStep struct {
	sw      fleetv1alpha1.SwitchoverStatus
	step    fleetv1alpha1.SwitchoverStep
	started time.Time
	ended   time.Time
	outcome string
}

// topologyPass is one run of the switchover state machine: it starts from
// the persisted status.topology and the members' observations and computes
// the status.topology to write. It never renders anything itself: the
// member syncs render from the status once it is stored (decideRole).
type topologyPass struct {
	in       topologyInput
	st       fleetv1alpha1.TopologyStatus
	events   []topologyEvent
	finished []finishedStep
	requeue  time.Duration
	// condition of TopologyStable.
	condStatus      metav1.ConditionStatus
	condReason, msg string
}

// runTopology computes the next status.topology of a PrimaryStandby Database.
func runTopology(in topologyInput) *topologyPass {
	t := &topologyPass{in: in}
	if prev := in.db.Status.Topology; prev != nil {
		t.st = *prev.DeepCopy()
	}
	t.st.Mode = fleetv1alpha1.TopologyPrimaryStandby
	if t.st.PrimaryCluster == "" {
		t.st.PrimaryCluster = in.db.Spec.Topology.PrimaryCluster
	}
	t.startOrAbort()
	if t.st.Switchover != nil {
		t.advance()
	}
	t.releaseFenced()
	t.summarise()
	return t
}

func (t *topologyPass) event(warning bool, reason, format string, args ...any) {
	t.events = append(t.events, topologyEvent{warning: warning, reason: reason, message: fmt.Sprintf(format, args...)})
}

func (t *topologyPass) wantFailover() bool {
	f := t.in.db.Spec.Topology.Failover
	return f != nil && f.TargetCluster == t.in.db.Spec.Topology.PrimaryCluster
}

// startOrAbort starts a switchover when spec.topology.primaryCluster names
// another member than the primary; aborts one that has not promoted yet when
// it names another member than its target; turns one waiting for the old
// primary's demotion into a forced promotion when spec.topology.failover
// asks for it.
func (t *topologyPass) startOrAbort() {
	want, sw, now := t.in.db.Spec.Topology.PrimaryCluster, t.st.Switchover, t.in.now
	switch {
	case sw == nil && want == t.st.PrimaryCluster:
	case sw == nil:
		t.start(want)
	case want != sw.To && !reached(sw, fleetv1alpha1.StepPromote):
		rec := *sw.DeepCopy()
		rec.Outcome, rec.Finished = switchoverAborted, timePtr(now)
		rec.Message = fmt.Sprintf("aborted at %s: spec.topology.primaryCluster is now %s; %s stays primary", sw.Step, want, sw.From)
		t.st.LastSwitchover, t.st.Switchover = &rec, nil
		if sw.Kind == fleetv1alpha1.SwitchoverForced {
			t.st.Fenced = slices.DeleteFunc(t.st.Fenced, func(m string) bool { return m == sw.From })
		}
		t.event(true, fleetv1alpha1.ReasonSwitchoverAborted, "%s of the primary from %s to %s aborted at step %s; %s stays primary",
			sw.Kind, sw.From, sw.To, sw.Step, sw.From)
		t.requeue = time.Second // a new target starts after the abort is stored
	case want != sw.To:
		sw.Message = fmt.Sprintf("%s was promoted already: this switchover finishes before one to %s starts", sw.To, want)
	case sw.Kind == fleetv1alpha1.SwitchoverPlanned && t.wantFailover() && !reached(sw, fleetv1alpha1.StepPromote):
		t.finished = append(t.finished, finishedStep{sw: *sw, step: sw.Step, started: sw.StepStarted.Time, ended: now, outcome: "ForcedInstead"})
		sw.Kind, sw.Outcome, sw.Finished = fleetv1alpha1.SwitchoverForced, "", nil
		t.setStep(fleetv1alpha1.StepFence, "fencing "+sw.From+" before promoting "+sw.To+" without its demotion token")
		t.fence(sw.From)
		t.event(true, fleetv1alpha1.ReasonFailingOver, "forced promotion of %s requested during the switchover: %s is fenced", sw.To, sw.From)
	}
}

// start records a new switchover (or forced promotion) from the primary to want.
func (t *topologyPass) start(want string) {
	now := t.in.now
	sw := &fleetv1alpha1.SwitchoverStatus{
		Kind: fleetv1alpha1.SwitchoverPlanned, From: t.st.PrimaryCluster, To: want,
		Step: fleetv1alpha1.StepCheckTarget, Started: metav1Time(now), StepStarted: timePtr(now),
		Message: "waiting for " + want + " to be a healthy standby of " + t.st.PrimaryCluster,
	}
	if t.in.newTraceID != nil {
		sw.TraceID = t.in.newTraceID()
	}
	t.st.Switchover = sw
	if t.wantFailover() {
		sw.Kind, sw.Step = fleetv1alpha1.SwitchoverForced, fleetv1alpha1.StepFence
		sw.Message = "fencing " + sw.From + " before promoting " + want + " without its demotion token"
		t.fence(sw.From)
		reason := t.in.db.Spec.Topology.Failover.Reason
		t.event(true, fleetv1alpha1.ReasonFailingOver, "forced promotion of %s (old primary %s fenced; what it had not streamed is lost): %s", want, sw.From, reason)
		return
	}
	t.event(false, fleetv1alpha1.ReasonSwitchoverStarted, "switchover of the primary from %s to %s started", sw.From, want)
}

// fence records m as an old primary that may only come back as a standby.
func (t *topologyPass) fence(m string) {
	if !slices.Contains(t.st.Fenced, m) {
		t.st.Fenced = append(t.st.Fenced, m)
		slices.Sort(t.st.Fenced)
	}
}

// setStep moves the switchover to step s, now.
func (t *topologyPass) setStep(s fleetv1alpha1.SwitchoverStep, msg string) {
	sw := t.st.Switchover
	sw.Step, sw.StepStarted, sw.Message = s, timePtr(t.in.now), msg
}

func timePtr(t time.Time) *metav1.Time {
	m := metav1Time(t)
	return &m
}
