package member

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleetv1alpha1 "github.com/fleetdb/fleetdb/apis/v1alpha1"
)

// ConflictError says that a member object fleetdb would write exists but is
// not fleetdb's object for this Database. Apply never touches it.
type ConflictError struct {
	Kind, Namespace, Name string
	// Reason says why, when the object is fleetdb's but not this hub's or
	// this Database's to change (see guardOwnership); empty: not fleetdb's.
	Reason string
}

// Error names the object.
func (e *ConflictError) Error() string {
	if e.Reason != "" {
		return fmt.Sprintf("%s %s/%s exists and is not this Database's to change: %s", e.Kind, e.Namespace, e.Name, e.Reason)
	}
	return fmt.Sprintf("%s %s/%s exists and is not managed by fleetdb for this Database", e.Kind, e.Namespace, e.Name)
}

// ApplyResult tells what Apply did. Objects are named "Kind/namespace/name"
// ("Kind/name" for cluster-scoped ones).
type ApplyResult struct {
	// Applied are the objects a write request was sent for.
	Applied []string
	// Restored are objects that were missing or had been changed by someone
	// else and were put back. Only what memo remembers applying counts: a
	// first creation (or a write in the first pass after a hub restart) is no
	// restore.
	Restored []string
	// Pruned are fleetdb objects of the Database that are no longer rendered
	// (e.g. the PodDisruptionBudget after a scale-down to one replica) and were deleted.
	Pruned []string
}

// Apply makes the member hold objs, everything Render returned for one
// Database in cluster:
//
//   - It reads every object first, through c (typically cache-backed, maybe
//     filtered to fleetdb's labels) and, for what c does not hold, through the
//     uncached live reader, those reads at once. If any exists without
//     fleetdb's labels for this Database, Apply returns a *ConflictError and
//     writes nothing at all.
//     Objects of a deleted Database of the same name (another UID) are adopted.
//   - The Namespace is created only when something must be created in it and
//     it is missing; an existing Namespace is never changed.
//   - Every other object is written with server-side apply under
//     fleetv1alpha1.FieldManager, forcing ownership, all at once, unless memo shows that
//     the member holds exactly what was last applied (see Memo), in which case
//     nothing is sent. A new traceparent alone is no reason to write. Every
//     object records the hash of its rendering (AnnotationAppliedHash), so a
//     memo without an entry (a restarted hub) sends nothing for an object that
//     carries the same hash and holds every value the apply would send.
//   - The volumeClaimTemplates of an existing StatefulSet are immutable: when
//     the rendered ones differ (a storage change, an adopted StatefulSet),
//     the live ones are kept. So is the spec.bootstrap of an existing
//     CloudNativePG Cluster (immutable in CloudNativePG: a standby created
//     by pg_basebackup keeps that bootstrap after a switchover promoted it).
//   - fleetdb objects of this Database that objs does not hold are deleted
//     (PersistentVolumeClaims never are). objs must therefore be complete.
//   - With WithClaimsGuard, a workload (StatefulSet, CloudNativePG Cluster)
//     that is not in the member yet is created only when the volume claims
//     it would start on are the applied Database's, or the guard lets the
//     others be adopted; otherwise nothing is written and a
//     *RetainedDataError is returned. The claims are never touched.
//
// live may be nil when c is not cache-backed. memo may be nil: then every
// object is applied every time.
func Apply(ctx context.Context, cluster string, c client.Client, live client.Reader, objs []client.Object, memo *Memo, opts ...ApplyOption) (ApplyResult, error) {
	var res ApplyResult
	var o applyOptions
	for _, opt := range opts {
		opt(&o)
	}
	if live == nil {
		live = c
	}
	plan, err := newPlan(cluster, objs)
	if err != nil {
		return res, err
	}
	// Read everything before writing anything: a conflict leaves the member untouched.
	createdNS, err := plan.read(ctx, c, live)
	if err != nil {
		return res, err
	}
	if createdNS {
		res.Applied = append(res.Applied, ref(plan.namespace))
	} else if err := plan.guardClaims(ctx, live, o.claims); err != nil {
		// (A namespace created just now holds no claims.)
		return res, err
	}
	applied, restored, err := plan.write(ctx, c, memo)
	res.Applied = append(res.Applied, applied...)
	res.Restored = restored
	if err != nil {
		return res, err
	}
	pruned, err := prune(ctx, c, plan, memo)
	res.Pruned = pruned
	return res, err
}

// ApplyOption changes what Apply does.
type ApplyOption func(*applyOptions)

type applyOptions struct {
	claims ClaimsGuard
}

// WithClaimsGuard has Apply ask guard before it creates a workload that
// would start on volume claims of another Database (see Apply).
func WithClaimsGuard(guard ClaimsGuard) ApplyOption {
	return func(o *applyOptions) { o.claims = guard }
}

