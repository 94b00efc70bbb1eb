package integration

import (
	"bytes"
	"context"
	"errors"
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
	w := e.watchedTopologyDB(t, g, ns, "ledger", members...)

	// For each step: the hub's status write that enters it fails on the
	// client and reaches the API server later, after the switchover
	// finished, the hub restarted and a switchover back began.
	used := map[string]bool{}
	const from, to = "m1", "m2"
	steps := []fleetv1alpha1.SwitchoverStep{
		fleetv1alpha1.StepCheckTarget, fleetv1alpha1.StepDemote, fleetv1alpha1.StepWaitDemotion,
		fleetv1alpha1.StepPromote, fleetv1alpha1.StepWaitPromotion, fleetv1alpha1.StepRepoint,
	}
	for i, step := range steps {
		// A pass that sees several steps end writes only the last one: the
		// first write of this step or a later one is held.
		var contains []string
		for _, s := range steps[i:] {
			contains = append(contains, `"step":"`+string(s)+`"`)
		}
		t.Logf("holding the write of step %s or a later one (%s to %s)", step, from, to)
		ic.arm(ns, "ledger", contains, nil, true)
		e.setPrimary(g, ns, "ledger", to)
		db := e.expectStable(g, ns, "ledger", to, members...)
		used[db.Status.Topology.LastSwitchover.DemotionToken] = true
		g.Eventually(func(g Gomega) {
			_, tok := e.replicaOf(g, to, ns, "ledger")
			g.Expect(tok).To(BeEmpty(), "the promotion token is dropped once promoted")
		}).WithTimeout(eventually).WithPolling(poll).Should(Succeed())
		g.Expect(ic.heldCount()).To(Equal(1), "the write of %s was held", step)

		e.stopHub()
		e.startHub(opts)

		// Back to from; to's demotion stays in progress while the old write lands.
		sim.holdDemotions(to, true)
		e.setPrimary(g, ns, "ledger", from)
		g.Eventually(func(g Gomega) {
			sw := e.getDB(ns, "ledger").Status.Topology.Switchover
			g.Expect(sw).NotTo(BeNil())
			g.Expect(sw.To).To(Equal(from))
			g.Expect(sw.Step).To(Equal(fleetv1alpha1.StepWaitDemotion))
		}).WithTimeout(eventually).WithPolling(poll).Should(Succeed())
		code, err := ic.replay(e.ctx)
		t.Logf("the held write of %s landed with %d (%v)", step, code, err)
		g.Consistently(func(g Gomega) {
			for _, m := range members {
				p, tok := e.replicaOf(g, m, ns, "ledger")
				g.Expect(used).NotTo(HaveKey(tok), "%s is never written with a used promotion token", m)
				g.Expect(p).NotTo(Equal(m), "no member is written primary while %s demotes", to)
			}
			sw := e.getDB(ns, "ledger").Status.Topology.Switchover
			g.Expect(sw).NotTo(BeNil())
			g.Expect(sw.From).To(Equal(to))
			g.Expect(sw.To).To(Equal(from))
			g.Expect(sw.Step).To(Equal(fleetv1alpha1.StepWaitDemotion))
			g.Expect(sim.unrecoverableClusters()).To(BeEmpty())
		}).WithTimeout(3*time.Second).WithPolling(100*time.Millisecond).Should(Succeed(), "after the write of %s landed", step)
		sim.holdDemotions(to, false)
		db = e.expectStable(g, ns, "ledger", from, members...)
		g.Expect(db.Status.Topology.LastSwitchover.Outcome).To(Equal("Succeeded"))
		g.Expect(used).NotTo(HaveKey(db.Status.Topology.LastSwitchover.DemotionToken))
		used[db.Status.Topology.LastSwitchover.DemotionToken] = true
	}
	g.Expect(sim.unrecoverableClusters()).To(BeEmpty())
	n, seen := w.most()
	g.Expect(n).To(Equal(1), "members written as primary at once: %v", seen)
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
	w := &primaryWatch{e: e, ns: ns, name: name}
	ctx, cancel := context.WithCancel(e.ctx)
	t.Cleanup(cancel)
	go w.run(ctx)
	g.Expect(e.hub.Create(e.ctx, newTopologyDB(ns, name, "m1", members...))).To(Succeed())
	e.expectStable(g, ns, name, "m1", members...)
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
// status writes of one Database: the first write whose body contains one
// of some strings either runs a function before it is sent (a write stored between
// the hub's read and its write) or is held (the hub gets an error, and the
// request is sent by replay later, as a request that timed out on the
// client and reached the server afterwards).
type statusInterceptor struct {
	mu       sync.Mutex
	path     string
	contains []string
	before   func()
	hold     bool
	held     []heldRequest
}

type heldRequest struct {
	url    string
	header http.Header
	body   []byte
	next   http.RoundTripper
}

func (i *statusInterceptor) arm(ns, name string, contains []string, before func(), hold bool) {
	i.mu.Lock()
	defer i.mu.Unlock()
	i.path = "/apis/fleetdb.io/v1alpha1/namespaces/" + ns + "/databases/" + name + "/status"
	i.contains, i.before, i.hold = contains, before, hold
}

func (i *statusInterceptor) disarm() {
	i.mu.Lock()
	defer i.mu.Unlock()
	i.path = ""
}

func (i *statusInterceptor) heldCount() int {
	i.mu.Lock()
	defer i.mu.Unlock()
	return len(i.held)
}

func (i *statusInterceptor) wrap(next http.RoundTripper) http.RoundTripper {
	return roundTripperFunc(func(req *http.Request) (*http.Response, error) {
		i.mu.Lock()
		armed := i.path != "" && req.Method == http.MethodPatch && req.URL.Path == i.path
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
		match := i.path != "" && slices.ContainsFunc(i.contains, func(c string) bool { return strings.Contains(string(body), c) })
		before, hold := i.before, i.hold
		if match {
			i.path = ""
			if hold {
				i.held = append(i.held, heldRequest{url: req.URL.String(), header: req.Header.Clone(), body: body, next: next})
			}
		}
		i.mu.Unlock()
		switch {
		case match && hold:
			return nil, errors.New("injected: the status write timed out before its response")
		case match && before != nil:
			before()
		}
		return next.RoundTrip(req)
	})
}

// replay sends the held requests, as they were, through the transport of
// the hub that made them; it returns the last response's status code.
func (i *statusInterceptor) replay(ctx context.Context) (int, error) {
	i.mu.Lock()
	held := i.held
	i.held = nil
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
