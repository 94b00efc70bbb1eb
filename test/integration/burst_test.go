package integration

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleetv1alpha1 "github.com/fleetdb/fleetdb/apis/v1alpha1"
	"github.com/fleetdb/fleetdb/test/fleet"
)

// burstSize is how many Databases TestBurst creates and deletes at once.
const burstSize = 24

// TestBurst creates Databases at once, spread over three members, and
// deletes them at once: each Database's status is written a few times on
// its way to Ready (never through a wrong phase): its routine steps at most
// once per statusHoldDelay (1 s) of the time it took, so at most two writes
// and Ready when it took under a second; and every member object, volume
// claims included, is deleted with exactly one request. How many writes a
// Database makes depends on how long the burst takes on the machine: that
// bound follows the time measured, and the total is logged, not asserted.
func TestBurst(t *testing.T) {
	members := []string{"m1", "m2", "m3"}
	e := startEnvWith(t, envOptions{}, members...)
	for _, m := range members {
		e.sim.enable(m, true)
	}
	g := NewWithT(t)
	ns := e.namespace("burst")
	names := make([]string, burstSize)
	for i := range names {
		names[i] = fmt.Sprintf("db-%02d", i)
	}
	phases := watchPhases(t, e, ns)
	e.settle(g)
	e.writes.Reset()

	created := make([]time.Time, len(names))
	atOnce(t, names, func(i int, name string) error {
		created[i] = time.Now()
		return e.hub.Create(e.ctx, newDB(ns, name, members[i%len(members)]))
	})
	g.Eventually(func(g Gomega) {
		for _, name := range names {
			g.Expect(e.getDB(ns, name).Status.Phase).To(Equal(fleetv1alpha1.PhaseReady), name)
		}
	}).WithTimeout(eventually).WithPolling(poll).Should(Succeed())
	e.settle(g)
	writes := statusWrites(e, ns)
	total := 0
	for i, name := range names {
		total += writes[name]
		// The first routine write goes out a second after the first
		// reconcile, each next one a second after that, Ready at once.
		took := phases.readyAt(name).Sub(created[i])
		most := 2 + int(took/time.Second)
		g.Expect(writes[name]).To(And(BeNumerically(">=", 1), BeNumerically("<=", most)),
			"status writes of %s on its way to Ready in %s", name, took)
		g.Expect(phases.of(name)).To(HaveEach(BeElementOf(fleetv1alpha1.PhasePending, fleetv1alpha1.PhaseProvisioning, fleetv1alpha1.PhaseReady)),
			"phases of %s on its way to Ready", name)
	}
	t.Logf("status writes of %d Databases created at once: %d (%v)", burstSize, total, writes)

	// Two claims per Database, as a StatefulSet controller makes them from
	// the claim template (the second one left from an earlier scale).
	for i, name := range names {
		m := members[i%len(members)]
		for _, claim := range pvcsFor(e, m, ns, name, 2) {
			g.Expect(e.member(m).Create(e.ctx, claim)).To(Succeed())
		}
	}
	e.settle(g)
	e.writes.Reset()
	atOnce(t, names, func(_ int, name string) error { return e.hub.Delete(e.ctx, e.getDB(ns, name)) })
	g.Eventually(func(g Gomega) {
		for _, name := range names {
			err := e.hub.Get(e.ctx, client.ObjectKey{Namespace: ns, Name: name}, &fleetv1alpha1.Database{})
			g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), name)
		}
	}).WithTimeout(eventually).WithPolling(poll).Should(Succeed())
	e.settle(g)
	deletes := map[string]int{}
	claims := 0
	for _, w := range e.hubWritesIn(ns) {
		if strings.Contains(w, ": DELETE ") {
			deletes[w]++
			if strings.Contains(w, "/persistentvolumeclaims/") {
				claims++
			}
		}
	}
	for w, n := range deletes {
		g.Expect(n).To(Equal(1), "%s sent %d times", w, n)
	}
	g.Expect(claims).To(Equal(2*burstSize), "claim deletes")
	for _, name := range names {
		g.Expect(phases.of(name)).NotTo(ContainElement(BeElementOf(fleetv1alpha1.PhaseDegraded, fleetv1alpha1.PhaseFailed)), "phases of %s", name)
	}
	// How many status writes a deletion makes depends on how long its
	// teardown takes (routine ones go out at most once a second): logged,
	// not asserted.
	t.Logf("status writes while %d Databases were deleted at once: %v", burstSize, statusWrites(e, ns))
}

