package database

import (
	"context"
	"fmt"
	"sync"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/cluster"
	"sigs.k8s.io/multicluster-runtime/pkg/multicluster"

	fleetv1alpha1 "github.com/fleetdb/fleetdb/apis/v1alpha1"
	"github.com/fleetdb/fleetdb/hub/internal/queue"
	"github.com/fleetdb/fleetdb/member"
)

// secretWatches holds the hub's Secret access in its members, namespace by
// namespace (issue 25, item 11), and its ConfigMap reads with it (issue 42,
// item 3: the role bound per namespace grants both; ConfigMaps are watched
// here as Secrets are). The member identity may read Secrets only
// in the managed namespaces where the hub bound fleetdb-hub-agent-secrets
// to itself (member.SecretAccess), so a member's cluster cache cannot watch
// Secrets cluster-wide (MemberClusterOptions reads them live instead). What
// the cluster-wide watch did for drift (a Secret of fleetdb's changed or
// deleted by hand is put back at once) a watch per managed namespace does:
// a small cache of fleetdb's Secrets (label selector) in that namespace
// alone, started once the binding is in place and living as long as the
// member's engaged cluster (Engage's context).
type secretWatches struct {
	access *member.SecretAccess
	memo   *member.Memo
	queue  *queue.Ref

	mu sync.Mutex
	// engaged holds, per member, its engaged cluster and the namespaces
	// watched in it; a reconnect engages a new cluster, which needs its own.
	engaged map[string]*engagedSecrets
}

type engagedSecrets struct {
	ctx     context.Context
	cl      cluster.Cluster
	watched map[string]bool
}

func newSecretWatches(memo *member.Memo, q *queue.Ref) *secretWatches {
	return &secretWatches{access: member.NewSecretAccess(), memo: memo, queue: q, engaged: map[string]*engagedSecrets{}}
}

// Start runs nothing: the watches live in the members' contexts.
func (w *secretWatches) Start(ctx context.Context) error {
	<-ctx.Done()
	return nil
}

// NeedLeaderElection: every replica of a sharded hub syncs its members.
func (w *secretWatches) NeedLeaderElection() bool { return false }

// Engage records the member's cluster and its lifetime; what was known of
// an earlier cluster of the member (a reconnect) is dropped with it.
func (w *secretWatches) Engage(ctx context.Context, name multicluster.ClusterName, cl cluster.Cluster) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.engaged[string(name)] = &engagedSecrets{ctx: ctx, cl: cl, watched: map[string]bool{}}
	go func() {
		<-ctx.Done()
		w.mu.Lock()
		defer w.mu.Unlock()
		if e := w.engaged[string(name)]; e != nil && e.cl == cl {
			delete(w.engaged, string(name))
		}
	}()
	return nil
}

// ensure gives the hub Secret access in namespace ns of the member (see
// member.SecretAccess.Ensure; create is the Namespace to create when it is
// missing, nil in a teardown) and starts the namespace's Secret watch. It
// reports false only when create is nil and the namespace does not exist.
func (w *secretWatches) ensure(ctx context.Context, name string, cl cluster.Cluster, ns string, create *corev1.Namespace) (bool, error) {
	present, err := w.access.Ensure(ctx, name, cl.GetClient(), cl.GetAPIReader(), ns, create)
	if err != nil || !present {
		return present, err
	}
	return true, w.watch(ctx, name, cl, ns)
}

// forget drops what is known of ns in the member after the member refused
// a Secret call there: the next sync binds again (see member.SecretAccess).
func (w *secretWatches) forget(name, ns string) { w.access.Forget(name, ns) }

// watch starts the Secret watch of namespace ns in the member once per
// engaged cluster and waits for its first list (bounded by ctx).
func (w *secretWatches) watch(ctx context.Context, name string, cl cluster.Cluster, ns string) error {
	w.mu.Lock()
	e := w.engaged[name]
	if e == nil || e.cl != cl || e.watched[ns] {
		// Not engaged through this manager (nothing to watch with), or watched.
		w.mu.Unlock()
		return nil
	}
	e.watched[ns] = true
	w.mu.Unlock()

	// The member cluster's HTTP client: the namespaces' watches share its
	// connections instead of opening their own.
	c, err := cache.New(cl.GetConfig(), cache.Options{
		HTTPClient: cl.GetHTTPClient(), Scheme: cl.GetScheme(), Mapper: cl.GetRESTMapper(),
		DefaultNamespaces:    map[string]cache.Config{ns: {}},
		DefaultLabelSelector: labels.SelectorFromSet(labels.Set{fleetv1alpha1.LabelManagedBy: fleetv1alpha1.ManagedByValue}),
	})
	if err == nil {
		err = w.handle(ctx, name, c, &corev1.Secret{}, corev1.SchemeGroupVersion.WithKind("Secret"))
	}
	if err == nil {
		err = w.handle(ctx, name, c, &corev1.ConfigMap{}, corev1.SchemeGroupVersion.WithKind("ConfigMap"))
	}
	if err != nil {
		w.unwatch(name, cl, ns)
		return fmt.Errorf("watching fleetdb's Secrets and ConfigMaps in namespace %s: %w", ns, err)
	}
	go func() { _ = c.Start(e.ctx) }()
	if !c.WaitForCacheSync(ctx) {
		// Started all the same: it syncs in the member's context, and its
		// events enqueue the syncs that need it.
		return fmt.Errorf("watching fleetdb's Secrets and ConfigMaps in namespace %s: the first list did not finish in time", ns)
	}
	return nil
}

func (w *secretWatches) unwatch(name string, cl cluster.Cluster, ns string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if e := w.engaged[name]; e != nil && e.cl == cl {
		delete(e.watched, ns)
	}
}

// handle maps the events of c on obj's kind (gvk) to member syncs of their
// Database; an update that shows what the hub's own last apply returned
// brings nothing new (as memberObjectEvents does for the other kinds).
func (w *secretWatches) handle(ctx context.Context, name string, c cache.Cache, obj client.Object, gvk schema.GroupVersionKind) error {
	inf, err := c.GetInformer(ctx, obj)
	if err != nil {
		return err
	}
	enqueue := func(obj any, own bool) {
		if t, ok := obj.(toolscache.DeletedFinalStateUnknown); ok {
			obj = t.Obj
		}
		o, ok := obj.(client.Object)
		if !ok || (own && w.memo.Wrote(name, gvk, o)) {
			return
		}
		for _, req := range databaseOfMemberObject(context.Background(), o) {
			w.queue.AddWith(name, req.NamespacedName, 0, 0)
		}
	}
	_, err = inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { enqueue(obj, false) },
		UpdateFunc: func(_, obj any) { enqueue(obj, true) },
		DeleteFunc: func(obj any) { enqueue(obj, true) },
	})
	return err
}
