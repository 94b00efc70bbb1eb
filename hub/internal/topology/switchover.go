package topology

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	fleetv1alpha1 "github.com/fleetdb/fleetdb/apis/v1alpha1"
	"github.com/fleetdb/fleetdb/internal/statusmsg"
	"github.com/fleetdb/fleetdb/member"
)

// Switchover outcomes (status.topology.switchover.outcome).
const (
	SwitchoverSucceeded = "Succeeded"
	SwitchoverFailed    = "Failed"
	SwitchoverAborted   = "Aborted"
)

// MemberView is what the hub knows of one member's Cluster for the topology.
type MemberView struct {
	// repl is the last observation; nil when there is none (not observed
	// yet, or the last sync failed).
	Replication *member.ReplicationStatus
	// at is when it was observed.
	At time.Time
	// unreachable: the member could not be reached.
	Unreachable bool
	// reported: a member sync recorded a result since the hub started.
	Reported bool
}

// Input is what one topology pass decides from.
type Input struct {
	DB      *fleetv1alpha1.Database
	Targets map[string]bool
	Views   map[string]MemberView
	Now     time.Time
	// newTraceID names the trace of a switchover that starts in this pass.
	NewTraceID func() string
	// Owns reports whether the hub replica that runs this pass owns the
	// member (--sharding: it holds the member's fence Lease, so its syncs
	// and reports of the member are this replica's); nil: every member.
	Owns func(member string) bool
}

// topologyEvent is an Event the pass asks for.
type topologyEvent struct {
	Warning bool
	Reason  string
	Message string
}

// FinishedStep is a switchover step that ended in this pass (a span).
type FinishedStep struct {
	Switchover fleetv1alpha1.SwitchoverStatus
	Step       fleetv1alpha1.SwitchoverStep
	Started    time.Time
	Ended      time.Time
	Outcome    string
}

// Pass is one run of the switchover state machine: it starts from
// the persisted status.topology and the members' observations and computes
// the status.topology to write. It never renders anything itself: the
// member syncs render from the status once it is stored (decideRole).
type Pass struct {
	in       Input
	Status   fleetv1alpha1.TopologyStatus
	Events   []topologyEvent
	Finished []FinishedStep
	Requeue  time.Duration
	// Awaited are the members whose report the pass waits on that
	// CloudNativePG publishes only when it reconciles their Cluster, with
	// when the wait began (see ReportRequest).
	Awaited map[string]time.Time
	// condition of TopologyStable.
	condStatus      metav1.ConditionStatus
	CondReason, Msg string
	// abortWaiting: an abort waits for the old primary's demotion to finish.
	abortWaiting bool
}

// Run computes the next status.topology of a PrimaryStandby Database.
func Run(in Input) *Pass {
	t := &Pass{in: in}
	if prev := in.DB.Status.Topology; prev != nil {
		t.Status = *prev.DeepCopy()
	}
	t.Status.Mode = fleetv1alpha1.TopologyPrimaryStandby
	if t.Status.PrimaryCluster == "" {
		t.Status.PrimaryCluster = in.DB.Spec.Topology.PrimaryCluster
	}
	t.startOrAbort()
	if !t.abortWaiting {
		t.refuseForeign()
	}
	if t.Status.Switchover != nil && !t.abortWaiting {
		t.advance()
	}
	t.releaseFenced()
	t.summarise()
	return t
}

func (t *Pass) event(warning bool, reason, format string, args ...any) {
	t.Events = append(t.Events, topologyEvent{Warning: warning, Reason: reason, Message: fmt.Sprintf(format, args...)})
}

func (t *Pass) wantFailover() bool {
	f := t.in.DB.Spec.Topology.Failover
	return f != nil && f.TargetCluster == t.in.DB.Spec.Topology.PrimaryCluster
}

