package main

import (
	"context"
	"fmt"
	"maps"
	"sync"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleetv1alpha1 "github.com/fleetdb/fleetdb/apis/v1alpha1"
)

// stsTrack is what a member's watch saw of one StatefulSet, each at the first
// time it was seen.
type stsTrack struct {
	seen     time.Time
	replicas map[int32]time.Time // spec.replicas == n
	ready    map[int32]time.Time // n replicas ready on the current generation
	gone     time.Time
}

// memberWatch records the workloads of one member (fleetdb's and the
// baseline's) from a watch, timestamping each event as it arrives: the
// CloudNativePG Clusters of the postgres Databases the bench creates (the
// default backend; kwok Stages report them healthy) and StatefulSets.
type memberWatch struct {
	name string
	mu   sync.Mutex
	sts  map[string]*stsTrack // namespace/name
}

func (w *memberWatch) observe(obj any, deleted bool) {
	now := time.Now()
	o, ok := eventObject[client.Object](obj)
	if !ok {
		return
	}
	want, ready, ok := workloadState(o)
	if !ok {
		return
	}
	key := o.GetNamespace() + "/" + o.GetName()
	w.mu.Lock()
	defer w.mu.Unlock()
	t := w.sts[key]
	if t == nil {
		t = &stsTrack{seen: now, replicas: map[int32]time.Time{}, ready: map[int32]time.Time{}}
		w.sts[key] = t
	}
	if deleted {
		t.gone = firstTime(t.gone, now)
		return
	}
	t.replicas[want] = firstTime(t.replicas[want], now)
	if ready {
		t.ready[want] = firstTime(t.ready[want], now)
	}
}

// workloadState is the replicas a StatefulSet or CloudNativePG Cluster wants
// and whether all of them are ready on its current spec.
func workloadState(obj any) (want int32, ready, ok bool) {
	switch s := obj.(type) {
	case *appsv1.StatefulSet:
		want = 1
		if s.Spec.Replicas != nil {
			want = *s.Spec.Replicas
		}
		return want, s.Status.ObservedGeneration >= s.Generation && s.Status.ReadyReplicas == want &&
			s.Status.Replicas == want && s.Status.UpdatedReplicas == want, true
	case *unstructured.Unstructured:
		n, _, _ := unstructured.NestedInt64(s.Object, "spec", "instances")
		r, _, _ := unstructured.NestedInt64(s.Object, "status", "readyInstances")
		phase, _, _ := unstructured.NestedString(s.Object, "status", "phase")
		return int32(n), r == n && phase == "Cluster in healthy state", true
	}
	return 0, false, false
}

// eventObject is a watch event's object as a T, also for a deletion the
// watch missed (DeletedFinalStateUnknown).
func eventObject[T any](obj any) (T, bool) {
	if d, ok := obj.(toolscache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	t, ok := obj.(T)
	return t, ok
}

// firstTime keeps the first time something was seen: seen, or now when unset.
func firstTime(seen, now time.Time) time.Time {
	if seen.IsZero() {
		return now
	}
	return seen
}

// get returns a copy of the track of namespace/name, if any.
func (w *memberWatch) get(key string) (stsTrack, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	t, ok := w.sts[key]
	if !ok {
		return stsTrack{}, false
	}
	c := *t
	c.replicas, c.ready = maps.Clone(t.replicas), maps.Clone(t.ready)
	return c, true
}

// dbTrack is what the hub watch saw of one Database.
type dbTrack struct {
	ready map[int64]time.Time // Ready=True for that generation
	gone  time.Time
}

// hubWatch records hub Databases' readiness per generation.
type hubWatch struct {
	mu  sync.Mutex
	dbs map[string]*dbTrack
}

func (w *hubWatch) observe(obj any, deleted bool) {
	now := time.Now()
	db, ok := eventObject[*fleetv1alpha1.Database](obj)
	if !ok {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	t := w.dbs[db.Namespace+"/"+db.Name]
	if t == nil {
		t = &dbTrack{ready: map[int64]time.Time{}}
		w.dbs[db.Namespace+"/"+db.Name] = t
	}
	if deleted {
		t.gone = firstTime(t.gone, now)
		return
	}
	c := meta.FindStatusCondition(db.Status.Conditions, fleetv1alpha1.ConditionReady)
	if c != nil && c.Status == "True" && c.ObservedGeneration == db.Generation && db.Status.ObservedGeneration == db.Generation {
		t.ready[db.Generation] = firstTime(t.ready[db.Generation], now)
	}
}

func (w *hubWatch) get(key string) (dbTrack, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	t, ok := w.dbs[key]
	if !ok {
		return dbTrack{}, false
	}
	return dbTrack{ready: maps.Clone(t.ready), gone: t.gone}, true
}

// startInformer starts a cache for obj on cfg, restricted to sel, and sends
// every event to observe. It returns when the cache has synced.
func startInformer(ctx context.Context, cfg *rest.Config, scheme *runtime.Scheme, obj client.Object,
	sel labels.Selector, observe func(obj any, deleted bool),
) error {
	byObject := cache.ByObject{}
	if sel != nil {
		byObject.Label = sel
	}
	c, err := cache.New(cfg, cache.Options{Scheme: scheme, ByObject: map[client.Object]cache.ByObject{obj: byObject}})
	if err != nil {
		return err
	}
	inf, err := c.GetInformer(ctx, obj)
	if err != nil {
		return err
	}
	if _, err := inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc:    func(o any) { observe(o, false) },
		UpdateFunc: func(_, o any) { observe(o, false) },
		DeleteFunc: func(o any) { observe(o, true) },
	}); err != nil {
		return err
	}
	go func() { _ = c.Start(ctx) }()
	sctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if !c.WaitForCacheSync(sctx) {
		return fmt.Errorf("watch of %T did not sync", obj)
	}
	return nil
}

// waitFor polls cond every 10 ms until it holds, ctx ends or timeout passes.
// Polling only decides when to go on: every figure is taken from the
// watches' timestamps, never from the poll.
func waitFor(ctx context.Context, timeout time.Duration, what string, cond func() bool) error {
	deadline := time.Now().Add(timeout)
	for {
		if cond() {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("timed out after %s waiting for %s", timeout, what)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(10 * time.Millisecond):
		}
	}
}