// atOnce runs f for every name in its own goroutine and waits for all.
func atOnce(t *testing.T, names []string, f func(i int, name string) error) {
	var wg sync.WaitGroup
	errs := make([]error, len(names))
	for i, name := range names {
		wg.Go(func() { errs[i] = f(i, name) })
	}
	wg.Wait()
	for i, err := range errs {
		NewWithT(t).Expect(err).NotTo(HaveOccurred(), names[i])
	}
}

// statusWrites counts the hub's status writes per Database of ns since the
// last reset.
func statusWrites(e *env, ns string) map[string]int {
	out := map[string]int{}
	prefix := "hub: PATCH /apis/fleetdb.io/v1alpha1/namespaces/" + ns + "/databases/"
	for _, w := range e.hubWritesIn(ns) {
		if name, ok := strings.CutPrefix(w, prefix); ok && strings.HasSuffix(name, "/status") {
			out[strings.TrimSuffix(name, "/status")]++
		}
	}
	return out
}

// phaseLog is every phase a watch saw each Database of a namespace in, in order.
type phaseLog struct {
	mu     sync.Mutex
	phases map[string][]fleetv1alpha1.Phase
	// ready is when the watch first saw each Database Ready.
	ready map[string]time.Time
}

// readyAt is when the watch first saw name Ready (zero: never).
func (p *phaseLog) readyAt(name string) time.Time {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.ready[name]
}

func (p *phaseLog) of(name string) []fleetv1alpha1.Phase {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.phases[name])
}

// watchPhases records the phases of ns's Databases until the test ends; a
// phase is recorded when it differs from the last one seen.
func watchPhases(t *testing.T, e *env, ns string) *phaseLog {
	wc, err := client.NewWithWatch(e.fleet.Hub.Config, client.Options{Scheme: fleet.Scheme})
	NewWithT(t).Expect(err).NotTo(HaveOccurred())
	ctx, cancel := context.WithCancel(e.ctx)
	w, err := wc.Watch(ctx, &fleetv1alpha1.DatabaseList{}, client.InNamespace(ns))
	NewWithT(t).Expect(err).NotTo(HaveOccurred())
	t.Cleanup(func() { cancel(); w.Stop() })
	log := &phaseLog{phases: map[string][]fleetv1alpha1.Phase{}, ready: map[string]time.Time{}}
	go func() {
		for ev := range w.ResultChan() {
			db, ok := ev.Object.(*fleetv1alpha1.Database)
			if !ok || db.Status.Phase == "" {
				continue
			}
			log.mu.Lock()
			seen := log.phases[db.Name]
			if len(seen) == 0 || seen[len(seen)-1] != db.Status.Phase {
				log.phases[db.Name] = append(seen, db.Status.Phase)
			}
			if _, ok := log.ready[db.Name]; !ok && db.Status.Phase == fleetv1alpha1.PhaseReady {
				log.ready[db.Name] = time.Now()
			}
			log.mu.Unlock()
		}
	}()
	return log
}

// pvcsFor are the n claims a StatefulSet controller would have made from
// the Database's claim template in member m.
func pvcsFor(e *env, m, ns, name string, n int) []*corev1.PersistentVolumeClaim {
	tmpl := pvcFor(e, m, ns, name)
	out := make([]*corev1.PersistentVolumeClaim, n)
	for i := range out {
		c := tmpl.DeepCopy()
		c.Name = fmt.Sprintf("%s%d", strings.TrimSuffix(tmpl.Name, "0"), i)
		c.Spec.Resources.Requests = corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}
		c.ObjectMeta = metav1.ObjectMeta{Namespace: ns, Name: c.Name, Labels: tmpl.Labels}
		out[i] = c
	}
	return out
}
