package database

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	fleetv1alpha1 "github.com/fleetdb/fleetdb/apis/v1alpha1"
	"github.com/fleetdb/fleetdb/hub/internal/topology"
	"github.com/fleetdb/fleetdb/member"
)

// cnpgModel plays CloudNativePG for the members of a topology: it takes
// what decideRole renders and reports the replication status back. Every
// member reports one system identifier; a promotion starts a timeline
// above every member's, a standby follows its primary's timeline, and a
// member that still ran a primary when another was promoted without a token
// diverged: it keeps its timeline for ever (no pg_rewind).
type cnpgModel struct {
	spec       map[string]topology.RenderedRole
	status     map[string]*member.ReplicationStatus
	frozen     map[string]bool // unreachable: writes not taken, nothing reported
	hung       map[string]bool // reachable, but writes are not taken
	unhealthy  map[string]bool
	diverged   map[string]bool
	issued     map[string]bool // demotion tokens issued
	owns       func(string) bool
	n          int
	maxPrimary int
	passes     int
	// restartpointEvery is how many passes (simulated seconds) apart the
	// standbys make restartpoints: PostgreSQL's default checkpoint_timeout
	// (5m) is fleetdb's default stepTimeout; psDB's is 10s.
	restartpointEvery int
}

const restartpointEvery = 30

// demotionToken is a token as CloudNativePG writes it: base64 of the
// demoted primary's pg_controldata (PgControldataTokenContent in
// pkg/utils/parser.go, v1.30.0); n makes each one unique, as the REDO
// location does.
func demotionToken(system string, timeline int64, n int) string {
	b, _ := json.Marshal(map[string]string{
		"latestCheckpointTimelineID": strconv.FormatInt(timeline, 10), "databaseSystemIdentifier": system,
		"latestCheckpointREDOLocation": fmt.Sprintf("0/%X", n<<24), "operatorVersion": "1.30.0",
	})
	return base64.StdEncoding.EncodeToString(b)
}

func newModel(members ...string) *cnpgModel {
	m := &cnpgModel{spec: map[string]topology.RenderedRole{}, status: map[string]*member.ReplicationStatus{},
		frozen: map[string]bool{}, hung: map[string]bool{}, unhealthy: map[string]bool{}, diverged: map[string]bool{}, issued: map[string]bool{},
		restartpointEvery: restartpointEvery}
	for _, name := range members {
		m.status[name] = &member.ReplicationStatus{SystemID: "7400000000000000001", TimelineID: 1}
	}
	return m
}

// promoted starts a new timeline on name; a forced promotion diverges every
// other member still running a primary.
func (m *cnpgModel) promoted(name string, forced bool) {
	tl := int64(0)
	for other, st := range m.status {
		tl = max(tl, st.TimelineID)
		if forced && other != name && st.RunsPrimary {
			m.diverged[other] = true
		}
	}
	m.status[name].TimelineID = tl + 1
}