// read reads every object of the plan. The cache answers for what fleetdb
// already runs; what it misses (new objects, or a lagging cache) is read
// live, all at once, with the Namespace when something is to be created in
// it. A missing Namespace is created; createdNS says whether it was.
func (p *plan) read(ctx context.Context, c client.Client, live client.Reader) (createdNS bool, err error) {
	var misses []*item
	for _, it := range p.items {
		found, err := it.readCached(ctx, c, p.dbNamespace, p.dbName)
		if err != nil {
			return false, err
		}
		if !found {
			misses = append(misses, it)
		}
	}
	if len(misses) == 0 {
		return false, nil
	}
	nsExists := true
	reads := make([]func() error, 0, len(misses)+1)
	for _, it := range misses {
		reads = append(reads, func() error { return it.readLive(ctx, live, p.dbNamespace, p.dbName) })
	}
	if p.namespace != nil {
		reads = append(reads, func() (err error) {
			nsExists, err = namespaceExists(ctx, live, p.namespace.Name)
			return err
		})
	}
	if err := parallel(reads); err != nil {
		return false, err
	}
	missing := slices.ContainsFunc(misses, func(it *item) bool { return it.live == nil })
	if !missing || nsExists {
		return false, nil
	}
	return createNamespace(ctx, c, p.namespace)
}

// write applies the objects the member does not hold as last applied. They
// do not depend on each other at creation (pods wait for their Secret and
// ConfigMap, a CloudNativePG Cluster for its initdb Secret), so they are
// written at once: one round trip per member instead of one per object.
// Only a workload object being created (see workloadFirst) goes alone, in a
// round of its own before the others: writes sent together contend in the
// member's API server, and the workload is what starts the database. It
// returns the objects written and, among them, those put back after drift.
func (p *plan) write(ctx context.Context, c client.Client, memo *Memo) (applied, restored []string, err error) {
	var todo []*item
	for _, it := range p.items {
		if !it.upToDate(memo) {
			todo = append(todo, it)
		}
	}
	wasRestored := make([]bool, len(todo))
	var errs []error
	for _, round := range p.rounds(todo) {
		writes := make([]func() error, len(round))
		for j, i := range round {
			it := todo[i]
			writes[j] = func() (err error) {
				wasRestored[i], err = it.apply(ctx, c, memo)
				return err
			}
		}
		errs = append(errs, parallel(writes))
	}
	for i, it := range todo {
		if it.applied {
			applied = append(applied, ref(it.desired))
		}
		if wasRestored[i] {
			restored = append(restored, ref(it.desired))
		}
	}
	return applied, restored, errors.Join(errs...)
}

// rounds splits the indexes of todo into rounds of writes sent at once: the
// workload objects being created first when workloadFirst allows it, then
// the rest; otherwise everything in one round. A failed first round does
// not stop the second: every object is tried, as when all go at once.
func (p *plan) rounds(todo []*item) [][]int {
	var first, rest []int
	for i, it := range todo {
		if it.live == nil && isWorkloadKind(it.gvk) && p.workloadFirst() {
			first = append(first, i)
		} else {
			rest = append(rest, i)
		}
	}
	if len(first) == 0 || len(rest) == 0 {
		return [][]int{append(first, rest...)}
	}
	return [][]int{first, rest}
}

// workloadFirst reports whether a new workload may be written before the
// other objects. Not when the plan holds Secrets besides the credentials
// (a PrimaryStandby member's certificates): a Cluster must never meet its
// certificate Secrets missing, even for one round trip.
func (p *plan) workloadFirst() bool {
	for _, it := range p.items {
		if it.gvk.Group == "" && it.gvk.Kind == "Secret" && it.desired.GetName() != secretName(p.dbName) {
			return false
		}
	}
	return true
}

// isWorkloadKind: the object that creates the database's pods (a StatefulSet,
// or the CloudNativePG Cluster whose operator creates them).
func isWorkloadKind(gvk schema.GroupVersionKind) bool {
	return gvk == CNPGClusterGVK || (gvk.Group == "apps" && gvk.Kind == "StatefulSet")
}

// plan is Apply's view of objs.
type plan struct {
	cluster     string
	namespace   *corev1.Namespace
	items       []*item
	dbNamespace string
	dbName      string
	// owner is whose objects prune may delete (hub identity and Database UID of objs).
	owner Owner
}

// item is one object to apply.
type item struct {
	desired client.Object
	gvk     schema.GroupVersionKind
	key     memoKey
	hash    string
	// live is the object as read before applying; nil when it does not exist.
	live client.Object
	// applied is set once a write request for the object succeeded.
	applied bool
}

