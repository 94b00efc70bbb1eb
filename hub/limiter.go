package hub

import (
	"sync"

	mcreconcile "sigs.k8s.io/multicluster-runtime/pkg/reconcile"
)

// memberLimiter caps the member syncs in flight per member, so that one slow
// member cannot hold every member-sync worker (SPEC 4.2). A sync over the cap
// is not run and does not wait in a worker: it is parked, and put back in the
// queue when a sync of the same member ends. Nothing polls.
type memberLimiter struct {
	limit int
	mu    sync.Mutex
	// inflight counts running syncs per member.
	inflight map[string]int
	// parked are requests turned away, per member, in arrival order, once each.
	parked map[string][]mcreconcile.Request
	queued map[mcreconcile.Request]bool
}

func newMemberLimiter(limit int) *memberLimiter {
	return &memberLimiter{
		limit:    max(limit, 1),
		inflight: map[string]int{},
		parked:   map[string][]mcreconcile.Request{},
		queued:   map[mcreconcile.Request]bool{},
	}
}

// acquire takes a slot for req's member; when none is free it parks req and
// returns false.
func (l *memberLimiter) acquire(req mcreconcile.Request) bool {
	cluster := string(req.ClusterName)
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.inflight[cluster] < l.limit {
		l.inflight[cluster]++
		return true
	}
	if !l.queued[req] {
		l.queued[req] = true
		l.parked[cluster] = append(l.parked[cluster], req)
	}
	return false
}

// release frees the slot of a sync of cluster that ended, and returns the
// parked request that may now run, if any.
func (l *memberLimiter) release(cluster string) (mcreconcile.Request, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
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
