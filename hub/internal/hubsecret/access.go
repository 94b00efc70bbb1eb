package hubsecret

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
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
// are read through a small cache of that namespace alone, started once the
// binding is in place and stopped when it goes.
//
// That cache holds no Secret data a tenant chose (issue 42, item 4): the
// managed-by label selects what it watches, and anyone who may write Secrets
// in the namespace can set that label, so it is no trust boundary. The
// namespace's watch is of metadata only (the API server sends no data),
// reduced to name and resourceVersion before it is stored; the data kept is
// that of the Secrets the hub read by name (a Database's credentials and
// topology PKI: the only names it asks for), at the resourceVersion read,
// dropped when the watch shows the Secret changed or gone. So a tenant's
// labelled Secrets, however many and large, cost the hub a name each, and
// their data never reaches it.
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
	// cache watches the metadata of the namespace's Secrets labelled
	// managed-by=fleetdb (stripMetadata: name and resourceVersion only).
	cache  cache.Cache
	cancel context.CancelFunc

	mu sync.Mutex
	// data are the Secrets the hub read by name, each at the
	// resourceVersion it was read at: only fleetdb's own (kept), a
	// Database's credentials or topology PKI.
	data map[string]*corev1.Secret
}

// secretGVK is the kind of the namespace caches' metadata objects.
var secretGVK = corev1.SchemeGroupVersion.WithKind("Secret")

// lookup is the Secret name as read at resourceVersion rv, if the hub read it
// at that version.
func (n *namespaceSecrets) lookup(name, rv string) *corev1.Secret {
	n.mu.Lock()
	defer n.mu.Unlock()
	if s := n.data[name]; s != nil && s.ResourceVersion == rv {
		return s
	}
	return nil
}

// keep stores a copy of s, read live, when it is one of fleetdb's hub
// Secrets (its label, a Database as its controller): a Secret of that name
// that is someone else's is read again when asked for, never kept.
func (n *namespaceSecrets) keep(s *corev1.Secret) {
	owner := metav1.GetControllerOf(s)
	if s.Labels[fleetv1alpha1.LabelManagedBy] != fleetv1alpha1.ManagedByValue || owner == nil || owner.Kind != "Database" {
		return
	}
	c := s.DeepCopy()
	c.ManagedFields = nil
	n.mu.Lock()
	n.data[s.Name] = c
	n.mu.Unlock()
}

// drop forgets the data of a Secret the watch saw change (gone: always).
func (n *namespaceSecrets) drop(obj any, gone bool) {
	if d, ok := obj.(toolscache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	o, err := meta.Accessor(obj)
	if err != nil {
		return
	}
	n.mu.Lock()
	if s := n.data[o.GetName()]; s != nil && (gone || s.ResourceVersion != o.GetResourceVersion()) {
		delete(n.data, o.GetName())
	}
	n.mu.Unlock()
}

// stripMetadata keeps of a watched Secret's metadata what get needs: its
// name, namespace, UID and resourceVersion. Labels, annotations, owners and
// managed fields are a tenant's to fill (up to the object size limit).
func stripMetadata(in any) (any, error) {
	if m, ok := in.(*metav1.PartialObjectMetadata); ok {
		m.ObjectMeta = metav1.ObjectMeta{Name: m.Name, Namespace: m.Namespace, UID: m.UID, ResourceVersion: m.ResourceVersion}
	}
	return in, nil
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

// BindingPolicy is the admission policy of deploy/rbac (secrets_policy.yaml)
// that admits the hub's RoleBinding only in a namespace where a Database
// lives, by the API server's own watch of the Databases.
const BindingPolicy = "fleetdb-hub-binds-only-where-databases-live"

// bind creates the RoleBinding Role in ns for the hub's identity. The API
// server admits it only where it has seen a Database (BindingPolicy); the
// hub reconciles a Database it saw, so a refusal by that policy is the API
// server's watch behind the hub's: it binds again, with backoff, for a few
// seconds, then returns the refusal (the reconcile is retried).
func (h *Access) bind(ctx context.Context, ns string) error {
	var last error
	err := wait.ExponentialBackoffWithContext(ctx, wait.Backoff{Duration: 100 * time.Millisecond, Factor: 2, Steps: 6, Cap: 2 * time.Second},
		func(ctx context.Context) (bool, error) {
			last = member.BindSelf(ctx, h.c, ns, Role)
			// (A refusal for missing params is 422 Invalid, not 403.)
			if last != nil && (apierrors.IsInvalid(last) || apierrors.IsForbidden(last)) && strings.Contains(last.Error(), BindingPolicy) {
				return false, nil
			}
			return true, last
		})
	if err != nil && last != nil {
		return last
	}
	return err
}

// watch starts the metadata cache of fleetdb's Secrets in ns and waits for
// its first list (bounded by ctx).
func (h *Access) watch(ctx context.Context, ns string) (*namespaceSecrets, error) {
	c, err := cache.New(h.cfg, cache.Options{
		HTTPClient: h.httpClient, Scheme: h.scheme, Mapper: h.mapper,
		DefaultNamespaces:    map[string]cache.Config{ns: {}},
		DefaultLabelSelector: labels.SelectorFromSet(labels.Set{fleetv1alpha1.LabelManagedBy: fleetv1alpha1.ManagedByValue}),
		DefaultTransform:     stripMetadata,
	})
	e := &namespaceSecrets{cache: c, data: map[string]*corev1.Secret{}}
	if err == nil {
		m := &metav1.PartialObjectMetadata{}
		m.SetGroupVersionKind(secretGVK)
		var inf cache.Informer
		if inf, err = c.GetInformer(ctx, m); err == nil {
			_, err = inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
				UpdateFunc: func(_, obj any) { e.drop(obj, false) },
				DeleteFunc: func(obj any) { e.drop(obj, true) },
			})
		}
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
	e.cancel = cancel
	return e, nil
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
	removed := false
	for i := range bindings.Items {
		rb := &bindings.Items[i]
		if rb.Name != Role || rb.Labels[fleetv1alpha1.LabelManagedBy] != fleetv1alpha1.ManagedByValue {
			continue
		}
		if err := h.c.Delete(ctx, rb, client.Preconditions{UID: &rb.UID}); err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
			return fmt.Errorf("removing RoleBinding %s of namespace %s: %w", Role, ns, err)
		}
		removed = true
	}
	if removed {
		h.awaitRevoked(ctx, ns)
	}
	h.mu.Lock()
	h.released[ns] = true
	h.mu.Unlock()
	return nil
}

