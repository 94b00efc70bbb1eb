package database

import (
	"context"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/cluster"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	mchandler "sigs.k8s.io/multicluster-runtime/pkg/handler"
	"sigs.k8s.io/multicluster-runtime/pkg/multicluster"
	mcreconcile "sigs.k8s.io/multicluster-runtime/pkg/reconcile"

	fleetv1alpha1 "github.com/fleetdb/fleetdb/apis/v1alpha1"
	"github.com/fleetdb/fleetdb/hub/internal/queue"
)

// MemberClusterOptions restrict every member cache to the objects fleetdb
// manages, so the hub never caches a member's other Secrets or workloads.
// Secrets and ConfigMaps are not cached at all: the member identity may read
// them only in the managed namespaces where the hub bound its Secret role
// (issue 25, item 11; issue 42, item 3; see secretWatches), so the member
// client reads them live, by name or listed in one namespace, and a watch
// per namespace reports their changes.
// Pass them as clusters.Options.ClusterOptions.
func MemberClusterOptions() []cluster.Option {
	return []cluster.Option{func(o *cluster.Options) {
		o.Cache.DefaultLabelSelector = labels.SelectorFromSet(labels.Set{fleetv1alpha1.LabelManagedBy: fleetv1alpha1.ManagedByValue})
		if o.Client.Cache == nil {
			o.Client.Cache = &client.CacheOptions{}
		}
		o.Client.Cache.DisableFor = append(o.Client.Cache.DisableFor, &corev1.Secret{}, &corev1.ConfigMap{})
	}}
}

// memberKinds are the member objects whose changes trigger a member sync
// (drift is put back, readiness is reported), watched cluster-wide (fleetdb's
// objects by label). Secrets and ConfigMaps are watched per managed
// namespace (secretWatches).
func memberKinds() []client.Object {
	return []client.Object{
		&appsv1.StatefulSet{}, &corev1.Service{}, &policyv1.PodDisruptionBudget{},
	}
}

// databaseEvents enqueues a Database for its own events. An update that
// changes neither the spec (generation) nor the deletion, such as the hub's
// own status and finalizer writes, goes behind new Databases, spec changes
// and deletions (in a burst, first fan-outs are not queued behind them), and
// only after progressCoalesceDelay: the reconcile that wrote the status was
// up to date, and member results that arrive meanwhile fold into one write.
// Someone else's edit of the status is still put right. A deletion is
// handed to onDeletion first (the teardown starts from the event itself,
// not after a wait in the queue), then queued as any change.
func databaseEvents(onDeletion func(*fleetv1alpha1.Database)) mchandler.TypedEventHandlerFunc[client.Object, mcreconcile.Request] {
	return func(name multicluster.ClusterName, _ cluster.Cluster) handler.TypedEventHandler[client.Object, mcreconcile.Request] {
		return databaseEventHandler(name, onDeletion)
	}
}

func databaseEventHandler(name multicluster.ClusterName, onDeletion func(*fleetv1alpha1.Database)) handler.TypedEventHandler[client.Object, mcreconcile.Request] {
	add := func(obj client.Object, q workqueue.TypedRateLimitingInterface[mcreconcile.Request]) {
		q.Add(queue.Request(string(name), client.ObjectKeyFromObject(obj)))
	}
	return handler.TypedFuncs[client.Object, mcreconcile.Request]{
		CreateFunc: func(_ context.Context, e event.TypedCreateEvent[client.Object], q workqueue.TypedRateLimitingInterface[mcreconcile.Request]) {
			add(e.Object, q)
		},
		UpdateFunc: func(_ context.Context, e event.TypedUpdateEvent[client.Object], q workqueue.TypedRateLimitingInterface[mcreconcile.Request]) {
			o, n := e.ObjectOld, e.ObjectNew
			if db, ok := n.(*fleetv1alpha1.Database); ok && o.GetDeletionTimestamp() == nil && n.GetDeletionTimestamp() != nil && onDeletion != nil {
				onDeletion(db)
			}
			if o.GetGeneration() == n.GetGeneration() && o.GetDeletionTimestamp().Equal(n.GetDeletionTimestamp()) {
				queue.AddWithPriority(q, queue.Request(string(name), client.ObjectKeyFromObject(n)), queue.PriorityStatus, progressCoalesceDelay)
				return
			}
			add(n, q)
		},
		DeleteFunc: func(_ context.Context, e event.TypedDeleteEvent[client.Object], q workqueue.TypedRateLimitingInterface[mcreconcile.Request]) {
			add(e.Object, q)
		},
		GenericFunc: func(_ context.Context, e event.TypedGenericEvent[client.Object], q workqueue.TypedRateLimitingInterface[mcreconcile.Request]) {
			add(e.Object, q)
		},
	}
}

