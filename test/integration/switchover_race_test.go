package integration

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleetv1alpha1 "github.com/fleetdb/fleetdb/apis/v1alpha1"
	"github.com/fleetdb/fleetdb/member"
)

// TestSwitchoverRaces runs a switchover against the races its status write
// and its abort meet, with the "never two primaries" watcher on: a user's
// abort stored between the hub's read and its write of the step to Promote;
// at each step, a status write of the hub from before a restart that lands
// after it (a request that timed out on the client and reached the API
// server later);
// an abort while CloudNativePG is still demoting the old primary.
func TestSwitchoverRaces(t *testing.T) {
	ic := &statusInterceptor{}
	opts := envOptions{hubWrap: ic.wrap}
	e := startEnvWith(t, opts, "m1", "m2", "m3")
	for _, m := range []string{"m1", "m2", "m3"} {
		setReplication(NewWithT(t), e, m, "$(DATABASE)-rw.$(NAMESPACE)."+m+".fleet.test")
	}
	sim := newCNPGSim(e, 500*time.Millisecond)
	go sim.run(e.ctx)
	t.Run("an abort stored between the hub's read and its write of Promote is honoured: the target is never written primary", func(t *testing.T) {
		testAbortRacingPromote(t, e, sim, ic)
	})
	t.Run("a status write of each step from before a hub restart that lands after it is refused: no old step or promotion token comes back", func(t *testing.T) {
		testLateWriteAfterRestart(t, e, sim, ic, opts)
	})
	t.Run("an abort waits while CloudNativePG demotes the old primary, then makes it primary again", func(t *testing.T) {
		testAbortDuringDemotion(t, e, sim)
	})
	g := NewWithT(t)
	g.Expect(sim.unrecoverableClusters()).To(BeEmpty(), "Clusters a used promotion token was rendered on again")
}

func testAbortRacingPromote(t *testing.T, e *env, sim *cnpgSim, ic *statusInterceptor) {
	g := NewWithT(t)
	ns := e.namespace("race-abort")
	members := []string{"m1", "m2"}
	w := e.watchedTopologyDB(t, g, ns, "orders", members...)

	// The user sets primaryCluster back to m1 after the hub read the
	// Database to decide the move to Promote and before its write lands.
	aborted := make(chan error, 1)
	ic.arm(ns, "orders", []string{`"step":"Promote"`}, func() {
		cctx, cancel := context.WithTimeout(e.ctx, 30*time.Second)
		defer cancel()
		aborted <- setPrimaryNow(cctx, e, ns, "orders", "m1")
	}, false)
	defer ic.disarm()
	e.setPrimary(g, ns, "orders", "m2")
	g.Eventually(aborted).WithTimeout(eventually).Should(Receive(BeNil()), "the abort was written while the hub wrote Promote")

	db := e.expectStable(g, ns, "orders", "m1", members...)
	last := db.Status.Topology.LastSwitchover
	g.Expect(last).NotTo(BeNil())
	g.Expect(last.Outcome).To(Equal("Aborted"), last.Message)
	g.Expect(last.To).To(Equal("m2"))
	g.Expect(w.everPrimary("m2")).To(BeFalse(), "the target is never written primary once the abort is stored")
	n, seen := w.most()
	g.Expect(n).To(Equal(1), "members written as primary at once: %v", seen)
}

