package clusters

import (
	"context"
	"errors"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/cluster"

	fleetv1alpha1 "github.com/fleetdb/fleetdb/apis/v1alpha1"
)

// fakeCluster stands in for an engaged cluster; computeView only checks for nil.
type fakeCluster struct{ cluster.Cluster }

func TestComputeView(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	grace := 20 * time.Second
	unreachable := &failure{reason: fleetv1alpha1.ReasonUnreachable, message: "connection refused"}
	engaged := func(mut func(*run)) *member {
		r := &run{cl: fakeCluster{}, version: "v1.36.3", lastProbe: now}
		if mut != nil {
			mut(r)
		}
		return &member{name: "m", run: r}
	}

	tests := []struct {
		name          string
		m             *member
		joined, ready condition
		engaged       bool
	}{{
		name:   "secret missing",
		m:      &member{problem: &failure{reason: fleetv1alpha1.ReasonSecretNotFound, message: "Secret a/b not found"}},
		joined: condition{metav1.ConditionFalse, fleetv1alpha1.ReasonSecretNotFound, "Secret a/b not found"},
		ready:  condition{metav1.ConditionFalse, fleetv1alpha1.ReasonSecretNotFound, "Secret a/b not found"},
	}, {
		name:   "first connect in flight",
		m:      &member{run: &run{connecting: true}},
		joined: condition{metav1.ConditionUnknown, fleetv1alpha1.ReasonConnecting, messageConnecting},
		ready:  condition{metav1.ConditionUnknown, fleetv1alpha1.ReasonConnecting, messageConnecting},
	}, {
		name:   "connect failed, retry in flight keeps the failure",
		m:      &member{run: &run{connecting: true, connectErr: unreachable}},
		joined: condition{metav1.ConditionFalse, fleetv1alpha1.ReasonUnreachable, "connection refused"},
		ready:  condition{metav1.ConditionFalse, fleetv1alpha1.ReasonUnreachable, "connection refused"},
	}, {
		name:    "engaged and passing",
		m:       engaged(nil),
		joined:  condition{metav1.ConditionTrue, fleetv1alpha1.ReasonJoined, messageJoined},
		ready:   condition{metav1.ConditionTrue, fleetv1alpha1.ReasonProbeSucceeded, messageReady},
		engaged: true,
	}, {
		name: "engaged, failing within the grace period",
		m: engaged(func(r *run) {
			r.probeErr, r.failingSince = unreachable, now.Add(-grace+time.Second)
		}),
		joined:  condition{metav1.ConditionTrue, fleetv1alpha1.ReasonJoined, messageJoined},
		ready:   condition{metav1.ConditionTrue, fleetv1alpha1.ReasonProbeSucceeded, messageReady},
		engaged: true,
	}, {
		name: "engaged, failing for the grace period",
		m: engaged(func(r *run) {
			r.probeErr, r.failingSince = unreachable, now.Add(-grace)
		}),
		joined:  condition{metav1.ConditionTrue, fleetv1alpha1.ReasonJoined, messageJoined},
		ready:   condition{metav1.ConditionFalse, fleetv1alpha1.ReasonUnreachable, "connection refused"},
		engaged: true,
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			v := tt.m.computeView(now, grace)
			g.Expect(v.joined).To(Equal(tt.joined))
			g.Expect(v.ready).To(Equal(tt.ready))
			g.Expect(v.engaged).To(Equal(tt.engaged))
		})
	}
}

