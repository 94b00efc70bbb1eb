package integration

import (
	"net/http"
	"sync"
	"testing"

	. "github.com/onsi/gomega"

	fleetv1alpha1 "github.com/fleetdb/fleetdb/apis/v1alpha1"
)

// readLog counts the hub's GET requests to its members, per member and path
// (lists and watches included; a test looks up the paths it cares about).
type readLog struct {
	mu     sync.Mutex
	counts map[string]int
}

func (l *readLog) wrap(target string, rt http.RoundTripper) http.RoundTripper {
	return roundTripperFunc(func(req *http.Request) (*http.Response, error) {
		if req.Method == http.MethodGet {
			l.mu.Lock()
			if l.counts == nil {
				l.counts = map[string]int{}
			}
			l.counts[target+" "+req.URL.Path]++
			l.mu.Unlock()
		}
		return rt.RoundTrip(req)
	})
}

// count is the GETs of path sent to member target since the last reset.
func (l *readLog) count(target, path string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.counts[target+" "+path]
}

func (l *readLog) reset() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.counts = nil
}

type roundTripperFunc func(*http.Request) (*http.Response, error)

func (f roundTripperFunc) RoundTrip(req *http.Request) (*http.Response, error) { return f(req) }

// testCNPGClusterFromCache: the member syncs of a running CloudNativePG
// Database read its Cluster from the member cache, which watches Clusters:
// a spec change reaches the member with no read of the Cluster from its API
// server (controller-runtime's cache-backed client reads unstructured
// objects live: each sync read the Cluster once or twice before the change
// could be written).
func testCNPGClusterFromCache(t *testing.T, e *env) {
	g := NewWithT(t)
	ns := e.namespace("cnpg-reads")
	g.Expect(e.hub.Create(e.ctx, newCNPGDB(ns, "atlas", "m1"))).To(Succeed())
	g.Eventually(func(g Gomega) {
		g.Expect(e.getDB(ns, "atlas").Status.Phase).To(Equal(fleetv1alpha1.PhaseReady))
	}).WithTimeout(eventually).WithPolling(poll).Should(Succeed())
	e.settle(g)

	e.reads.reset()
	db := e.getDB(ns, "atlas")
	db.Spec.Replicas = 3
	g.Expect(e.hub.Update(e.ctx, db)).To(Succeed())
	g.Eventually(func(g Gomega) {
		g.Expect(clusterInstances(e, "m1", ns, "atlas")).To(BeEquivalentTo(3))
		got := e.getDB(ns, "atlas")
		g.Expect(got.Status.ObservedGeneration).To(Equal(got.Generation))
		g.Expect(got.Status.Phase).To(Equal(fleetv1alpha1.PhaseReady))
	}).WithTimeout(eventually).WithPolling(poll).Should(Succeed())
	e.settle(g)
	g.Expect(e.reads.count("m1", "/apis/postgresql.cnpg.io/v1/namespaces/"+ns+"/clusters/atlas")).To(BeZero(),
		"the Cluster is read from the member cache")
}