func testLateWriteAfterRestart(t *testing.T, e *env, sim *cnpgSim, ic *statusInterceptor, opts envOptions) {
	g := NewWithT(t)
	ns := e.namespace("race-late")
	members := []string{"m1", "m2", "m3"}
	const from, to = "m1", "m2"
	steps := []fleetv1alpha1.SwitchoverStep{
		fleetv1alpha1.StepCheckTarget, fleetv1alpha1.StepDemote, fleetv1alpha1.StepWaitDemotion,
		fleetv1alpha1.StepPromote, fleetv1alpha1.StepWaitPromotion, fleetv1alpha1.StepRepoint,
	}
	// One Database per step, all at once (one hub restart for all): the
	// hub's status write that enters its step fails on the client and
	// reaches the API server later, after the switchover finished, the
	// hub restarted and a switchover back began.
	names := make([]string, len(steps))
	watches := make([]*primaryWatch, len(steps))
	used := make([]map[string]bool, len(steps))
	for i := range steps {
		names[i] = fmt.Sprintf("ledger-%d", i)
		watches[i] = e.watchTopologyDB(t, g, ns, names[i], members...)
		used[i] = map[string]bool{}
	}
	for i := range steps {
		e.expectStable(g, ns, names[i], from, members...)
		// A pass that sees several steps end writes only the last one: the
		// first write of this step or a later one is held.
		var contains []string
		for _, s := range steps[i:] {
			contains = append(contains, `"step":"`+string(s)+`"`)
		}
		ic.arm(ns, names[i], contains, nil, true)
	}
	for i, step := range steps {
		t.Logf("%s: holding the write of step %s or a later one (%s to %s)", names[i], step, from, to)
		e.setPrimary(g, ns, names[i], to)
	}
	for i, step := range steps {
		db := e.expectStable(g, ns, names[i], to, members...)
		used[i][db.Status.Topology.LastSwitchover.DemotionToken] = true
		g.Eventually(func(g Gomega) {
			_, tok := e.replicaOf(g, to, ns, names[i])
			g.Expect(tok).To(BeEmpty(), "the promotion token is dropped once promoted")
		}).WithTimeout(eventually).WithPolling(poll).Should(Succeed())
		g.Expect(ic.heldCount(ns, names[i])).To(Equal(1), "the write of %s was held", step)
	}

	e.stopHub()
	e.startHub(opts)

	// Back to from; to's demotions stay in progress while the old writes land.
	sim.holdDemotions(to, true)
	for i := range steps {
		e.setPrimary(g, ns, names[i], from)
	}
	for i := range steps {
		g.Eventually(func(g Gomega) {
			sw := e.getDB(ns, names[i]).Status.Topology.Switchover
			g.Expect(sw).NotTo(BeNil())
			g.Expect(sw.To).To(Equal(from))
			g.Expect(sw.Step).To(Equal(fleetv1alpha1.StepWaitDemotion))
		}).WithTimeout(eventually).WithPolling(poll).Should(Succeed())
	}
	for i, step := range steps {
		code, err := ic.replay(e.ctx, ns, names[i])
		t.Logf("%s: the held write of %s landed with %d (%v)", names[i], step, code, err)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(code).To(Equal(http.StatusConflict), "%s: the write of %s from before the restart is refused (its resourceVersion is old)", names[i], step)
	}
	g.Consistently(func(g Gomega) {
		for i, step := range steps {
			for _, m := range members {
				p, tok := e.replicaOf(g, m, ns, names[i])
				g.Expect(used[i]).NotTo(HaveKey(tok), "%s: %s is never written with a used promotion token (%s)", names[i], m, step)
				g.Expect(p).NotTo(Equal(m), "%s: no member is written primary while %s demotes (%s)", names[i], to, step)
			}
			sw := e.getDB(ns, names[i]).Status.Topology.Switchover
			g.Expect(sw).NotTo(BeNil(), "%s (%s)", names[i], step)
			g.Expect(sw.From).To(Equal(to))
			g.Expect(sw.To).To(Equal(from))
			g.Expect(sw.Step).To(Equal(fleetv1alpha1.StepWaitDemotion), "%s: after the write of %s landed", names[i], step)
		}
		g.Expect(sim.unrecoverableClusters()).To(BeEmpty())
	}).WithTimeout(3 * time.Second).WithPolling(100 * time.Millisecond).Should(Succeed())
	sim.holdDemotions(to, false)
	for i := range steps {
		db := e.expectStable(g, ns, names[i], from, members...)
		g.Expect(db.Status.Topology.LastSwitchover.Outcome).To(Equal("Succeeded"))
		g.Expect(used[i]).NotTo(HaveKey(db.Status.Topology.LastSwitchover.DemotionToken))
	}
	g.Expect(sim.unrecoverableClusters()).To(BeEmpty())
	for i, w := range watches {
		n, seen := w.most()
		g.Expect(n).To(Equal(1), "%s: members written as primary at once: %v", names[i], seen)
	}
}