// render applies the rendered roles the stored status decides.
func (m *cnpgModel) render(db *fleetv1alpha1.Database) {
	for _, name := range slices.Sorted(maps.Keys(m.status)) {
		st := m.status[name]
		if m.frozen[name] || m.hung[name] {
			continue
		}
		role, ok := topology.DecideRole(db, name)
		if !ok {
			continue
		}
		prev := m.spec[name]
		m.spec[name] = role
		switch {
		case prev.Primary == name && role.Primary != name:
			m.n++
			st.DemotionToken = demotionToken(st.SystemID, st.TimelineID, m.n)
			m.issued[st.DemotionToken] = true
		case role.Primary == name && prev.Primary != name && prev.Primary != "" && role.PromotionToken != "" && m.issued[role.PromotionToken]:
			st.LastPromotionToken = role.PromotionToken
			m.promoted(name, false)
		case role.Primary == name && prev.Primary != name && prev.Primary != "" && role.PromotionToken == "":
			m.promoted(name, true)
		}
		st.Primary = role.Primary
		st.RunsPrimary = role.Primary == name
		st.Healthy = !m.unhealthy[name]
	}
	// A standby reports the timeline of its last restartpoint
	// (pg_control_checkpoint() in fillStatusFromReplica,
	// pkg/management/postgres/probes.go, CloudNativePG v1.30.0), which
	// PostgreSQL makes every checkpoint_timeout: after a promotion it goes
	// on reporting the older timeline for a while. The model makes one
	// every restartpointEvery passes, longer than psDB's step timeout.
	m.passes++
	for name, st := range m.status {
		if p := m.status[st.Primary]; !st.RunsPrimary && !m.diverged[name] && p != nil && p.TimelineID > st.TimelineID &&
			m.passes%m.restartpointEvery == 0 {
			st.TimelineID = p.TimelineID
		}
	}
	primaries := 0
	for name, r := range m.spec {
		if r.Primary == name {
			primaries++
		}
	}
	m.maxPrimary = max(m.maxPrimary, primaries)
}

func (m *cnpgModel) views(at time.Time) map[string]topology.MemberView {
	out := map[string]topology.MemberView{}
	for name, st := range m.status {
		if m.frozen[name] {
			out[name] = topology.MemberView{Unreachable: true}
			continue
		}
		c := *st
		out[name] = topology.MemberView{Replication: &c, At: at, Reported: true}
	}
	return out
}

func psDB(primary string) *fleetv1alpha1.Database {
	return &fleetv1alpha1.Database{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "db"},
		Spec: fleetv1alpha1.DatabaseSpec{Topology: &fleetv1alpha1.TopologySpec{
			Mode: fleetv1alpha1.TopologyPrimaryStandby, PrimaryCluster: primary,
			StepTimeout: &metav1.Duration{Duration: 10 * time.Second},
		}},
	}
}

// drive runs passes (render, observe, decide, store) for n simulated seconds.
func drive(db *fleetv1alpha1.Database, m *cnpgModel, now *time.Time, n int) *topology.Pass {
	var pass *topology.Pass
	targets := map[string]bool{}
	for name := range m.status {
		targets[name] = true
	}
	for range n {
		m.render(db)
		*now = now.Add(time.Second)
		pass = topology.Run(topology.Input{DB: db, Targets: targets, Views: m.views(*now), Now: *now, Owns: m.owns})
		st := pass.Status
		db.Status.Topology = &st
	}
	return pass
}

func TestSwitchover(t *testing.T) {
	g := NewWithT(t)
	now := time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC)
	db, m := psDB("a"), newModel("a", "b", "c")
	g.Expect(topology.Decided(db)).To(BeFalse(), "members wait for the stored primary")
	pass := drive(db, m, &now, 5)
	g.Expect(pass.CondReason).To(Equal(fleetv1alpha1.ReasonTopologyStable))
	g.Expect(m.spec["b"].Primary).To(Equal("a"))

	db.Spec.Topology.PrimaryCluster = "b"
	pass = drive(db, m, &now, 20)
	g.Expect(pass.CondReason).To(Equal(fleetv1alpha1.ReasonTopologyStable), pass.Msg)
	st := db.Status.Topology
	g.Expect(st.PrimaryCluster).To(Equal("b"))
	g.Expect(st.Switchover).To(BeNil())
	g.Expect(st.LastSwitchover.Outcome).To(Equal(topology.SwitchoverSucceeded))
	g.Expect(st.LastSwitchover.DemotionToken).To(Equal(m.status["b"].LastPromotionToken))
	for _, name := range []string{"a", "b", "c"} {
		g.Expect(m.spec[name].Primary).To(Equal("b"), name)
	}
	g.Expect(m.maxPrimary).To(Equal(1), "never two members rendered primary")

	// And back: a second switchover does not take a's old token.
	db.Spec.Topology.PrimaryCluster = "a"
	drive(db, m, &now, 20)
	g.Expect(db.Status.Topology.PrimaryCluster).To(Equal("a"))
	g.Expect(m.maxPrimary).To(Equal(1))
}

