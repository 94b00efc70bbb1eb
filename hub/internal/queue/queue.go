package queue

import (
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/controller/priorityqueue"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/multicluster-runtime/pkg/multicluster"
	mcreconcile "sigs.k8s.io/multicluster-runtime/pkg/reconcile"
)

// Ref hands out a controller's queue once the controller started; adds
// before that are dropped (the controller's initial list covers them).
type Ref struct {
	q workqueue.TypedRateLimitingInterface[mcreconcile.Request]
	// Ready is closed when q is set.
	Ready chan struct{}
}

// NewRef is a Ref with no queue yet.
func NewRef() *Ref { return &Ref{Ready: make(chan struct{})} }

// Set hands the controller's queue out, once.
func (r *Ref) Set(q workqueue.TypedRateLimitingInterface[mcreconcile.Request]) {
	r.q = q
	close(r.Ready)
}

func (r *Ref) get() workqueue.TypedRateLimitingInterface[mcreconcile.Request] {
	select {
	case <-r.Ready:
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
	PriorityChange = 10
	// priorityStatus: a status refresh after member results changed goes
	// after new Databases and spec changes.
	PriorityStatus = -10
)

// AddWith enqueues with a priority after a delay (0: now).
func (r *Ref) AddWith(cluster string, key types.NamespacedName, priority int, after time.Duration) {
	if q := r.get(); q != nil {
		AddWithPriority(q, Request(cluster, key), priority, after)
	}
}

// AddWithPriority adds req to q with a priority after a delay (0: now). A
// queue that is not a priority queue takes the request without the priority.
func AddWithPriority(q workqueue.TypedRateLimitingInterface[mcreconcile.Request], req mcreconcile.Request, priority int, after time.Duration) {
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

// Request builds a multicluster request for a Database key in a cluster ("" is the hub).
func Request(cluster string, key types.NamespacedName) mcreconcile.Request {
	return mcreconcile.Request{
		ClusterName: multicluster.ClusterName(cluster),
		Request:     reconcile.Request{NamespacedName: key},
	}
}

// Sooner is the sooner of two requeue delays, a non-positive one meaning
// none.
func Sooner(a, b time.Duration) time.Duration {
	switch {
	case a <= 0:
		return b
	case b <= 0:
		return a
	}
	return min(a, b)
}