// startOrAbort starts a switchover when spec.topology.primaryCluster names
// another member than the primary; aborts one that has not promoted yet when
// it names another member than its target; turns one waiting for the old
// primary's demotion into a forced promotion when spec.topology.failover
// asks for it.
func (t *Pass) startOrAbort() {
	want, sw, now := t.in.DB.Spec.Topology.PrimaryCluster, t.Status.Switchover, t.in.Now
	switch {
	case sw == nil && want == t.Status.PrimaryCluster:
	case sw == nil:
		t.start(want)
	case want != sw.To && !reached(sw, fleetv1alpha1.StepPromote) && t.demotionInProgress(sw):
		// CloudNativePG's webhook refuses turning the old primary back into
		// a primary while its demotion runs (validateReplicaClusterChange in
		// internal/webhook/v1/cluster_webhook.go, v1.30.0, on
		// status.switchReplicaClusterStatus.inProgress): the abort waits for
		// it to finish, and the switchover does not move on meanwhile.
		t.abortWaiting = true
		sw.Message = fmt.Sprintf("abort requested (spec.topology.primaryCluster is now %s): waiting for CloudNativePG to finish demoting %s "+
			"(switchReplicaClusterStatus.inProgress) before it is made primary again", want, sw.From)
	case want != sw.To && !reached(sw, fleetv1alpha1.StepPromote):
		rec := *sw.DeepCopy()
		rec.Outcome, rec.Finished = SwitchoverAborted, timePtr(now)
		rec.Message = fmt.Sprintf("aborted at %s: spec.topology.primaryCluster is now %s; %s stays primary", sw.Step, want, sw.From)
		t.Status.LastSwitchover, t.Status.Switchover = &rec, nil
		if sw.Kind == fleetv1alpha1.SwitchoverForced {
			t.Status.Fenced = slices.DeleteFunc(t.Status.Fenced, func(m string) bool { return m == sw.From })
		}
		t.event(true, fleetv1alpha1.ReasonSwitchoverAborted, "%s of the primary from %s to %s aborted at step %s; %s stays primary",
			sw.Kind, sw.From, sw.To, sw.Step, sw.From)
		t.Requeue = time.Second // a new target starts after the abort is stored
	case want != sw.To:
		sw.Message = fmt.Sprintf("%s was promoted already: this switchover finishes before one to %s starts", sw.To, want)
	case sw.Kind == fleetv1alpha1.SwitchoverPlanned && t.wantFailover() && !reached(sw, fleetv1alpha1.StepPromote) && len(t.foreign()) == 0:
		t.Finished = append(t.Finished, FinishedStep{Switchover: *sw, Step: sw.Step, Started: sw.StepStarted.Time, Ended: now, Outcome: "ForcedInstead"})
		sw.Kind, sw.Outcome, sw.Finished = fleetv1alpha1.SwitchoverForced, "", nil
		t.setStep(fleetv1alpha1.StepFence, "fencing "+sw.From+" before promoting "+sw.To+" without its demotion token")
		t.fence(sw.From)
		t.event(true, fleetv1alpha1.ReasonFailingOver, "forced promotion of %s requested during the switchover: %s is fenced", sw.To, sw.From)
	}
}

// demotionInProgress: the old primary may have been written to follow the
// target (Demote or Fence reached) and the last report of its Cluster says
// CloudNativePG's replica switch is in progress. Only that is waited for: a
// demotion that ended without a token (CloudNativePG before v1.28.4 could
// lose it) or that its operator never started must not keep the old
// primary demoted for ever; a member without a report is written when it
// is back. Should CloudNativePG start the switch between the report and the
// write, its webhook refuses the write and the member sync retries it (with
// backoff) until the switch ended.
func (t *Pass) demotionInProgress(sw *fleetv1alpha1.SwitchoverStatus) bool {
	if !reached(sw, fleetv1alpha1.StepDemote) {
		return false
	}
	r := t.in.Views[sw.From].Replication
	return r != nil && r.SwitchInProgress
}