// TestSwitchoverBackBeforeRestartpoint: right after a switchover the
// demoted primary still reports the older timeline (CloudNativePG reports
// a standby's last restartpoint's); a switchover back to it goes through,
// since the demotion token shows it ends where the new primary's timeline
// branched. A member on another timeline than the token's is still waited
// for.
func TestSwitchoverBackBeforeRestartpoint(t *testing.T) {
	g := NewWithT(t)
	now := time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC)
	db, m := psDB("a"), newModel("a", "b", "c")
	m.restartpointEvery = 1000 // none within the test
	drive(db, m, &now, 5)
	db.Spec.Topology.PrimaryCluster = "b"
	drive(db, m, &now, 20)
	g.Expect(db.Status.Topology.PrimaryCluster).To(Equal("b"))
	g.Expect(m.status["a"].TimelineID).To(Equal(int64(1)), "a reports its last restartpoint's timeline")
	g.Expect(m.status["b"].TimelineID).To(Equal(int64(2)))

	// c was a standby, not the demoted primary: nothing shows it follows.
	db.Spec.Topology.PrimaryCluster = "c"
	pass := drive(db, m, &now, 15)
	g.Expect(pass.CondReason).To(Equal(fleetv1alpha1.ReasonTargetUnhealthy), pass.Msg)
	g.Expect(m.spec["c"].Primary).To(Equal("b"), "nothing was changed")
	db.Spec.Topology.PrimaryCluster = "b" // abort
	drive(db, m, &now, 5)

	// Back to a, which b replaced with its demotion token.
	db.Spec.Topology.PrimaryCluster = "a"
	pass = drive(db, m, &now, 20)
	st := db.Status.Topology
	g.Expect(st.PrimaryCluster).To(Equal("a"), pass.Msg)
	g.Expect(st.LastSwitchover.Outcome).To(Equal(topology.SwitchoverSucceeded))
	g.Expect(st.LastSwitchover.From).To(Equal("b"))
	g.Expect(m.maxPrimary).To(Equal(1), "never two members rendered primary")
}

func TestSwitchoverTargetUnhealthy(t *testing.T) {
	g := NewWithT(t)
	now := time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC)
	db, m := psDB("a"), newModel("a", "b")
	drive(db, m, &now, 3)
	m.unhealthy["b"] = true
	db.Spec.Topology.PrimaryCluster = "b"
	pass := drive(db, m, &now, 15)
	g.Expect(pass.CondReason).To(Equal(fleetv1alpha1.ReasonTargetUnhealthy))
	g.Expect(m.spec["a"].Primary).To(Equal("a"), "nothing was changed")
	g.Expect(m.spec["b"].Primary).To(Equal("a"))

	// Abort: a stays primary. b, its only standby, is still unhealthy: a's
	// commits wait for it (durability Synchronous), and the condition says
	// so; Stable again once b is healthy.
	db.Spec.Topology.PrimaryCluster = "a"
	pass = drive(db, m, &now, 3)
	g.Expect(db.Status.Topology.LastSwitchover.Outcome).To(Equal(topology.SwitchoverAborted))
	g.Expect(pass.CondReason).To(Equal(fleetv1alpha1.ReasonCommitsWaiting), pass.Msg)
	g.Expect(pass.Msg).To(ContainSubstring("b not a healthy standby of a"))
	m.unhealthy["b"] = false
	pass = drive(db, m, &now, 3)
	g.Expect(pass.CondReason).To(Equal(fleetv1alpha1.ReasonTopologyStable), pass.Msg)

	// Asynchronous: nothing waits for the unhealthy b.
	db.Spec.Topology.Durability = fleetv1alpha1.DurabilityAsynchronous
	m.unhealthy["b"] = true
	pass = drive(db, m, &now, 3)
	g.Expect(pass.CondReason).To(Equal(fleetv1alpha1.ReasonTopologyStable), pass.Msg)
}

