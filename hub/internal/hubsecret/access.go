package hubsecret

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleetv1alpha1 "github.com/fleetdb/fleetdb/apis/v1alpha1"
	"github.com/fleetdb/fleetdb/member"
)

// Role is the ClusterRole of deploy/rbac (secrets_role.yaml) that
// holds the hub's Secret rights in a tenant namespace of the hub cluster. The
// hub binds it to itself, by a RoleBinding of the same name, in each
// namespace where a Database lives, before it reads or writes a Secret there
// (Access.Ensure), and deletes that RoleBinding when the namespace's last
// Database is gone (Access.Release). The hub's ClusterRole has no Secret
// rights; its kubeconfig Secrets are read through a Role of the hub namespace.
const Role = "fleetdb-hub-secrets"

// The RBAC rights of the hub in the hub cluster that Access uses: create
// the RoleBinding (create cannot be narrowed by name; the admission policy
// of deploy/rbac admits only this one, of this role, to the hub itself, and
// never in the hub namespace or kube-*), bind that one role, delete that
// RoleBinding by name, list the RoleBindings of that name (a list with the
// field selector metadata.name=fleetdb-hub-secrets is authorized by
// resourceNames: staleBindings), and ask the API server what the hub may do.
//
// +kubebuilder:rbac:groups=rbac.authorization.k8s.io,resources=rolebindings,verbs=create
// +kubebuilder:rbac:groups=rbac.authorization.k8s.io,resources=rolebindings,verbs=list;delete,resourceNames=fleetdb-hub-secrets
// +kubebuilder:rbac:groups=rbac.authorization.k8s.io,resources=clusterroles,verbs=bind,resourceNames=fleetdb-hub-secrets
// +kubebuilder:rbac:groups=authorization.k8s.io,resources=selfsubjectaccessreviews,verbs=create
// +kubebuilder:rbac:groups=authentication.k8s.io,resources=selfsubjectreviews,verbs=create

// Access holds the hub's Secret access in the hub cluster, namespace by
// namespace (issue 25, item 12), as secretWatches does in the members: the
// hub's identity may read and write Secrets only in the tenant namespaces
// where it bound Role, so the manager's cache holds Secrets of the
// hub namespace only (hubCacheOptions), and the Secrets of a tenant namespace
// are read from a small cache of fleetdb's own Secrets (label selector) of
// that namespace alone, started once the binding is in place and stopped
// when it goes.
type Access struct {
	cfg        *rest.Config
	httpClient *http.Client
	scheme     *runtime.Scheme
	mapper     meta.RESTMapper
	// c writes the RoleBindings and the access reviews; live reads
	// uncached (the Databases left in a namespace, Secrets where no
	// namespace cache runs).
	c    client.Client
	live client.Reader
	// protected are the namespaces the hub never binds in (the hub
	// namespace, kube-system and the other always protected ones).
	protected func(string) bool

	mu sync.Mutex
	// ctx is the manager's (Start): the namespace caches live in it.
	ctx context.Context
	// locks serialize ensure and release per namespace.
	locks map[string]*sync.Mutex
	// caches are the namespaces where the hub holds Secret access, each
	// with its cache.
	caches map[string]*namespaceSecrets
	// released are the namespaces whose RoleBinding this process removed
	// (or found gone) since it last bound there: a second release (the
	// deletion's event after the finalizer's release) sends nothing.
	released map[string]bool
}

type namespaceSecrets struct {
	cache  cache.Cache
	cancel context.CancelFunc
}

// NewAccess is the hub's Secret access in the hub cluster of mgr; it never
// binds in a namespace protected reports.
func NewAccess(mgr ctrl.Manager, protected func(string) bool) *Access {
	return &Access{
		cfg: mgr.GetConfig(), httpClient: mgr.GetHTTPClient(), scheme: mgr.GetScheme(), mapper: mgr.GetRESTMapper(),
		c: mgr.GetClient(), live: mgr.GetAPIReader(), protected: protected,
		locks: map[string]*sync.Mutex{}, caches: map[string]*namespaceSecrets{}, released: map[string]bool{},
	}
}

// Start keeps the manager's context for the namespace caches.
func (h *Access) Start(ctx context.Context) error {
	h.mu.Lock()
	h.ctx = ctx
	h.mu.Unlock()
	<-ctx.Done()
	return nil
}