func TestRefreshReportsTransitions(t *testing.T) {
	g := NewWithT(t)
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	grace := 10 * time.Second
	m := &member{name: "m", run: &run{connecting: true}}

	changed, notify := m.refresh(now, grace)
	g.Expect(changed).To(BeTrue(), "the first view is news for the status")
	g.Expect(notify).To(BeFalse(), "not engaged, not ready: nothing for subscribers")
	g.Expect(m.health.Since).To(Equal(now))

	m.run.connecting, m.run.cl, m.run.version, m.run.lastProbe = false, fakeCluster{}, "v1", now
	changed, notify = m.refresh(now.Add(time.Second), grace)
	g.Expect(changed).To(BeTrue())
	g.Expect(notify).To(BeTrue(), "engaged and ready")
	g.Expect(m.health).To(Equal(Health{Engaged: true, Ready: true, Reason: fleetv1alpha1.ReasonProbeSucceeded, Message: messageReady, Since: now.Add(time.Second), LastProbe: now}))

	// A probe that only moves lastProbe changes nothing.
	m.run.lastProbe = now.Add(2 * time.Second)
	changed, notify = m.refresh(now.Add(2*time.Second), grace)
	g.Expect(changed).To(BeFalse())
	g.Expect(notify).To(BeFalse())
	g.Expect(m.health.LastProbe).To(Equal(now.Add(2 * time.Second)))

	// Failing: nothing within the grace period, then Ready=False.
	m.run.probeErr, m.run.failingSince = &failure{reason: fleetv1alpha1.ReasonUnreachable, message: "refused"}, now.Add(3*time.Second)
	changed, notify = m.refresh(now.Add(4*time.Second), grace)
	g.Expect(changed || notify).To(BeFalse())
	changed, notify = m.refresh(now.Add(13*time.Second), grace)
	g.Expect(changed).To(BeTrue())
	g.Expect(notify).To(BeTrue())
	g.Expect(m.health.Ready).To(BeFalse())
	g.Expect(m.health.Engaged).To(BeTrue())
	g.Expect(m.health.Since).To(Equal(now.Add(13 * time.Second)))
}

// TestRefreshReportsFirstFailedConnect: a member whose first connect fails
// is news for subscribers (not engaged, not Ready before or after): a hub
// that just started keeps showing such a member as last reported until
// then, and must learn that it is down.
func TestRefreshReportsFirstFailedConnect(t *testing.T) {
	g := NewWithT(t)
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	m := &member{name: "m", run: &run{connecting: true}}
	_, notify := m.refresh(now, 10*time.Second)
	g.Expect(notify).To(BeFalse(), "connecting: nothing known yet")
	g.Expect(m.health.Reason).To(Equal(fleetv1alpha1.ReasonConnecting))

	m.run.connecting, m.run.connectErr = false, &failure{reason: fleetv1alpha1.ReasonUnreachable, message: "refused"}
	changed, notify := m.refresh(now.Add(time.Second), 10*time.Second)
	g.Expect(changed).To(BeTrue())
	g.Expect(notify).To(BeTrue(), "the first failed connect is news")
	g.Expect(m.health.Reason).To(Equal(fleetv1alpha1.ReasonUnreachable))

	_, notify = m.refresh(now.Add(2*time.Second), 10*time.Second)
	g.Expect(notify).To(BeFalse(), "and only once")
}

func TestBackoff(t *testing.T) {
	g := NewWithT(t)
	g.Expect(backoff(0)).To(BeZero())
	g.Expect(backoff(1)).To(Equal(connectBackoffBase))
	g.Expect(backoff(2)).To(Equal(2 * connectBackoffBase))
	g.Expect(backoff(4)).To(Equal(8 * connectBackoffBase))
	g.Expect(backoff(1000)).To(Equal(connectBackoffMax))
}

func TestSetStatusWritesOnlyChanges(t *testing.T) {
	g := NewWithT(t)
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	mc := &fleetv1alpha1.MemberCluster{ObjectMeta: metav1.ObjectMeta{Name: "m", Generation: 3}}
	v := view{
		joined:    condition{metav1.ConditionTrue, fleetv1alpha1.ReasonJoined, messageJoined},
		ready:     condition{metav1.ConditionTrue, fleetv1alpha1.ReasonProbeSucceeded, messageReady},
		version:   "v1.36.3",
		lastProbe: t0,
	}
	g.Expect(setStatus(mc, v)).To(BeTrue())
	g.Expect(mc.Status.KubernetesVersion).To(Equal("v1.36.3"))
	g.Expect(mc.Status.LastProbeTime.Time).To(Equal(t0))
	for _, c := range mc.Status.Conditions {
		g.Expect(c.ObservedGeneration).To(Equal(int64(3)))
		g.Expect(c.Status).To(Equal(metav1.ConditionTrue))
	}

	// Only the probe time moved: no write, lastProbeTime stays.
	v.lastProbe = t0.Add(time.Minute)
	g.Expect(setStatus(mc, v)).To(BeFalse())
	g.Expect(mc.Status.LastProbeTime.Time).To(Equal(t0))

	// An unknown version keeps the last one reported.
	v.version = ""
	g.Expect(setStatus(mc, v)).To(BeFalse())
	g.Expect(mc.Status.KubernetesVersion).To(Equal("v1.36.3"))

	// A new generation is news (observedGeneration), and moves lastProbeTime.
	mc.Generation = 4
	g.Expect(setStatus(mc, v)).To(BeTrue())
	g.Expect(mc.Status.LastProbeTime.Time).To(Equal(t0.Add(time.Minute)))
}