func TestSwitchoverDemotionTimesOut(t *testing.T) {
	g := NewWithT(t)
	now := time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC)
	db, m := psDB("a"), newModel("a", "b")
	drive(db, m, &now, 3)
	db.Spec.Topology.PrimaryCluster = "b"
	// a takes the demotion but never publishes a token.
	drive(db, m, &now, 1)
	for range 30 {
		m.render(db)
		m.status["a"].DemotionToken = ""
		now = now.Add(time.Second)
		pass := topology.Run(topology.Input{DB: db, Targets: map[string]bool{"a": true, "b": true}, Views: m.views(now), Now: now})
		st := pass.Status
		db.Status.Topology = &st
	}
	sw := db.Status.Topology.Switchover
	g.Expect(sw.Outcome).To(Equal(topology.SwitchoverFailed))
	g.Expect(sw.Step).To(Equal(fleetv1alpha1.StepWaitDemotion))
	g.Expect(m.spec["b"].Primary).To(Equal("a"), "the target is never promoted without the token")
	g.Expect(m.maxPrimary).To(Equal(1))

	db.Spec.Topology.PrimaryCluster = "a"
	drive(db, m, &now, 3)
	g.Expect(m.spec["a"].Primary).To(Equal("a"), "abort before Promote puts the old primary back")
	g.Expect(m.maxPrimary).To(Equal(1))
}

func TestForcedFailover(t *testing.T) {
	g := NewWithT(t)
	now := time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC)
	db, m := psDB("a"), newModel("a", "b", "c")
	drive(db, m, &now, 3)
	m.frozen["a"] = true
	pass := drive(db, m, &now, 2)
	g.Expect(pass.CondReason).To(Equal(fleetv1alpha1.ReasonPrimaryUnreachable))
	g.Expect(db.Status.Topology.Phase).To(Equal(fleetv1alpha1.TopologyDegraded))

	db.Spec.Topology.PrimaryCluster = "b"
	db.Spec.Topology.Failover = &fleetv1alpha1.FailoverSpec{TargetCluster: "b", Reason: "a is gone"}
	// Fenced is stored before b is rendered primary.
	drive(db, m, &now, 1)
	g.Expect(db.Status.Topology.Fenced).To(ConsistOf("a"))
	g.Expect(m.spec["b"].Primary).To(Equal("a"))
	pass = drive(db, m, &now, 15)
	st := db.Status.Topology
	g.Expect(st.PrimaryCluster).To(Equal("b"))
	g.Expect(st.LastSwitchover.Kind).To(Equal(fleetv1alpha1.SwitchoverForced))
	g.Expect(st.Fenced).To(ConsistOf("a"))
	g.Expect(pass.CondReason).To(Equal(fleetv1alpha1.ReasonFenced))
	g.Expect(topology.MemberRoleOf(st, "a")).To(Equal(fleetv1alpha1.RoleFenced))

	// a comes back: its first write makes it a standby of b. It ran a
	// primary when b was promoted: it cannot follow b's timeline and stays
	// fenced, and the condition says what to do.
	m.frozen["a"] = false
	role, _ := topology.DecideRole(db, "a")
	g.Expect(role.Primary).To(Equal("b"))
	pass = drive(db, m, &now, 3)
	g.Expect(db.Status.Topology.Fenced).To(ConsistOf("a"))
	g.Expect(pass.CondReason).To(Equal(fleetv1alpha1.ReasonFenced), pass.Msg)
	g.Expect(pass.Msg).To(And(ContainSubstring("a does not stream from b"), ContainSubstring("a on timeline 1, b on timeline 2"), ContainSubstring("delete its CloudNativePG Cluster in a")))

	// Rebuilt (its Cluster deleted and cloned from b): released once it
	// reports b's timeline (its first restartpoint).
	m.diverged["a"] = false
	pass = drive(db, m, &now, restartpointEvery)
	g.Expect(db.Status.Topology.Fenced).To(BeEmpty())
	g.Expect(pass.CondReason).To(Equal(fleetv1alpha1.ReasonTopologyStable), pass.Msg)
	g.Expect(topology.MemberRoleOf(db.Status.Topology, "a")).To(Equal(fleetv1alpha1.RoleStandby))
}