// NeedLeaderElection is false: every replica reads Secrets (a sharded hub's member
// syncs read the credentials), though only the leader binds and releases.
func (h *Access) NeedLeaderElection() bool { return false }

func (h *Access) lock(ns string) func() {
	h.mu.Lock()
	l := h.locks[ns]
	if l == nil {
		l = &sync.Mutex{}
		h.locks[ns] = l
	}
	h.mu.Unlock()
	l.Lock()
	return l.Unlock
}

func (h *Access) entry(ns string) (*namespaceSecrets, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	e, ok := h.caches[ns]
	return e, ok
}

// Ensure gives the hub Secret access in namespace ns of the hub cluster
// before a Secret of it is read or written. In this order:
//
//   - known from an earlier call: nothing is sent;
//   - the API server is asked (SelfSubjectAccessReview) whether the hub may
//     watch Secrets in ns; if so (the RoleBinding made before a restart, an
//     identity with wider rights), nothing is bound;
//   - else the RoleBinding Role is created in ns for the identity
//     the hub authenticates as (SelfSubjectReview), one that exists already
//     kept, and the review is repeated, with backoff, until the API
//     server's authorizer has it (a moment after the create) or ctx ends;
//   - the namespace's Secret cache is started and its first list awaited.
//
// The hub never asks a Secret of a namespace the API server refuses it, so
// a 403 on a Secret call means someone removed the binding (forget).
func (h *Access) Ensure(ctx context.Context, ns string) error {
	if h.protected(ns) {
		return fmt.Errorf("namespace %s is protected: the hub holds no Secret access there", ns)
	}
	unlock := h.lock(ns)
	defer unlock()
	if _, ok := h.entry(ns); ok {
		return nil
	}
	allowed, err := h.mayWatchSecrets(ctx, ns)
	if err != nil {
		return err
	}
	if !allowed {
		if err := h.bind(ctx, ns); err != nil {
			return err
		}
		err = wait.ExponentialBackoffWithContext(ctx, wait.Backoff{Duration: 50 * time.Millisecond, Factor: 2, Steps: 1 << 20, Cap: time.Second},
			func(ctx context.Context) (bool, error) { return h.mayWatchSecrets(ctx, ns) })
		if err != nil {
			return fmt.Errorf("waiting for the hub's API server to grant the Secrets of namespace %s (RoleBinding %s): %w", ns, Role, err)
		}
	}
	e, err := h.watch(ctx, ns)
	if err != nil {
		return err
	}
	h.mu.Lock()
	h.caches[ns] = e
	delete(h.released, ns)
	h.mu.Unlock()
	return nil
}

// mayWatchSecrets asks the API server whether the hub may watch Secrets in
// ns (the cache lists and watches; the role grants both with the writes).
func (h *Access) mayWatchSecrets(ctx context.Context, ns string) (bool, error) {
	review := &authorizationv1.SelfSubjectAccessReview{Spec: authorizationv1.SelfSubjectAccessReviewSpec{
		ResourceAttributes: &authorizationv1.ResourceAttributes{Namespace: ns, Verb: "watch", Resource: "secrets"},
	}}
	if err := h.c.Create(ctx, review); err != nil {
		return false, fmt.Errorf("asking whether the hub may read Secrets in namespace %s: %w", ns, err)
	}
	return review.Status.Allowed, nil
}

// bind creates the RoleBinding Role in ns for the hub's identity.
func (h *Access) bind(ctx context.Context, ns string) error {
	return member.BindSelf(ctx, h.c, ns, Role)
}

// watch starts the cache of fleetdb's Secrets in ns and waits for its first
// list (bounded by ctx).
func (h *Access) watch(ctx context.Context, ns string) (*namespaceSecrets, error) {
	c, err := cache.New(h.cfg, cache.Options{
		HTTPClient: h.httpClient, Scheme: h.scheme, Mapper: h.mapper,
		DefaultNamespaces:    map[string]cache.Config{ns: {}},
		DefaultLabelSelector: labels.SelectorFromSet(labels.Set{fleetv1alpha1.LabelManagedBy: fleetv1alpha1.ManagedByValue}),
	})
	if err == nil {
		_, err = c.GetInformer(ctx, &corev1.Secret{})
	}
	if err != nil {
		return nil, fmt.Errorf("watching fleetdb's Secrets in namespace %s: %w", ns, err)
	}
	h.mu.Lock()
	root := h.ctx
	h.mu.Unlock()
	if root == nil {
		root = context.Background()
	}
	cctx, cancel := context.WithCancel(root)
	go func() { _ = c.Start(cctx) }()
	if !c.WaitForCacheSync(ctx) {
		cancel()
		return nil, fmt.Errorf("watching fleetdb's Secrets in namespace %s: the first list did not finish in time", ns)
	}
	return &namespaceSecrets{cache: c, cancel: cancel}, nil
}

