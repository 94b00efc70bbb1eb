package queue

import (
	"testing"

	"k8s.io/apimachinery/pkg/types"
	mcreconcile "sigs.k8s.io/multicluster-runtime/pkg/reconcile"
)

func syncReq(cluster, name string) mcreconcile.Request {
	return Request(cluster, types.NamespacedName{Namespace: "ns", Name: name})
}

func TestMemberLimiter(t *testing.T) {
	l := NewMemberLimiter(2)
	// Two syncs of the slow member run; the third and fourth are parked, once each.
	for _, name := range []string{"a", "b"} {
		if !l.Acquire(syncReq("slow", name)) {
			t.Fatalf("sync %s of slow refused below the limit", name)
		}
	}
	for _, name := range []string{"c", "d", "c"} {
		if l.Acquire(syncReq("slow", name)) {
			t.Fatalf("sync %s of slow ran above the limit", name)
		}
	}
	// Other members are not held up by the slow one.
	for _, name := range []string{"a", "b"} {
		if !l.Acquire(syncReq("fast", name)) {
			t.Fatalf("sync %s of fast refused while slow is full", name)
		}
	}
	// Each sync that ends hands over one parked request, in arrival order.
	next, ok := l.Release("slow")
	if !ok || next != syncReq("slow", "c") {
		t.Fatalf("first release: got %v %v, want c", next, ok)
	}
	if !l.Acquire(next) {
		t.Fatal("the handed-over request found no free slot")
	}
	next, ok = l.Release("slow")
	if !ok || next != syncReq("slow", "d") {
		t.Fatalf("second release: got %v %v, want d", next, ok)
	}
	if _, ok := l.Release("slow"); ok {
		t.Fatal("a parked request was handed over twice")
	}
	if _, ok := l.Release("fast"); ok {
		t.Fatal("fast had nothing parked")
	}
	// Once everything ended the limiter holds nothing.
	l.Release("fast")
	if len(l.inflight) != 0 || len(l.parked) != 0 || len(l.queued) != 0 {
		t.Fatalf("leftover state: inflight %v parked %v queued %v", l.inflight, l.parked, l.queued)
	}
}

// TestMemberLimiterBudget: four slow members cannot take every worker; a
// member with nothing in flight always starts.
func TestMemberLimiterBudget(t *testing.T) {
	l := NewMemberLimiter(8)
	l.Budget = 16
	held := 0
	for _, m := range []string{"s1", "s2", "s3", "s4"} {
		for i := 0; i < 8; i++ {
			if l.Acquire(syncReq(m, string(rune('a'+i)))) {
				held++
			}
		}
	}
	if held > 18 {
		t.Fatalf("slow members hold %d syncs; want at most the budget plus one each", held)
	}
	if !l.Acquire(syncReq("fast", "x")) {
		t.Fatal("the fast member's first sync was refused")
	}
}