// TestForcedFailoverReachable: a forced promotion whose old primary is
// reachable demotes it and sees it demoted before the target is promoted.
func TestForcedFailoverReachable(t *testing.T) {
	g := NewWithT(t)
	now := time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC)
	db, m := psDB("a"), newModel("a", "b", "c")
	drive(db, m, &now, 3)
	m.hung["a"] = true // reachable, its writes do not land
	db.Spec.Topology.PrimaryCluster = "b"
	db.Spec.Topology.Failover = &fleetv1alpha1.FailoverSpec{TargetCluster: "b", Reason: "b now"}
	pass := drive(db, m, &now, 5)
	g.Expect(db.Status.Topology.Switchover.Step).To(Equal(fleetv1alpha1.StepFence))
	g.Expect(pass.Msg).To(ContainSubstring("a is reachable"))
	g.Expect(m.spec["b"].Primary).To(Equal("a"), "not promoted while a may still be primary")

	m.hung["a"] = false
	pass = drive(db, m, &now, restartpointEvery)
	st := db.Status.Topology
	g.Expect(st.PrimaryCluster).To(Equal("b"))
	g.Expect(st.LastSwitchover.Kind).To(Equal(fleetv1alpha1.SwitchoverForced))
	g.Expect(m.maxPrimary).To(Equal(1), "never two members rendered primary")
	g.Expect(m.diverged["a"]).To(BeFalse())
	g.Expect(st.Fenced).To(BeEmpty(), "a was demoted first: it follows b")
	g.Expect(pass.CondReason).To(Equal(fleetv1alpha1.ReasonTopologyStable), pass.Msg)
}

// TestSwitchoverTargetNotStreaming: a healthy target from another system
// (or timeline) than the primary's is never promoted.
func TestSwitchoverTargetNotStreaming(t *testing.T) {
	g := NewWithT(t)
	now := time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC)
	db, m := psDB("a"), newModel("a", "b")
	drive(db, m, &now, 3)
	m.status["b"].SystemID = "7400000000000000002"
	db.Spec.Topology.PrimaryCluster = "b"
	pass := drive(db, m, &now, 15)
	g.Expect(pass.CondReason).To(Equal(fleetv1alpha1.ReasonTargetUnhealthy))
	g.Expect(pass.Msg).To(ContainSubstring("b to stream from a: b on timeline 1, a on timeline 1; system identifier 7400000000000000002, a's 7400000000000000001"))
	g.Expect(m.spec["a"].Primary).To(Equal("a"), "nothing was changed")
	g.Expect(m.spec["b"].Primary).To(Equal("a"))
}

// TestSwitchoverRefusedNotOwned: under --sharding, a switchover or forced
// promotion that involves a member this replica does not own is refused
// before anything changes.
func TestSwitchoverRefusedNotOwned(t *testing.T) {
	g := NewWithT(t)
	now := time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC)
	db, m := psDB("a"), newModel("a", "b", "c")
	drive(db, m, &now, 3)
	m.owns = func(name string) bool { return name != "c" }
	db.Spec.Topology.PrimaryCluster = "b"
	db.Spec.Topology.Failover = &fleetv1alpha1.FailoverSpec{TargetCluster: "b"}
	pass := drive(db, m, &now, 3)
	sw := db.Status.Topology.Switchover
	g.Expect(sw.Outcome).To(Equal(topology.SwitchoverFailed))
	g.Expect(sw.Step).To(Equal(fleetv1alpha1.StepCheckTarget))
	g.Expect(pass.CondReason).To(Equal(fleetv1alpha1.ReasonSwitchoverRefused))
	g.Expect(pass.Msg).To(ContainSubstring("does not own c"))
	g.Expect(db.Status.Topology.Fenced).To(BeEmpty(), "nothing fenced")
	for _, name := range []string{"a", "b", "c"} {
		g.Expect(m.spec[name].Primary).To(Equal("a"), name)
	}
}