// forget drops what is known of ns after the API server refused a Secret
// call there (its RoleBinding removed by hand): the next ensure binds again.
func (h *Access) forget(ns string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if e := h.caches[ns]; e != nil {
		e.cancel()
	}
	delete(h.caches, ns)
}

// Release removes the hub's Secret access in ns once no Database is left
// there (read live: the cache may not show one created a moment ago). A
// Database that is being deleted still counts, though its teardown needs no
// Secret of the hub: the RoleBinding goes with the namespace's last
// Database object, after its finalizer is released, so it never holds a
// teardown up; its Secrets (owned by their Database) are removed by the
// garbage collector, which needs no right of the hub's.
//
// except is the Database whose finalizer the caller just released (empty
// when the caller saw it gone). While the hub's cache still holds another
// Database of ns, nothing is read or removed: that one's deletion, when it
// comes, calls Release again (the caller reconciles every Database the
// cache sees go), and the last one reads live. So a namespace whose
// Databases are deleted at once makes one live read, not two per Database
// one after the other behind the namespace's lock (which held every
// reconcile of the namespace up in a burst).
func (h *Access) Release(ctx context.Context, ns string, except types.UID) error {
	if h.protected(ns) {
		return nil
	}
	if h.othersCached(ctx, ns, except) {
		return nil
	}
	unlock := h.lock(ns)
	defer unlock()
	h.mu.Lock()
	done := h.released[ns]
	h.mu.Unlock()
	if done {
		return nil
	}
	var left fleetv1alpha1.DatabaseList
	if err := h.live.List(ctx, &left, client.InNamespace(ns), client.Limit(1)); err != nil {
		return fmt.Errorf("listing the Databases left in namespace %s: %w", ns, err)
	}
	if len(left.Items) > 0 {
		return nil
	}
	h.forget(ns)
	// Only the binding the hub made (its managed-by label) goes: one a
	// platform team created under that name before the hub needed it was
	// adopted by Ensure and stays. A list by name (what resourceNames
	// authorizes), then a delete of exactly that object (its UID).
	var bindings rbacv1.RoleBindingList
	if err := h.live.List(ctx, &bindings, client.InNamespace(ns), client.MatchingFields{"metadata.name": Role}); err != nil {
		return fmt.Errorf("reading RoleBinding %s of namespace %s: %w", Role, ns, err)
	}
	for i := range bindings.Items {
		rb := &bindings.Items[i]
		if rb.Name != Role || rb.Labels[fleetv1alpha1.LabelManagedBy] != fleetv1alpha1.ManagedByValue {
			continue
		}
		if err := h.c.Delete(ctx, rb, client.Preconditions{UID: &rb.UID}); err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
			return fmt.Errorf("removing RoleBinding %s of namespace %s: %w", Role, ns, err)
		}
	}
	h.mu.Lock()
	h.released[ns] = true
	h.mu.Unlock()
	return nil
}

// othersCached reports whether the hub's cache holds a Database of ns other
// than except. A cache that cannot answer reports false: Release then reads live.
// Two Databases at most are looked at (one of them is not except), uncopied
// (only their UIDs are read): a namespace of thousands deleted at once costs
// no copy of them all per Database.
func (h *Access) othersCached(ctx context.Context, ns string, except types.UID) bool {
	var cached fleetv1alpha1.DatabaseList
	if err := h.c.List(ctx, &cached, client.InNamespace(ns), client.Limit(2), client.UnsafeDisableDeepCopy); err != nil {
		return false
	}
	for i := range cached.Items {
		if cached.Items[i].UID != except {
			return true
		}
	}
	return false
}