func newPlan(cluster string, objs []client.Object) (*plan, error) {
	p := &plan{cluster: cluster}
	for _, obj := range objs {
		if ns, ok := obj.(*corev1.Namespace); ok {
			p.namespace = ns
			continue
		}
		gvk := obj.GetObjectKind().GroupVersionKind()
		if gvk.Kind == "" || gvk.Version == "" {
			return nil, fmt.Errorf("apply: %T %s has no apiVersion or kind", obj, obj.GetName())
		}
		l := obj.GetLabels()
		dbNamespace, dbName := l[fleetv1alpha1.LabelDatabaseNamespace], l[fleetv1alpha1.LabelDatabaseName]
		if !ownedBy(l, dbNamespace, dbName) || dbName == "" {
			return nil, fmt.Errorf("apply: %s %s has no fleetdb labels", gvk.Kind, obj.GetName())
		}
		if p.dbName == "" {
			p.dbNamespace, p.dbName = dbNamespace, dbName
			p.owner = Owner{Namespace: dbNamespace, Name: dbName,
				UID: types.UID(l[fleetv1alpha1.LabelDatabaseUID]), HubID: l[fleetv1alpha1.LabelHubID]}
		} else if p.dbNamespace != dbNamespace || p.dbName != dbName {
			return nil, fmt.Errorf("apply: objects of more than one Database (%s/%s and %s/%s)", p.dbNamespace, p.dbName, dbNamespace, dbName)
		}
		hash, err := objectHash(obj)
		if err != nil {
			return nil, fmt.Errorf("apply: hashing %s %s: %w", gvk.Kind, obj.GetName(), err)
		}
		p.items = append(p.items, &item{
			desired: obj,
			gvk:     gvk,
			key:     memoKey{cluster: cluster, gvk: gvk, namespace: obj.GetNamespace(), name: obj.GetName()},
			hash:    hash,
		})
	}
	return p, nil
}

// readCached looks the object up through c (typically cache-backed); found
// is false when c does not hold it, and the live reader must be asked.
func (it *item) readCached(ctx context.Context, c client.Reader, dbNamespace, dbName string) (found bool, err error) {
	cur := newLike(it.desired)
	err = c.Get(ctx, client.ObjectKeyFromObject(it.desired), cur)
	if apierrors.IsNotFound(err) {
		return false, nil
	}
	return true, it.check(cur, err, dbNamespace, dbName)
}

// readLive reads the object from the API server: the cache may lag, or may
// only hold fleetdb's objects, and an unowned object is never overwritten.
func (it *item) readLive(ctx context.Context, live client.Reader, dbNamespace, dbName string) error {
	cur := newLike(it.desired)
	err := live.Get(ctx, client.ObjectKeyFromObject(it.desired), cur)
	if apierrors.IsNotFound(err) {
		it.live = nil
		return nil
	}
	return it.check(cur, err, dbNamespace, dbName)
}

// check keeps cur as the live object if it was read and fleetdb owns it.
func (it *item) check(cur client.Object, err error, dbNamespace, dbName string) error {
	if err != nil {
		return fmt.Errorf("reading %s: %w", ref(it.desired), err)
	}
	if !ownedBy(cur.GetLabels(), dbNamespace, dbName) && !retainedCredentials(cur, it.desired) {
		return &ConflictError{Kind: it.gvk.Kind, Namespace: cur.GetNamespace(), Name: cur.GetName()}
	}
	if err := guardOwnership(it.desired, cur); err != nil {
		return err
	}
	if cur.GetDeletionTimestamp() != nil {
		return fmt.Errorf("%s is being deleted; it is recreated once it is gone", ref(it.desired))
	}
	it.live = cur
	return nil
}

// parallel runs fns at once and joins their errors.
func parallel(fns []func() error) error {
	return errors.Join(runAll(fns)...)
}

// upToDate reports whether the member holds exactly what was last applied:
// same rendered object, the live object unchanged since (its generation, or
// its resourceVersion for kinds without one), and fleetdb's labels and
// annotations still in place (metadata edits do not bump the generation).
// What memo does not know (a restarted hub) is up to date when the live
// object holds what an apply would send, see seed.
func (it *item) upToDate(memo *Memo) bool {
	if it.live == nil {
		return false
	}
	e, ok := memo.get(it.key)
	if !ok {
		return it.seed(memo)
	}
	if e.hash != it.hash {
		return false
	}
	if e.version != liveVersion(it.live) {
		// A cache that has not seen the last write yet is no drift: writing
		// again would be a no-op write.
		return e.behind(it.live)
	}
	return hasAll(it.live.GetLabels(), it.desired.GetLabels()) &&
		hasAll(it.live.GetAnnotations(), withoutTraceparent(it.desired.GetAnnotations()))
}