// TestSwitchoverTrace: every step of a switchover is a span in the trace
// whose id the status keeps, across passes (and so across hub restarts).
func TestSwitchoverTrace(t *testing.T) {
	g := NewWithT(t)
	rec := tracetest.NewSpanRecorder()
	r := &databaseReconciler{tracer: sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec)).Tracer("test")}
	now := time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC)
	db, m := psDB("a"), newModel("a", "b")
	targets := map[string]bool{"a": true, "b": true}
	drive(db, m, &now, 3)
	db.Spec.Topology.PrimaryCluster = "b"
	for range 20 {
		m.render(db)
		now = now.Add(time.Second)
		pass := topology.Run(topology.Input{DB: db, Targets: targets, Views: m.views(now), Now: now, NewTraceID: newTraceID})
		r.switchoverSpans(context.Background(), db, pass)
		st := pass.Status
		db.Status.Topology = &st
	}
	last := db.Status.Topology.LastSwitchover
	g.Expect(last.Outcome).To(Equal(topology.SwitchoverSucceeded))
	g.Expect(last.TraceID).To(HaveLen(32))
	var steps []string
	for _, s := range rec.Ended() {
		g.Expect(s.SpanContext().TraceID().String()).To(Equal(last.TraceID), s.Name())
		if s.Name() == spanSwitchoverStep {
			for _, a := range s.Attributes() {
				if a.Key == attrSwitchoverStep {
					steps = append(steps, a.Value.AsString())
				}
			}
		}
	}
	g.Expect(steps).To(Equal([]string{"CheckTarget", "Demote", "WaitDemotion", "Promote", "WaitPromotion", "Repoint"}))
	g.Expect(rec.Ended()[len(rec.Ended())-1].Name()).To(Equal(spanSwitchover))
}

// TestTopologyAfterRestart: a hub that has no report yet keeps the stored
// summary, and a member it has not heard from is waited for at Repoint,
// not skipped as unreachable.
func TestTopologyAfterRestart(t *testing.T) {
	g := NewWithT(t)
	now := time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC)
	db, m := psDB("a"), newModel("a", "b", "c")
	pass := drive(db, m, &now, 3)
	st := fleetv1alpha1.DatabaseStatus{}
	pass.Apply(&st)
	db.Status.Conditions = st.Conditions
	g.Expect(pass.CondReason).To(Equal(fleetv1alpha1.ReasonTopologyStable))

	targets := map[string]bool{"a": true, "b": true, "c": true}
	none := map[string]topology.MemberView{}
	restarted := topology.Run(topology.Input{DB: db, Targets: targets, Views: none, Now: now})
	g.Expect(restarted.CondReason).To(Equal(fleetv1alpha1.ReasonTopologyStable), "no flap after a restart")
	g.Expect(restarted.Status.Phase).To(Equal(fleetv1alpha1.TopologyStable))

	// A switchover at Repoint: c has not reported since the restart.
	db.Spec.Topology.PrimaryCluster = "b"
	for range 30 {
		m.render(db)
		now = now.Add(time.Second)
		views := m.views(now)
		if sw := db.Status.Topology.Switchover; sw != nil && sw.Step == fleetv1alpha1.StepRepoint {
			delete(views, "c")
		}
		pass = topology.Run(topology.Input{DB: db, Targets: targets, Views: views, Now: now})
		top := pass.Status
		db.Status.Topology = &top
	}
	sw := db.Status.Topology.Switchover
	g.Expect(sw).NotTo(BeNil())
	g.Expect(sw.Step).To(Equal(fleetv1alpha1.StepRepoint), "c is waited for")
}