func testAbortDuringDemotion(t *testing.T, e *env, sim *cnpgSim) {
	g := NewWithT(t)
	ns := e.namespace("race-demoting")
	members := []string{"m1", "m2"}
	w := e.watchedTopologyDB(t, g, ns, "stock", members...)

	sim.holdDemotions("m1", true)
	defer sim.holdDemotions("m1", false)
	e.setPrimary(g, ns, "stock", "m2")
	g.Eventually(func(g Gomega) {
		db := e.getDB(ns, "stock")
		g.Expect(db.Status.Topology.Switchover).NotTo(BeNil())
		g.Expect(db.Status.Topology.Switchover.Step).To(Equal(fleetv1alpha1.StepWaitDemotion))
		g.Expect(switchInProgress(g, e, "m1", ns, "stock")).To(BeTrue())
		// The hub has seen it: an abort the hub asks for before its report
		// of the switch arrived is written at once, and CloudNativePG's
		// webhook (not played here) refuses it until the switch ended.
		g.Expect(db.Status.Topology.Switchover.Message).To(ContainSubstring("CloudNativePG's replica switch is in progress"))
	}).WithTimeout(eventually).WithPolling(poll).Should(Succeed())

	// Abort while CloudNativePG demotes m1: its webhook would refuse m1's
	// role back; the hub waits and says so.
	e.setPrimary(g, ns, "stock", "m1")
	g.Eventually(func(g Gomega) {
		db := e.getDB(ns, "stock")
		c := condition(db.Status.Conditions, fleetv1alpha1.ConditionTopologyStable)
		g.Expect(c.Reason).To(Equal(fleetv1alpha1.ReasonAbortWaitingForDemotion), c.Message)
		g.Expect(c.Status).To(Equal(metav1.ConditionFalse))
		g.Expect(db.Status.Topology.Switchover).NotTo(BeNil(), "the switchover stays recorded until the abort is taken")
		g.Expect(db.Status.Topology.Switchover.Step).To(Equal(fleetv1alpha1.StepWaitDemotion))
	}).WithTimeout(eventually).WithPolling(poll).Should(Succeed())
	p, _ := e.replicaOf(g, "m1", ns, "stock")
	g.Expect(p).To(Equal("m2"), "m1 is not written back while its demotion runs")
	p, _ = e.replicaOf(g, "m2", ns, "stock")
	g.Expect(p).To(Equal("m1"), "the target is never written primary")

	// The demotion finishes: the abort is taken, m1 is primary again.
	sim.holdDemotions("m1", false)
	db := e.expectStable(g, ns, "stock", "m1", members...)
	g.Expect(db.Status.Topology.LastSwitchover.Outcome).To(Equal("Aborted"))
	g.Expect(w.everPrimary("m2")).To(BeFalse())
	n, seen := w.most()
	g.Expect(n).To(Equal(1), "members written as primary at once: %v", seen)
}

// watchedTopologyDB creates a PrimaryStandby Database with primary m1 over
// members, with the "never two primaries" watcher running for the test, and
// waits for it to be stable.
func (e *env) watchedTopologyDB(t *testing.T, g Gomega, ns, name string, members ...string) *primaryWatch {
	w := e.watchTopologyDB(t, g, ns, name, members...)
	e.expectStable(g, ns, name, "m1", members...)
	return w
}

// watchTopologyDB is watchedTopologyDB without the wait for it to be stable.
func (e *env) watchTopologyDB(t *testing.T, g Gomega, ns, name string, members ...string) *primaryWatch {
	w := &primaryWatch{e: e, ns: ns, name: name}
	ctx, cancel := context.WithCancel(e.ctx)
	t.Cleanup(cancel)
	go w.run(ctx)
	g.Expect(e.hub.Create(e.ctx, newTopologyDB(ns, name, "m1", members...))).To(Succeed())
	return w
}

// switchInProgress reads a member Cluster's status.switchReplicaClusterStatus.inProgress.
func switchInProgress(g Gomega, e *env, m, ns, name string) bool {
	u := member.NewCNPGCluster()
	g.Expect(e.member(m).Get(e.ctx, client.ObjectKey{Namespace: ns, Name: name}, u)).To(Succeed())
	on, _, _ := unstructured.NestedBool(u.Object, "status", "switchReplicaClusterStatus", "inProgress")
	return on
}

