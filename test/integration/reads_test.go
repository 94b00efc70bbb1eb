package integration

import (
	"net/http"
	"sync"
	"testing"

	. "github.com/onsi/gomega"

	fleetv1alpha1 "github.com/fleetdb/fleetdb/apis/v1alpha1"
	"github.com/fleetdb/fleetdb/member"
)

// readLog counts the hub's GET requests to its members, per member and path
// (lists and watches included; a test looks up the paths it cares about),
// and keeps every request's method and path per member in the order sent.
type readLog struct {
	mu     sync.Mutex
	counts map[string]int
	seq    map[string][]string
}

func (l *readLog) wrap(target string, rt http.RoundTripper) http.RoundTripper {
	return roundTripperFunc(func(req *http.Request) (*http.Response, error) {
		l.mu.Lock()
		if l.counts == nil {
			l.counts, l.seq = map[string]int{}, map[string][]string{}
		}
		if req.Method == http.MethodGet {
			l.counts[target+" "+req.URL.Path]++
		}
		l.seq[target] = append(l.seq[target], req.Method+" "+req.URL.Path)
		l.mu.Unlock()
		return rt.RoundTrip(req)
	})
}

// before counts the requests what ("METHOD path") sent to member target
// since the last reset and before the first request until; -1 when until
// was not sent.
func (l *readLog) before(target, what, until string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, r := range l.seq[target] {
		switch r {
		case until:
			return n
		case what:
			n++
		}
	}
	return -1
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
	waitReady(g, e, ns, "atlas")
	e.settle(g)

	e.reads.reset()
	scaleCNPG(g, e, ns, "atlas", "m1", 3)
	waitReady(g, e, ns, "atlas")
	e.settle(g)
	g.Expect(e.reads.count("m1", "/apis/postgresql.cnpg.io/v1/namespaces/"+ns+"/clusters/atlas")).To(BeZero(),
		"the Cluster is read from the member cache")
}

// testMemberSecretReadOnce: before a member sync writes, it reads the
// Database's credentials Secret from the member's API server once (member
// caches hold no Secrets), and a new Database's first sync not at all: the
// credential recovery just read it there and found none (absentSecrets).
// Each read it saves was one member round trip in a row before the first
// write (the sync read it for the rotation, then the apply's ownership
// check read it "from the cache", which went to the API server, and on
// NotFound read it live again).
func testMemberSecretReadOnce(t *testing.T, e *env) {
	g := NewWithT(t)
	ns := e.namespace("secret-reads")
	// A first Database gives the hub its Secret access in the namespace (a
	// namespace the hub may not read Secrets in yet is not looked into).
	g.Expect(e.hub.Create(e.ctx, newCNPGDB(ns, "first", "m1"))).To(Succeed())
	waitReady(g, e, ns, "first")
	e.settle(g)

	secret := "GET /api/v1/namespaces/" + ns + "/secrets/" + member.CredentialsSecretName("orion")
	write := "PATCH /apis/postgresql.cnpg.io/v1/namespaces/" + ns + "/clusters/orion"
	e.reads.reset()
	g.Expect(e.hub.Create(e.ctx, newCNPGDB(ns, "orion", "m1"))).To(Succeed())
	waitReady(g, e, ns, "orion")
	g.Expect(e.reads.before("m1", secret, write)).To(Equal(1),
		"a new Database: the recovery's read of the member Secret is the only one before the Cluster is written")
	e.settle(g)

	e.reads.reset()
	scaleCNPG(g, e, ns, "orion", "m1", 3)
	g.Expect(e.reads.before("m1", secret, write)).To(Equal(1),
		"a spec change: the sync reads the member Secret once before it writes the Cluster")
	waitReady(g, e, ns, "orion")
}

// waitReady waits for the Database to be Ready on its current generation.
func waitReady(g Gomega, e *env, ns, name string) {
	g.Eventually(func(g Gomega) {
		got := e.getDB(ns, name)
		g.Expect(got.Status.ObservedGeneration).To(Equal(got.Generation))
		g.Expect(got.Status.Phase).To(Equal(fleetv1alpha1.PhaseReady))
	}).WithTimeout(eventually).WithPolling(poll).Should(Succeed())
}

// scaleCNPG sets the Database's replicas and waits for its Cluster in
// member m to have that many instances.
func scaleCNPG(g Gomega, e *env, ns, name, m string, replicas int32) {
	db := e.getDB(ns, name)
	db.Spec.Replicas = replicas
	g.Expect(e.hub.Update(e.ctx, db)).To(Succeed())
	g.Eventually(func(g Gomega) {
		g.Expect(clusterInstances(e, m, ns, name)).To(BeEquivalentTo(replicas))
	}).WithTimeout(eventually).WithPolling(poll).Should(Succeed())
}