// apply sends the object and remembers the answer. It reports whether the
// write put back something that had been deleted or changed by someone else.
func (it *item) apply(ctx context.Context, c client.Client, memo *Memo) (restored bool, err error) {
	u, err := it.body()
	if err != nil {
		return false, fmt.Errorf("applying %s: %w", ref(it.desired), err)
	}
	if err := ServerSideApply(ctx, c, u, fleetv1alpha1.FieldManager); err != nil {
		return false, fmt.Errorf("applying %s: %w", ref(it.desired), err)
	}
	it.applied = true
	rv := u.GetResourceVersion()
	prev, known := memo.get(it.key)
	switch {
	case !known:
		// First creation, or the first pass after a hub restart that found
		// the object not as last applied: nothing to report.
	case it.live == nil:
		restored = true
	default:
		// Unchanged rendering, yet the write changed the object: someone had
		// changed it. A no-op write (stale cache) changes nothing.
		restored = prev.hash == it.hash && rv != it.live.GetResourceVersion() && rv != prev.resourceVersion
	}
	memo.put(it.key, memoEntry{
		hash:            it.hash,
		version:         liveVersion(u),
		resourceVersion: rv,
		database:        it.database(),
		uid:             u.GetUID(),
		generation:      u.GetGeneration(),
	})
	return restored, nil
}

// namespaceExists reads the Namespace live (member caches hold only
// fleetdb's labelled objects). One being deleted is an error: nothing can be
// created in it until it is gone.
func namespaceExists(ctx context.Context, live client.Reader, name string) (bool, error) {
	cur := &corev1.Namespace{}
	err := live.Get(ctx, client.ObjectKey{Name: name}, cur)
	switch {
	case apierrors.IsNotFound(err):
		return false, nil
	case err != nil:
		return false, fmt.Errorf("reading namespace %s: %w", name, err)
	case cur.DeletionTimestamp != nil:
		return false, fmt.Errorf("namespace %s is being deleted; it is recreated once it is gone", name)
	}
	return true, nil
}

// createNamespace creates ns; it reports whether it did (false: it appeared meanwhile).
func createNamespace(ctx context.Context, c client.Client, ns *corev1.Namespace) (bool, error) {
	obj := ns.DeepCopy()
	obj.ResourceVersion = ""
	if err := c.Create(ctx, obj, client.FieldOwner(fleetv1alpha1.FieldManager)); err != nil {
		if apierrors.IsAlreadyExists(err) {
			return false, nil
		}
		return false, fmt.Errorf("creating namespace %s: %w", ns.Name, err)
	}
	return true, nil
}

// liveVersion identifies a state of an object: its generation for kinds that
// have one (status updates do not move it), else its resourceVersion.
func liveVersion(obj metav1.Object) string {
	if g := obj.GetGeneration(); g > 0 {
		return "g" + strconv.FormatInt(g, 10)
	}
	return "rv" + obj.GetResourceVersion()
}

// objectHash hashes the rendered object without its traceparent: a new trace
// alone does not make a write; the next real change carries its traceparent.
func objectHash(obj client.Object) (string, error) {
	cp, ok := obj.DeepCopyObject().(client.Object)
	if !ok {
		return "", fmt.Errorf("%T is not a client.Object", obj)
	}
	cp.SetAnnotations(withoutTraceparent(cp.GetAnnotations()))
	b, err := json.Marshal(cp)
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:]), nil
}

func withoutTraceparent(annotations map[string]string) map[string]string {
	if _, ok := annotations[fleetv1alpha1.AnnotationTraceparent]; !ok {
		return annotations
	}
	out := make(map[string]string, len(annotations))
	for k, v := range annotations {
		if k != fleetv1alpha1.AnnotationTraceparent {
			out[k] = v
		}
	}
	return out
}

// newLike returns a new empty object of obj's Go type.
func newLike(obj client.Object) client.Object {
	if u, ok := obj.(*unstructured.Unstructured); ok {
		cur := &unstructured.Unstructured{}
		cur.SetGroupVersionKind(u.GroupVersionKind())
		return cur
	}
	return reflect.New(reflect.TypeOf(obj).Elem()).Interface().(client.Object)
}

// ref names an object as "Kind/namespace/name", or "Kind/name" when cluster-scoped.
func ref(obj client.Object) string {
	kind := obj.GetObjectKind().GroupVersionKind().Kind
	if kind == "" {
		kind = reflect.TypeOf(obj).Elem().Name()
	}
	if obj.GetNamespace() == "" {
		return kind + "/" + obj.GetName()
	}
	return kind + "/" + obj.GetNamespace() + "/" + obj.GetName()
}