// memberObjectEvents maps events on member objects of kind gvk to a member
// sync of their Database. An update that shows exactly what the hub's own last
// apply returned brings nothing new and is dropped (the StatefulSet's never
// are: its status is what the sync observes); a creation never is. With deletesOnly, only
// deletions count (volume claims: a waiting teardown completes at once).
func (r *memberSyncReconciler) memberObjectEvents(gvk schema.GroupVersionKind, deletesOnly bool) mchandler.TypedEventHandlerFunc[client.Object, mcreconcile.Request] {
	skipOwn := gvk.Kind != "StatefulSet" && !deletesOnly
	return func(name multicluster.ClusterName, _ cluster.Cluster) handler.TypedEventHandler[client.Object, mcreconcile.Request] {
		clusterName := string(name)
		enqueue := func(obj client.Object, own bool, q workqueue.TypedRateLimitingInterface[mcreconcile.Request]) {
			if own && r.memo.Wrote(clusterName, gvk, obj) {
				return
			}
			for _, req := range databaseOfMemberObject(context.Background(), obj) {
				req.ClusterName = name
				q.Add(req)
			}
		}
		h := handler.TypedFuncs[client.Object, mcreconcile.Request]{
			DeleteFunc: func(_ context.Context, e event.TypedDeleteEvent[client.Object], q workqueue.TypedRateLimitingInterface[mcreconcile.Request]) {
				enqueue(e.Object, skipOwn, q)
			},
		}
		if !deletesOnly {
			h.CreateFunc = func(_ context.Context, e event.TypedCreateEvent[client.Object], q workqueue.TypedRateLimitingInterface[mcreconcile.Request]) {
				// Never dropped: a sync may have observed the member before its
				// cache had the object it created (a watch that lags, as after a
				// reconnect), and this is the moment the cache has it.
				enqueue(e.Object, false, q)
			}
			h.UpdateFunc = func(_ context.Context, e event.TypedUpdateEvent[client.Object], q workqueue.TypedRateLimitingInterface[mcreconcile.Request]) {
				enqueue(e.ObjectNew, skipOwn, q)
			}
			h.GenericFunc = func(_ context.Context, e event.TypedGenericEvent[client.Object], q workqueue.TypedRateLimitingInterface[mcreconcile.Request]) {
				enqueue(e.Object, skipOwn, q)
			}
		}
		return h
	}
}

// allDatabases maps a registry change to every Database: placement may change.
func allDatabases(c client.Client) func(context.Context, client.Object) []mcreconcile.Request {
	return func(ctx context.Context, _ client.Object) []mcreconcile.Request {
		return listDatabases(ctx, c, "a registry change")
	}
}

// listDatabases lists the Databases (with opts) as requests to the Database
// controller; why names the event for the log line of a failed list.
func listDatabases(ctx context.Context, c client.Client, why string, opts ...client.ListOption) []mcreconcile.Request {
	var list fleetv1alpha1.DatabaseList
	if err := c.List(ctx, &list, opts...); err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "listing databases for "+why)
		return nil
	}
	out := make([]mcreconcile.Request, 0, len(list.Items))
	for i := range list.Items {
		out = append(out, queue.Request("", client.ObjectKeyFromObject(&list.Items[i])))
	}
	return out
}

// databaseOfMemberObject maps a member object to its hub Database by label.
func databaseOfMemberObject(_ context.Context, obj client.Object) []mcreconcile.Request {
	l := obj.GetLabels()
	ns, name := l[fleetv1alpha1.LabelDatabaseNamespace], l[fleetv1alpha1.LabelDatabaseName]
	if l[fleetv1alpha1.LabelManagedBy] != fleetv1alpha1.ManagedByValue || ns == "" || name == "" {
		return nil
	}
	return []mcreconcile.Request{queue.Request("", types.NamespacedName{Namespace: ns, Name: name})}
}
