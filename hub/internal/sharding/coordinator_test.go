package sharding

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	. "github.com/onsi/gomega"
	coordinationv1 "k8s.io/api/coordination/v1"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/multicluster-runtime/pkg/manager/coordinator/sharded/sharder"
	"sigs.k8s.io/multicluster-runtime/pkg/multicluster"

	"github.com/fleetdb/fleetdb/test/fleet"
)

const testNS = "fleetdb-system"

// replica is one coordinator under test, its loop and its API access.
type replica struct {
	c      *Coordinator
	cancel context.CancelFunc
	done   chan struct{}
	// cut fails every request of the replica when set (a partition, or a
	// SIGKILL as the others see it: nothing released, nothing renewed).
	cut *atomic.Bool
}

// TestCoordinatorFences runs coordinators on a real kube-apiserver and
// proves the fence rules of docs/sharding.md: every member is owned by the
// replica rendezvous hashing gives it and by no other, at every sample; at
// rest no fence is written; a joining replica takes its members; a replica
// cut off from the API server (as a SIGKILL looks to the others) stops its
// members before any other replica takes them, and the others take them
// once its peer Lease expired.
func TestCoordinatorFences(t *testing.T) {
	cp, ctx := fleet.StartTestControlPlane(t, false, testNS)
	g := NewWithT(t)

	members := make([]string, 8)
	for i := range members {
		members[i] = fmt.Sprintf("member-%d", i)
	}
	start := func(id string) *replica {
		cut := &atomic.Bool{}
		cfg := rest.CopyConfig(cp.Config)
		cfg.WrapTransport = func(rt http.RoundTripper) http.RoundTripper { return cutTransport{rt, cut} }
		c, err := newCoordinator(cfg, client.Options{Scheme: fleet.Scheme}, testNS, id, logr.Discard())
		g.Expect(err).NotTo(HaveOccurred())
		rctx, cancel := context.WithCancel(ctx)
		r := &replica{c: c, cancel: cancel, done: make(chan struct{}), cut: cut}
		go func() { _ = c.run(rctx); close(r.done) }()
		for _, m := range members {
			g.Expect(c.Engage(rctx, multicluster.ClusterName(m), nil)).To(Succeed())
		}
		t.Cleanup(func() { cancel(); <-r.done })
		return r
	}

	// A sampler fails the test if two replicas own a member at once.
	var (
		mu       sync.Mutex
		replicas []*replica
		overlaps []string
	)
	sctx, stopSampling := context.WithCancel(ctx)
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		for sctx.Err() == nil {
			mu.Lock()
			for _, m := range members {
				var by []string
				for _, r := range replicas {
					if r.c.Owns(m) {
						by = append(by, r.c.Self())
					}
				}
				if len(by) > 1 {
					overlaps = append(overlaps, fmt.Sprintf("%s owned by %v at %s", m, by, time.Now().Format(time.RFC3339Nano)))
				}
			}
			mu.Unlock()
			time.Sleep(20 * time.Millisecond)
		}
	}()
	add := func(id string) *replica {
		r := start(id)
		mu.Lock()
		replicas = append(replicas, r)
		mu.Unlock()
		return r
	}
	// owners: member → the replica owning it, "" when none, and the
	// fences must name the same replicas.
	expectOwnedAsHRW := func(live ...*replica) {
		t.Helper()
		var peers []sharder.PeerInfo
		for _, r := range live {
			peers = append(peers, r.c.peers.Self())
		}
		g.Eventually(func(g Gomega) {
			for _, m := range members {
				var want *replica
				for _, r := range live {
					if sharder.NewHRW().ShouldOwn(m, peers, r.c.peers.Self()) {
						want = r
					}
				}
				for _, r := range live {
					g.Expect(r.c.Owns(m)).To(Equal(r == want), "%s: owned by %s", m, r.c.Self())
				}
				l := &coordinationv1.Lease{}
				g.Expect(cp.Client.Get(ctx, client.ObjectKey{Namespace: testNS, Name: FenceName(m)}, l)).To(Succeed())
				g.Expect(ptr.Deref(l.Spec.HolderIdentity, "")).To(Equal(want.c.Self()), "%s: fence holder", m)
			}
		}).WithTimeout(2 * time.Minute).WithPolling(200 * time.Millisecond).Should(Succeed())
	}

	a, b := add("hub-a"), add("hub-b")
	expectOwnedAsHRW(a, b)

	// At rest: no fence is written (their resourceVersions stay), only the
	// peer Leases are renewed.
	versions := fenceVersions(ctx, g, cp.Client, members)
	time.Sleep(2*ShardPeerRenew + time.Second)
	g.Expect(fenceVersions(ctx, g, cp.Client, members)).To(Equal(versions), "fences written at rest")
	expectOwnedAsHRW(a, b)

	// A replica joins and takes what HRW gives it.
	c := add("hub-c")
	expectOwnedAsHRW(a, b, c)

	// hub-c is cut off from the API server: it stops its members on its
	// own before its peer Lease may be seen expired, and the others take
	// them over after that.
	var cOwned []string
	for _, m := range members {
		if c.c.Owns(m) {
			cOwned = append(cOwned, m)
		}
	}
	c.cut.Store(true)
	cutAt := time.Now()
	g.Eventually(func() []string {
		var still []string
		for _, m := range cOwned {
			if c.c.Owns(m) {
				still = append(still, m)
			}
		}
		return still
	}).WithTimeout(shardActWindow+2*time.Second).WithPolling(50*time.Millisecond).Should(BeEmpty(), "the cut-off replica still acts")
	t.Logf("cut-off replica stopped its %d members %s after the cut", len(cOwned), time.Since(cutAt).Round(10*time.Millisecond))
	expectOwnedAsHRW(a, b)
	t.Logf("its members taken over %s after the cut", time.Since(cutAt).Round(10*time.Millisecond))

	// A clean stop of hub-b hands its members to hub-a at once (its fences
	// cleared, its peer Lease deleted).
	b.cancel()
	<-b.done
	expectOwnedAsHRW(a)

	stopSampling()
	<-sampled
	g.Expect(overlaps).To(BeEmpty(), "a member owned by two replicas at once")
}

func fenceVersions(ctx context.Context, g Gomega, c client.Client, members []string) map[string]string {
	out := map[string]string{}
	for _, m := range members {
		l := &coordinationv1.Lease{}
		g.Expect(c.Get(ctx, client.ObjectKey{Namespace: testNS, Name: FenceName(m)}, l)).To(Succeed())
		out[m] = l.ResourceVersion
	}
	return out
}

// cutTransport fails every request while cut is set.
type cutTransport struct {
	rt  http.RoundTripper
	cut *atomic.Bool
}

func (c cutTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	if c.cut.Load() {
		return nil, errors.New("cut off from the API server (test)")
	}
	return c.rt.RoundTrip(r)
}