// start records a new switchover (or forced promotion) from the primary to want.
func (t *Pass) start(want string) {
	now := t.in.Now
	sw := &fleetv1alpha1.SwitchoverStatus{
		Kind: fleetv1alpha1.SwitchoverPlanned, From: t.Status.PrimaryCluster, To: want,
		Step: fleetv1alpha1.StepCheckTarget, Started: metav1.NewTime(now.Truncate(time.Second)), StepStarted: timePtr(now),
		Message: "waiting for " + want + " to be a healthy standby of " + t.Status.PrimaryCluster,
	}
	if t.in.NewTraceID != nil {
		sw.TraceID = t.in.NewTraceID()
	}
	t.Status.Switchover = sw
	if t.wantFailover() && len(t.foreign()) > 0 {
		// Refused before anything is fenced (refuseForeign).
		sw.Kind = fleetv1alpha1.SwitchoverForced
		return
	}
	if t.wantFailover() {
		sw.Kind, sw.Step = fleetv1alpha1.SwitchoverForced, fleetv1alpha1.StepFence
		sw.Message = "fencing " + sw.From + " before promoting " + want + " without its demotion token"
		t.fence(sw.From)
		reason := t.in.DB.Spec.Topology.Failover.Reason
		t.event(true, fleetv1alpha1.ReasonFailingOver, "forced promotion of %s (old primary %s fenced; what it had not streamed is lost): %s", want, sw.From, reason)
		return
	}
	t.event(false, fleetv1alpha1.ReasonSwitchoverStarted, "switchover of the primary from %s to %s started", sw.From, want)
}

// foreign are the placed members the hub replica that runs this pass does
// not own (--sharding).
func (t *Pass) foreign() []string {
	if t.in.Owns == nil {
		return nil
	}
	var out []string
	for _, m := range slices.Sorted(maps.Keys(t.in.Targets)) {
		if !t.in.Owns(m) {
			out = append(out, m)
		}
	}
	return out
}

// refuseForeign stops a switchover or forced promotion that has not
// promoted yet when this hub replica does not own every placed member
// (--sharding): every step decides on the members' reports, and only a
// member's owner has its CloudNativePG status (a placement's report does not
// carry it), and the repoint involves every member. Stopping before Promote
// changes nothing more (outcome Failed, reason SwitchoverRefused); setting
// spec.topology.primaryCluster back aborts it. One that already promoted
// has no way back and keeps waiting.
func (t *Pass) refuseForeign() {
	sw := t.Status.Switchover
	if sw == nil || sw.Outcome == SwitchoverFailed || reached(sw, fleetv1alpha1.StepPromote) {
		return
	}
	foreign := t.foreign()
	if len(foreign) == 0 {
		return
	}
	sw.Outcome, sw.Finished = SwitchoverFailed, timePtr(t.in.Now)
	sw.Message = statusmsg.Bound(refusedPrefix + refusal(foreign))
	t.Finished = append(t.Finished, FinishedStep{Switchover: *sw.DeepCopy(), Step: sw.Step, Started: sw.StepStarted.Time, Ended: t.in.Now, Outcome: "Refused"})
	t.event(true, fleetv1alpha1.ReasonSwitchoverRefused, "%s from %s to %s refused: %s", sw.Kind, sw.From, sw.To, refusal(foreign))
}

// refusedPrefix starts the message of a refused switchover (summarise
// tells it from one that timed out by it).
const refusedPrefix = "refused: "

// refusal says why a switchover is refused under --sharding.
func refusal(foreign []string) string {
	return "the hub replica that runs this Database (the leader, --sharding) does not own " + strings.Join(foreign, ", ") +
		", and a switchover decides on every member's CloudNativePG status, which only a member's owner reads (see docs/sharding.md)"
}

// fence records m as an old primary that may only come back as a standby.
func (t *Pass) fence(m string) {
	if !slices.Contains(t.Status.Fenced, m) {
		t.Status.Fenced = append(t.Status.Fenced, m)
		slices.Sort(t.Status.Fenced)
	}
}

// setStep moves the switchover to step s, now.
func (t *Pass) setStep(s fleetv1alpha1.SwitchoverStep, msg string) {
	sw := t.Status.Switchover
	sw.Step, sw.StepStarted, sw.Message = s, timePtr(t.in.Now), msg
}

func timePtr(t time.Time) *metav1.Time {
	m := metav1.NewTime(t.Truncate(time.Second))
	return &m
}