// TestSwitchoverTurnedForced: a switchover that waits for a lost primary's
// demotion becomes a forced promotion when spec.topology.failover asks.
func TestSwitchoverTurnedForced(t *testing.T) {
	g := NewWithT(t)
	now := time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC)
	db, m := psDB("a"), newModel("a", "b")
	drive(db, m, &now, 3)
	db.Spec.Topology.PrimaryCluster = "b"
	drive(db, m, &now, 1) // CheckTarget passed: a is being demoted
	m.frozen["a"] = true
	drive(db, m, &now, 3)
	g.Expect(db.Status.Topology.Switchover.Kind).To(Equal(fleetv1alpha1.SwitchoverPlanned))
	g.Expect(m.spec["b"].Primary).To(Equal("a"))

	db.Spec.Topology.Failover = &fleetv1alpha1.FailoverSpec{TargetCluster: "b"}
	drive(db, m, &now, 10)
	st := db.Status.Topology
	g.Expect(st.PrimaryCluster).To(Equal("b"))
	g.Expect(st.LastSwitchover.Kind).To(Equal(fleetv1alpha1.SwitchoverForced))
	g.Expect(st.Fenced).To(ConsistOf("a"))
	g.Expect(m.spec["b"].PromotionToken).To(BeEmpty(), "promoted without a token")
}

// TestAbortWaitsForDemotion: an abort while CloudNativePG reports the old
// primary's replica switch in progress is not taken (its webhook would
// refuse the old primary's role back) and the switchover does not move on;
// it is taken once the switch ended.
func TestAbortWaitsForDemotion(t *testing.T) {
	g := NewWithT(t)
	now := time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC)
	db, m := psDB("a"), newModel("a", "b")
	drive(db, m, &now, 3)
	db.Spec.Topology.PrimaryCluster = "b"
	drive(db, m, &now, 1)
	g.Expect(db.Status.Topology.Switchover.Step).To(Equal(fleetv1alpha1.StepDemote))
	targets := map[string]bool{"a": true, "b": true}
	pass := func() *topology.Pass {
		m.render(db)
		now = now.Add(time.Second)
		p := topology.Run(topology.Input{DB: db, Targets: targets, Views: m.views(now), Now: now})
		st := p.Status
		db.Status.Topology = &st
		return p
	}
	// a follows b, its switch runs, no token yet; then the user aborts.
	m.render(db)
	m.status["a"].DemotionToken, m.status["a"].SwitchInProgress = "", true
	db.Spec.Topology.PrimaryCluster = "a"
	for range 5 {
		m.status["a"].DemotionToken = ""
		p := pass()
		g.Expect(p.CondReason).To(Equal(fleetv1alpha1.ReasonAbortWaitingForDemotion), p.Msg)
		g.Expect(db.Status.Topology.Switchover).NotTo(BeNil())
		g.Expect(m.spec["a"].Primary).To(Equal("b"), "a is not written back while its switch runs")
		g.Expect(m.spec["b"].Primary).To(Equal("a"), "b is never promoted")
	}
	// The switch ends (with a token): the abort is taken, a is primary again.
	m.status["a"].SwitchInProgress, m.status["a"].DemotionToken = false, "token-late"
	pass()
	g.Expect(db.Status.Topology.Switchover).To(BeNil())
	g.Expect(db.Status.Topology.LastSwitchover.Outcome).To(Equal(topology.SwitchoverAborted))
	m.render(db)
	g.Expect(m.spec["a"].Primary).To(Equal("a"))
	g.Expect(m.spec["b"].Primary).To(Equal("a"))
	g.Expect(m.maxPrimary).To(Equal(1))
}