// setPrimaryNow sets spec.topology.primaryCluster once the write does not conflict.
func setPrimaryNow(ctx context.Context, e *env, ns, name, primary string) error {
	for {
		db := &fleetv1alpha1.Database{}
		err := e.hub.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, db)
		if err == nil {
			db.Spec.Topology.PrimaryCluster = primary
			if err = e.hub.Update(ctx, db); err == nil {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return errors.Join(ctx.Err(), err)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// statusInterceptor stands between the hub and its API server for the
// status writes of the Databases it is armed for: the first write of each
// whose body contains one of some strings either runs a function before it
// is sent (a write stored between the hub's read and its write) or is held
// (the hub gets an error, and the request is sent by replay later, as a
// request that timed out on the client and reached the server afterwards).
type statusInterceptor struct {
	mu sync.Mutex
	// armed are the Databases' status paths still waiting for their write.
	armed map[string]statusArm
	// held are the held requests by status path.
	held map[string][]heldRequest
}

type statusArm struct {
	contains []string
	before   func()
	hold     bool
}

type heldRequest struct {
	url    string
	header http.Header
	body   []byte
	next   http.RoundTripper
}

func statusPath(ns, name string) string {
	return "/apis/fleetdb.io/v1alpha1/namespaces/" + ns + "/databases/" + name + "/status"
}

func (i *statusInterceptor) arm(ns, name string, contains []string, before func(), hold bool) {
	i.mu.Lock()
	defer i.mu.Unlock()
	if i.armed == nil {
		i.armed, i.held = map[string]statusArm{}, map[string][]heldRequest{}
	}
	i.armed[statusPath(ns, name)] = statusArm{contains: contains, before: before, hold: hold}
}

func (i *statusInterceptor) disarm() {
	i.mu.Lock()
	defer i.mu.Unlock()
	clear(i.armed)
}

func (i *statusInterceptor) heldCount(ns, name string) int {
	i.mu.Lock()
	defer i.mu.Unlock()
	return len(i.held[statusPath(ns, name)])
}

func (i *statusInterceptor) wrap(next http.RoundTripper) http.RoundTripper {
	return roundTripperFunc(func(req *http.Request) (*http.Response, error) {
		i.mu.Lock()
		_, armed := i.armed[req.URL.Path]
		armed = armed && req.Method == http.MethodPatch
		i.mu.Unlock()
		if !armed || req.Body == nil {
			return next.RoundTrip(req)
		}
		body, err := io.ReadAll(req.Body)
		_ = req.Body.Close()
		if err != nil {
			return nil, err
		}
		req.Body = io.NopCloser(bytes.NewReader(body))
		i.mu.Lock()
		a, ok := i.armed[req.URL.Path]
		match := ok && slices.ContainsFunc(a.contains, func(c string) bool { return strings.Contains(string(body), c) })
		if match {
			delete(i.armed, req.URL.Path)
			if a.hold {
				i.held[req.URL.Path] = append(i.held[req.URL.Path], heldRequest{url: req.URL.String(), header: req.Header.Clone(), body: body, next: next})
			}
		}
		i.mu.Unlock()
		switch {
		case match && a.hold:
			return nil, errors.New("injected: the status write timed out before its response")
		case match && a.before != nil:
			a.before()
		}
		return next.RoundTrip(req)
	})
}

// replay sends the held requests of Database ns/name, as they were, through
// the transport of the hub that made them; it returns the last response's
// status code.
func (i *statusInterceptor) replay(ctx context.Context, ns, name string) (int, error) {
	i.mu.Lock()
	held := i.held[statusPath(ns, name)]
	delete(i.held, statusPath(ns, name))
	i.mu.Unlock()
	code := 0
	for _, h := range held {
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		req, err := http.NewRequestWithContext(cctx, http.MethodPatch, h.url, bytes.NewReader(h.body))
		if err != nil {
			cancel()
			return 0, err
		}
		req.Header = h.header.Clone()
		resp, err := h.next.RoundTrip(req)
		if err != nil {
			cancel()
			return 0, err
		}
		code = resp.StatusCode
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
		cancel()
	}
	return code, nil
}
