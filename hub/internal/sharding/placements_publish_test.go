package sharding

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleetv1alpha1 "github.com/fleetdb/fleetdb/apis/v1alpha1"
	"github.com/fleetdb/fleetdb/test/fleet"
)

// inFlight counts the placement writes a client has in flight at once. Each
// write is held a moment, so writes sent one after the other never overlap.
type inFlight struct {
	client.Client
	mu       sync.Mutex
	now, max int
}

func (c *inFlight) track(write func() error) error {
	c.mu.Lock()
	c.now++
	c.max = max(c.max, c.now)
	c.mu.Unlock()
	defer func() { c.mu.Lock(); c.now--; c.mu.Unlock() }()
	time.Sleep(20 * time.Millisecond)
	return write()
}

func (c *inFlight) Create(ctx context.Context, obj client.Object, opts ...client.CreateOption) error {
	return c.track(func() error { return c.Client.Create(ctx, obj, opts...) })
}

func (c *inFlight) Patch(ctx context.Context, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
	return c.track(func() error { return c.Client.Patch(ctx, obj, patch, opts...) })
}

func (c *inFlight) peak() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.max
}

// TestPlacementsPublish writes a Database's placements on a real
// kube-apiserver: one per member with the plan's spec, a changed plan
// rewrites them, a member the plan drops loses its placement, another
// Database's stay; the writes of one Publish go out at once, not one member
// after the other (a new leader's first status write waited for them all).
func TestPlacementsPublish(t *testing.T) {
	cp, ctx := fleet.StartTestControlPlane(t, true, testNS)
	g := NewWithT(t)

	writes := &inFlight{Client: cp.Client}
	store := &Placements{Hub: writes, Namespace: testNS}
	key, other := types.NamespacedName{Namespace: "team-a", Name: "orders"}, types.NamespacedName{Namespace: "team-a", Name: "ledger"}
	plan := func(db types.NamespacedName, gen int64, members ...string) map[string]fleetv1alpha1.DatabasePlacementSpec {
		want := map[string]fleetv1alpha1.DatabasePlacementSpec{}
		for _, m := range members {
			want[m] = fleetv1alpha1.DatabasePlacementSpec{
				Database: fleetv1alpha1.DatabaseRef{Namespace: db.Namespace, Name: db.Name, UID: "uid-" + db.Name},
				Cluster:  m, Role: fleetv1alpha1.PlacementRoleApply, Generation: gen,
			}
		}
		return want
	}
	members := make([]string, 12)
	for i := range members {
		members[i] = fmt.Sprintf("member-%02d", i)
	}
	stored := func(db types.NamespacedName) map[string]fleetv1alpha1.DatabasePlacementSpec {
		var list fleetv1alpha1.DatabasePlacementList
		g.Expect(cp.Client.List(ctx, &list, client.InNamespace(testNS), client.MatchingLabels(placementLabels(db)))).To(Succeed())
		got := map[string]fleetv1alpha1.DatabasePlacementSpec{}
		for _, pl := range list.Items {
			got[pl.Spec.Cluster] = pl.Spec
		}
		return got
	}

	g.Expect(store.Publish(ctx, other, plan(other, 1, members[:2]...))).To(Succeed())
	g.Expect(store.Publish(ctx, key, plan(key, 1, members...))).To(Succeed())
	g.Expect(stored(key)).To(Equal(plan(key, 1, members...)))
	g.Expect(writes.peak()).To(BeNumerically(">", 1), "the placements were written one after the other")

	// The client reads placements from the API server here (no cache), so
	// an update finds what the first Publish wrote.
	g.Expect(store.Publish(ctx, key, plan(key, 2, members[:8]...))).To(Succeed())
	g.Expect(stored(key)).To(Equal(plan(key, 2, members[:8]...)), "the changed plan, and no placement on the members it dropped")
	g.Expect(stored(other)).To(Equal(plan(other, 1, members[:2]...)), "another Database's placements are not touched")
}