// get reads a Secret of a tenant namespace: from the namespace's cache when
// this process holds one (ensure), else live (a sharded hub's replica that
// reads what the leader bound).
func (h *Access) get(ctx context.Context, key client.ObjectKey, s *corev1.Secret) error {
	var err error
	if e, _ := h.entry(key.Namespace); e != nil {
		err = e.cache.Get(ctx, key, s)
	} else {
		err = h.live.Get(ctx, key, s)
	}
	return h.refused(key.Namespace, err)
}

// refused forgets ns when err is the API server refusing a Secret call
// there (the RoleBinding removed by hand): the next ensure binds again.
func (h *Access) refused(ns string, err error) error {
	if apierrors.IsForbidden(err) {
		h.forget(ns)
	}
	return err
}

// Client is the hub client with Secret reads routed through
// Access; every other call goes to the manager's client.
type secretsClient struct {
	client.Client
	secrets *Access
}

func (c secretsClient) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	if s, ok := obj.(*corev1.Secret); ok {
		return c.secrets.get(ctx, key, s)
	}
	return c.Client.Get(ctx, key, obj, opts...)
}

func (c secretsClient) Create(ctx context.Context, obj client.Object, opts ...client.CreateOption) error {
	err := c.Client.Create(ctx, obj, opts...)
	if _, ok := obj.(*corev1.Secret); ok {
		return c.secrets.refused(obj.GetNamespace(), err)
	}
	return err
}

func (c secretsClient) Patch(ctx context.Context, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
	err := c.Client.Patch(ctx, obj, patch, opts...)
	if _, ok := obj.(*corev1.Secret); ok {
		return c.secrets.refused(obj.GetNamespace(), err)
	}
	return err
}

// staleBindings removes, once the hub is elected, the RoleBindings
// Role it left in namespaces whose last Database went while it was
// not there to see it (it stopped between releasing that Database's
// finalizer and release). One list of the RoleBindings of that name in every
// namespace (authorized by resourceNames through the field selector), then
// release for each namespace without a Database in the hub's cache (release
// reads the namespace's Databases live before it deletes anything).
type staleBindings struct {
	secrets *Access
	cache   interface {
		WaitForCacheSync(context.Context) bool
		List(context.Context, client.ObjectList, ...client.ListOption) error
	}
	timeout time.Duration
}

// NeedLeaderElection: the elected replica binds and releases.
func (s *staleBindings) NeedLeaderElection() bool { return true }

func (s *staleBindings) Start(ctx context.Context) error {
	if !s.cache.WaitForCacheSync(ctx) {
		return nil
	}
	cctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	log := ctrl.LoggerFrom(ctx).WithName("hub-secrets")
	var bindings rbacv1.RoleBindingList
	if err := s.secrets.live.List(cctx, &bindings, client.MatchingFields{"metadata.name": Role}); err != nil {
		log.Error(err, "listing the hub's Secret RoleBindings; ones left where no Database is will stay")
		return nil
	}
	for _, rb := range bindings.Items {
		if rb.RoleRef.Name != Role || rb.Labels[fleetv1alpha1.LabelManagedBy] != fleetv1alpha1.ManagedByValue {
			continue
		}
		var dbs fleetv1alpha1.DatabaseList
		if err := s.cache.List(cctx, &dbs, client.InNamespace(rb.Namespace)); err != nil || len(dbs.Items) > 0 {
			continue
		}
		if err := s.secrets.Release(cctx, rb.Namespace, ""); err != nil {
			log.Error(err, "removing a Secret RoleBinding left where no Database is", "namespace", rb.Namespace)
		}
	}
	return nil
}

// Wrap is c with Secret reads routed through the namespace caches (and a
// refused Secret write forgetting the namespace's access).
func (h *Access) Wrap(c client.Client) client.Client { return secretsClient{Client: c, secrets: h} }

// StaleBindings is the elected replica's one pass over the RoleBindings
// left where no Database is (staleBindings), a manager Runnable.
func (h *Access) StaleBindings(c interface {
	WaitForCacheSync(context.Context) bool
	List(context.Context, client.ObjectList, ...client.ListOption) error
}, timeout time.Duration) interface {
	Start(context.Context) error
	NeedLeaderElection() bool
} {
	return &staleBindings{secrets: h, cache: c, timeout: timeout}
}