func TestSubscriberCoalescesAndNeverBlocks(t *testing.T) {
	g := NewWithT(t)
	p := New(Options{})
	ch := p.Subscribe()
	// Nobody reads yet: pushes must not block, repeats coalesce.
	for range 1000 {
		p.notify("a")
		p.notify("b")
	}
	got := []string{<-ch, <-ch}
	g.Expect(got).To(ConsistOf("a", "b"))
	select {
	case name := <-ch:
		// One of them may have been re-queued while the first was in flight.
		g.Expect(name).To(BeElementOf("a", "b"))
	default:
	}
	close(p.done)
	g.Eventually(ch).Should(BeClosed())
}

// TestSubscriberHearsKnownMembers: a subscriber that comes after the members
// (the controllers of a standby that takes the Lease, on a provider that
// connected on every replica) first hears every member known then, and news
// after that as any subscriber does.
func TestSubscriberHearsKnownMembers(t *testing.T) {
	g := NewWithT(t)
	p := New(Options{})
	p.mu.Lock()
	p.members["b"] = &member{name: "b", health: Health{Engaged: true, Ready: true}}
	p.members["a"] = &member{name: "a"}
	p.mu.Unlock()
	ch := p.Subscribe()
	next := func() string {
		var name string
		g.Eventually(ch).Should(Receive(&name))
		return name
	}
	g.Expect([]string{next(), next()}).To(Equal([]string{"a", "b"}))
	p.notify("c")
	g.Expect(next()).To(Equal("c"))
	close(p.done)
	g.Eventually(ch).Should(BeClosed())
}

// TestKubeconfigUnreadableIsKnown: a hub error reading the kubeconfig Secret
// of a member this process has not connected to yet is recorded, so the
// member is not left without health (which the hub reads as "not connected
// yet, keep the last report": a gone member stayed Ready in every status for
// as long as the read failed). Subscribers hear of it. A member with a run
// keeps it: a hub error disengages nothing.
func TestKubeconfigUnreadableIsKnown(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	p := New(Options{})
	ch := p.Subscribe()
	g.Expect(p.Health("gone")).To(Equal(Health{}))

	v, recorded := p.kubeconfigUnreadable(ctx, "gone", errors.New("etcdserver: request timed out"), fleetv1alpha1.ConnectionPolicy{})
	g.Expect(recorded).To(BeTrue())
	g.Expect(v.ready.status).To(Equal(metav1.ConditionFalse))
	h := p.Health("gone")
	g.Expect(h.Ready).To(BeFalse())
	g.Expect(h.Reason).To(Equal(fleetv1alpha1.ReasonSecretUnreadable))
	g.Expect(h.Message).NotTo(ContainSubstring("etcd"), "tenants get the fixed text")
	g.Expect(<-ch).To(Equal("gone"))

	// Again: nothing new.
	_, recorded = p.kubeconfigUnreadable(ctx, "gone", errors.New("again"), fleetv1alpha1.ConnectionPolicy{})
	g.Expect(recorded).To(BeFalse())

	// A member with a run keeps it.
	r := &run{connecting: true}
	p.mu.Lock()
	p.members["live"] = &member{name: "live", run: r}
	p.mu.Unlock()
	_, recorded = p.kubeconfigUnreadable(ctx, "live", errors.New("etcdserver: request timed out"), fleetv1alpha1.ConnectionPolicy{})
	g.Expect(recorded).To(BeFalse())
	g.Expect(p.members["live"].run).To(BeIdenticalTo(r))
}
