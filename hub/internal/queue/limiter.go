package queue

import (
	"sync"

	mcreconcile "sigs.k8s.io/multicluster-runtime/pkg/reconcile"
)

// MemberLimiter caps the member syncs in flight per member, so that one slow
// member cannot hold every member-sync worker (SPEC 4.2). A sync over the cap
// is not run and does not wait in a worker: it is parked, and put back in the
// queue when a sync of the same member ends. Nothing polls.
//
// The per-member cap alone does not keep a few slow members from holding
// every worker (four members at a quarter each do), so a second sync of a
// member also needs the total in flight to be under budget: a member with
// nothing in flight can always start one, so the syncs of fast members are
// never queued behind hung ones. A request refused for the budget belongs to
// a member with a sync in flight, whose end hands it over.
type MemberLimiter struct {
	limit int
	// budget caps the syncs in flight across members beyond each member's
	// first; 0: no cap.
	Budget int
	mu     sync.Mutex
	// total counts running syncs.
	total int
	// inflight counts running syncs per member.
	inflight map[string]int
	// parked are requests turned away, per member, in arrival order, once each.
	parked map[string][]mcreconcile.Request
	queued map[mcreconcile.Request]bool
}

// NewMemberLimiter lets one member hold at most limit workers.
func NewMemberLimiter(limit int) *MemberLimiter {
	return &MemberLimiter{
		limit:    max(limit, 1),
		inflight: map[string]int{},
		parked:   map[string][]mcreconcile.Request{},
		queued:   map[mcreconcile.Request]bool{},
	}
}

// Acquire takes a slot for req's member; when none is free it parks req and
// returns false.
func (l *MemberLimiter) Acquire(req mcreconcile.Request) bool {
	cluster := string(req.ClusterName)
	l.mu.Lock()
	defer l.mu.Unlock()
	if n := l.inflight[cluster]; n < l.limit && (n == 0 || l.Budget <= 0 || l.total < l.Budget) {
		l.inflight[cluster]++
		l.total++
		return true
	}
	if !l.queued[req] {
		l.queued[req] = true
		l.parked[cluster] = append(l.parked[cluster], req)
	}
	return false
}

// Release frees the slot of a sync of cluster that ended, and returns the
// parked request that may now run, if any.
func (l *MemberLimiter) Release(cluster string) (mcreconcile.Request, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.total--
	if l.inflight[cluster]--; l.inflight[cluster] <= 0 {
		delete(l.inflight, cluster)
	}
	waiting := l.parked[cluster]
	if len(waiting) == 0 {
		return mcreconcile.Request{}, false
	}
	next := waiting[0]
	if len(waiting) == 1 {
		delete(l.parked, cluster)
	} else {
		l.parked[cluster] = waiting[1:]
	}
	delete(l.queued, next)
	return next, true
}