// revokeWait bounds how long Release waits for the API server's authorizer
// to stop granting the Secrets of a namespace whose RoleBinding it removed.
const revokeWait = 10 * time.Second

// awaitRevoked waits, under the namespace's lock, until the API server no
// longer grants the hub the Secrets of ns (its authorizer learns of the
// RoleBinding's deletion from a watch, a moment after the delete), or
// revokeWait passes (another grant of the hub's, wider rights, stays).
// Without it a Database created in ns right after its last one went is
// ensured while the authorizer still shows the binding deleted: the review
// says allowed, nothing is bound, and the namespace cache's list is then
// refused until the reconcile gives up and binds (issue 42: the hub never
// asks for a Secret the API server refuses it).
func (h *Access) awaitRevoked(ctx context.Context, ns string) {
	wctx, cancel := context.WithTimeout(ctx, revokeWait)
	defer cancel()
	_ = wait.ExponentialBackoffWithContext(wctx, wait.Backoff{Duration: 20 * time.Millisecond, Factor: 2, Steps: 1 << 20, Cap: 500 * time.Millisecond},
		func(ctx context.Context) (bool, error) {
			allowed, err := h.mayWatchSecrets(ctx, ns)
			return err == nil && !allowed, nil
		})
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

// get reads a Secret of a tenant namespace by name. Where this process
// holds the namespace's cache (ensure): NotFound when the cache has no
// Secret of that name labelled fleetdb's (as a cache of the Secrets would
// answer), the data kept when the hub read it at the resourceVersion the
// cache shows, else a live read by name (kept when it is fleetdb's). Without
// the cache (a sharded hub's replica that reads what the leader bound): live.
func (h *Access) get(ctx context.Context, key client.ObjectKey, s *corev1.Secret) error {
	e, _ := h.entry(key.Namespace)
	if e == nil {
		return h.refused(key.Namespace, h.live.Get(ctx, key, s))
	}
	m := &metav1.PartialObjectMetadata{}
	m.SetGroupVersionKind(secretGVK)
	if err := e.cache.Get(ctx, key, m); err != nil {
		return h.refused(key.Namespace, err)
	}
	if kept := e.lookup(key.Name, m.ResourceVersion); kept != nil {
		kept.DeepCopyInto(s)
		return nil
	}
	if err := h.live.Get(ctx, key, s); err != nil {
		return h.refused(key.Namespace, err)
	}
	e.keep(s)
	return nil
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
