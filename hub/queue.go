package hub

import (
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/controller/priorityqueue"
	mcreconcile "sigs.k8s.io/multicluster-runtime/pkg/reconcile"
)

// queueRef hands out a controller's queue once the controller started; adds
// before that are dropped (the controller's initial list covers them).
type queueRef struct {
	q workqueue.TypedRateLimitingInterface[mcreconcile.Request]
	// ready is closed when q is set.
	ready chan struct{}
}

func newQueueRef() *queueRef { return &queueRef{ready: make(chan struct{})} }

func (r *queueRef) set(q workqueue.TypedRateLimitingInterface[mcreconcile.Request]) {
	r.q = q
	close(r.ready)
}

func (r *queueRef) get() workqueue.TypedRateLimitingInterface[mcreconcile.Request] {
	select {
	case <-r.ready:
		return r.q
	default:
		return nil
	}
}

// Priorities of requests in the controllers' priority queues. Watch events
// come in at 0 (controller-runtime lowers the initial list and resyncs).
const (
	// priorityChange: a member sync that carries a new plan (a create, a
	// spec change, a rollout step, a teardown) goes before observation work.
	priorityChange = 10
	// priorityStatus: a status refresh after member results changed goes
	// after new Databases and spec changes.
	priorityStatus = -10
)

// addWith enqueues with a priority after a delay (0: now).
func (r *queueRef) addWith(cluster string, key types.NamespacedName, priority int, after time.Duration) {
	if q := r.get(); q != nil {
		addWithPriority(q, request(cluster, key), priority, after)
	}
}

// addWithPriority adds req to q with a priority after a delay (0: now). A
// queue that is not a priority queue takes the request without the priority.
func addWithPriority(q workqueue.TypedRateLimitingInterface[mcreconcile.Request], req mcreconcile.Request, priority int, after time.Duration) {
	if pq, ok := q.(priorityqueue.PriorityQueue[mcreconcile.Request]); ok {
		pq.AddWithOpts(priorityqueue.AddOpts{Priority: &priority, After: after}, req)
		return
	}
	if after > 0 {
		q.AddAfter(req, after)
		return
	}
	q.Add(req)
}
