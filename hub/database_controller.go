package hub

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"go.opentelemetry.io/otel/trace"
	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/client-go/util/workqueue"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/controller/priorityqueue"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/multicluster-runtime/pkg/multicluster"
	mcreconcile "sigs.k8s.io/multicluster-runtime/pkg/reconcile"

	fleetv1alpha1 "github.com/fleetdb/fleetdb/apis/v1alpha1"
	"github.com/fleetdb/fleetdb/clusters"
)

// +kubebuilder:rbac:groups=fleetdb.io,resources=databases,verbs=get;list;watch;update;patch
// +kubebuilder:rbac:groups=fleetdb.io,resources=databases/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=fleetdb.io,resources=databases/finalizers,verbs=update
// +kubebuilder:rbac:groups=fleetdb.io,resources=memberclusters,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=secrets,verbs=get;list;watch;create;patch
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch

// databaseReconciler is the hub's Database controller: finalizer, placement,
// rollout plan, teardown accounting and the single writer of Database.status.
type databaseReconciler struct {
	hub      client.Client
	live     client.Reader
	provider *clusters.Provider
	state    *state
	opts     Options
	recorder events.EventRecorder
	// members enqueues member-sync requests.
	members *queueRef
	// now is replaceable in tests.
	now func() time.Time
	// tracer starts the Database.Reconcile spans; nil when tracing is off.
	tracer trace.Tracer
}

// Reconcile implements the hub's reconcile contract: read, validate, act, status.
func (r *databaseReconciler) Reconcile(ctx context.Context, req mcreconcile.Request) (res ctrl.Result, err error) {
	if req.ClusterName != "" {
		return ctrl.Result{}, nil
	}
	key := req.NamespacedName
	ctx, span := r.startReconcileSpan(ctx, key)
	defer func() { endReconcileSpan(span, res, err) }()
	log := ctrl.LoggerFrom(ctx).WithValues("database", key.String())
	ctx = ctrl.LoggerInto(ctx, log)

	db := &fleetv1alpha1.Database{}
	if err := r.hub.Get(ctx, key, db); err != nil {
		if apierrors.IsNotFound(err) {
			r.state.forget(key)
			return ctrl.Result{}, nil
		}
		return ctrl.Result{}, fmt.Errorf("reading database: %w", err)
	}

	if r.opts.protected(db.Namespace) {
		if !db.DeletionTimestamp.IsZero() {
			return ctrl.Result{}, r.dropFinalizer(ctx, db)
		}
		msg := fmt.Sprintf("namespace %q is protected: fleetdb does not manage Databases in it; create the Database in an application namespace", db.Namespace)
		if err := r.writeStatus(ctx, db, stalledStatus(db, fleetv1alpha1.ReasonProtectedNamespace, msg)); err != nil {
			return ctrl.Result{}, err
		}
		return ctrl.Result{}, reconcile.TerminalError(errors.New(msg))
	}

	if !db.DeletionTimestamp.IsZero() {
		if r.state.finalized(db.UID) {
			// This reconcile released it a moment ago; the cache has not seen it go.
			return ctrl.Result{}, nil
		}
		return r.reconcileDelete(ctx, db)
	}

	// The finalizer goes on before anything reaches a member. The hub
	// credentials Secret is written at the same time (it is owned by the
	// Database and collected with it), to keep a new Database's first
	// fan-out one hub round trip away.
	creds, err := r.finalizerAndCredentials(ctx, db)
	if err != nil {
		var foreign errForeignCredentials
		var lost errLostCredentials
		if errors.As(err, &foreign) || errors.As(err, &lost) {
			if werr := r.writeStatus(ctx, db, stalledStatus(db, fleetv1alpha1.ReasonInvalidSpec, err.Error())); werr != nil {
				return ctrl.Result{}, werr
			}
			return ctrl.Result{}, reconcile.TerminalError(err)
		}
		return ctrl.Result{}, err
	}

	var members fleetv1alpha1.MemberClusterList
	if err := r.hub.List(ctx, &members); err != nil {
		return ctrl.Result{}, fmt.Errorf("listing member clusters: %w", err)
	}
	results := r.state.resultsFor(key)
	placed, err := resolvePlacement(db, members.Items, currentMembers(db))
	if err != nil {
		msg := err.Error()
		if werr := r.writeStatus(ctx, db, stalledStatus(db, fleetv1alpha1.ReasonInvalidSpec, msg)); werr != nil {
			return ctrl.Result{}, werr
		}
		return ctrl.Result{}, reconcile.TerminalError(err)
	}

	// Members in the status (or with results) that are no longer placed are torn down.
	targets := setOf(placed.Targets)
	teardown := map[string]bool{}
	for _, c := range db.Status.Clusters {
		if !targets[c.Name] {
			teardown[c.Name] = true
		}
	}
	for name, res := range results {
		if !targets[name] && !res.TornDown {
			teardown[name] = true
		}
	}
	// A dropped member whose teardown is done, or that stayed unreachable past
	// the timeout, leaves the status (leftovers are collected on reconnect).
	var requeue time.Duration
	for name := range teardown {
		done, wait := r.teardownSettled(ctx, db, name, results[name])
		if done {
			delete(teardown, name)
			r.state.dropResult(key, name)
			delete(results, name)
			continue
		}
		requeue = minPositive(requeue, wait)
	}

	var prevAllowed map[string]bool
	if prev := r.state.plan(key); prev != nil && prev.uid == db.UID && prev.generation == db.Generation {
		prevAllowed = prev.allowed
	}
	allowed := planRollout(db, placed.Targets, results, prevAllowed, r.reachable)
	creds, rotation, err := r.reconcileRotation(ctx, db, creds, placed.Targets, results)
	if err != nil {
		return ctrl.Result{}, err
	}
	p := &plan{
		uid:         db.UID,
		generation:  db.Generation,
		policy:      db.Spec.DeletionPolicy,
		allowed:     allowed,
		targets:     targets,
		teardown:    teardown,
		credentials: creds,
	}
	r.fanOut(ctx, key, p)

	st := computeStatus(statusInput{
		db:          db,
		placement:   placed,
		teardown:    sortedKeys(teardown),
		allowed:     allowed,
		results:     results,
		unreachable: r.unreachable,
		now:         r.now(),
	})
	rotation.apply(&st)
	r.memberEvents(db, st)
	if err := r.writeStatus(ctx, db, st); err != nil {
		return ctrl.Result{}, err
	}
	return ctrl.Result{RequeueAfter: requeue}, nil
}

// reconcileDelete tears the Database down in every member it reached, then
// drops the finalizer. A member unreachable for longer than
// spec.teardown.unreachableTimeout no longer blocks: its leftovers are
// collected when it comes back.
func (r *databaseReconciler) reconcileDelete(ctx context.Context, db *fleetv1alpha1.Database) (ctrl.Result, error) {
	key := client.ObjectKeyFromObject(db)
	if !controllerutil.ContainsFinalizer(db, fleetv1alpha1.TeardownFinalizer) {
		r.state.forget(key)
		return ctrl.Result{}, nil
	}
	results := r.state.resultsFor(key)
	teardown := map[string]bool{}
	for _, c := range db.Status.Clusters {
		teardown[c.Name] = true
	}
	for name := range results {
		teardown[name] = true
	}
	if prev := r.state.plan(key); prev != nil {
		for name := range prev.targets {
			teardown[name] = true
		}
		for name := range prev.teardown {
			teardown[name] = true
		}
	}

	var requeue time.Duration
	pending := map[string]bool{}
	for name := range teardown {
		done, wait := r.teardownSettled(ctx, db, name, results[name])
		if !done {
			pending[name] = true
			requeue = minPositive(requeue, wait)
		}
	}
	if len(pending) == 0 {
		if err := r.dropFinalizer(ctx, db); err != nil {
			return ctrl.Result{}, err
		}
		r.state.forget(key)
		r.state.markFinalized(db.UID)
		return ctrl.Result{}, nil
	}

	r.fanOut(ctx, key, &plan{uid: db.UID, generation: db.Generation, policy: db.Spec.DeletionPolicy, teardown: pending})
	st := computeStatus(statusInput{
		db:          db,
		teardown:    sortedKeys(pending),
		results:     results,
		unreachable: r.unreachable,
		now:         r.now(),
	})
	if err := r.writeStatus(ctx, db, st); err != nil {
		return ctrl.Result{}, err
	}
	return ctrl.Result{RequeueAfter: requeue}, nil
}

// finalizerAndCredentials adds the teardown finalizer if it is missing and
// ensures the hub credentials Secret, both at once; it returns the credentials.
func (r *databaseReconciler) finalizerAndCredentials(ctx context.Context, db *fleetv1alpha1.Database) (map[string][]byte, error) {
	ensure := func(db *fleetv1alpha1.Database) (map[string][]byte, error) {
		return ensureCredentials(ctx, r.hub, r.live, db, func() map[string][]byte { return r.credentialsFromMembers(ctx, db) })
	}
	if controllerutil.ContainsFinalizer(db, fleetv1alpha1.TeardownFinalizer) {
		return ensure(db)
	}
	var (
		creds   map[string][]byte
		credErr error
		wg      sync.WaitGroup
	)
	snapshot := db.DeepCopy() // the finalizer patch rewrites db meanwhile
	wg.Go(func() { creds, credErr = ensure(snapshot) })
	finErr := r.addFinalizer(ctx, db)
	wg.Wait()
	if finErr != nil {
		return nil, fmt.Errorf("adding finalizer: %w", finErr)
	}
	return creds, credErr
}

// addFinalizer adds the teardown finalizer with an optimistic-lock patch (the
// list is replaced as a whole, so it must be the current one). A conflict
// usually means the cache has not seen an earlier reconcile's writes yet: the
// Database is read live, and patched again only if it still lacks the finalizer.
func (r *databaseReconciler) addFinalizer(ctx context.Context, db *fleetv1alpha1.Database) error {
	for attempt := 0; ; attempt++ {
		patch := client.MergeFromWithOptions(db.DeepCopy(), client.MergeFromWithOptimisticLock{})
		controllerutil.AddFinalizer(db, fleetv1alpha1.TeardownFinalizer)
		err := r.hub.Patch(ctx, db, patch)
		if !apierrors.IsConflict(err) || attempt > 0 {
			return err
		}
		fresh := &fleetv1alpha1.Database{}
		if err := r.live.Get(ctx, client.ObjectKeyFromObject(db), fresh); err != nil {
			return err
		}
		*db = *fresh
		if controllerutil.ContainsFinalizer(db, fleetv1alpha1.TeardownFinalizer) {
			return nil
		}
		if !db.DeletionTimestamp.IsZero() {
			return fmt.Errorf("the Database is being deleted")
		}
	}
}

// fanOut publishes the plan and wakes the member syncs it gives new work
// to, ahead of observation work. A member whose role did not change is not
// woken: its own objects' events, its errors' retries and the registry
// (reconnects) wake it, so that status refreshes do not fan out again.
func (r *databaseReconciler) fanOut(ctx context.Context, key types.NamespacedName, p *plan) {
	prev := r.state.plan(key)
	r.publish(ctx, key, p)
	for _, name := range p.changedMembers(prev) {
		r.members.addWith(name, key, priorityChange, 0)
	}
}

// teardownSettled says whether a member no longer blocks the Database's
// teardown: its objects are gone, or it has been unreachable for longer than
// the timeout. wait is when to look again for an unreachable member.
func (r *databaseReconciler) teardownSettled(ctx context.Context, db *fleetv1alpha1.Database, name string, res *memberResult) (done bool, wait time.Duration) {
	if res != nil && res.TornDown {
		return true, 0
	}
	h := r.provider.Health(name)
	if !h.Engaged && !r.registered(ctx, name) {
		// The member left the registry: there is nothing left to reach.
		return true, 0
	}
	down, _ := r.unreachable(name)
	if !down {
		return false, 0
	}
	start := h.Since
	if !db.DeletionTimestamp.IsZero() && db.DeletionTimestamp.After(start) {
		start = db.DeletionTimestamp.Time
	}
	timeout := db.EffectiveUnreachableTimeout()
	if left := timeout - r.now().Sub(start); left > 0 {
		return false, left
	}
	r.recorder.Eventf(db, nil, corev1.EventTypeWarning, "TeardownSkipped", "Teardown",
		"member %s unreachable for longer than %s: no longer blocking; its leftovers are removed when it reconnects", name, timeout)
	return true, 0
}

// credentialsFromMembers reads the credentials a member holds for the
// Database (the same in every member), for a hub Secret that was lost.
func (r *databaseReconciler) credentialsFromMembers(ctx context.Context, db *fleetv1alpha1.Database) map[string][]byte {
	for _, c := range db.Status.Clusters {
		cl, err := r.provider.Get(ctx, multicluster.ClusterName(c.Name))
		if err != nil {
			continue
		}
		var s corev1.Secret
		if err := cl.GetClient().Get(ctx, client.ObjectKey{Namespace: db.Namespace, Name: credentialsName(db)}, &s); err != nil {
			continue
		}
		l := s.Labels
		if l[fleetv1alpha1.LabelDatabaseNamespace] != db.Namespace || l[fleetv1alpha1.LabelDatabaseName] != db.Name ||
			len(s.Data["username"]) == 0 || len(s.Data["password"]) == 0 {
			continue
		}
		r.recorder.Eventf(db, nil, corev1.EventTypeWarning, "CredentialsRecovered", "Credentials",
			"the hub credentials Secret was missing; restored it from member %s", c.Name)
		return recoverableCredentials(s.Data)
	}
	return nil
}

// memberEvents records an Event for every member-level transition worth a
// human's eye: a member turning unreachable, conflicted or failed, and back.
func (r *databaseReconciler) memberEvents(db *fleetv1alpha1.Database, next fleetv1alpha1.DatabaseStatus) {
	prev := map[string]fleetv1alpha1.ClusterPhase{}
	for _, c := range db.Status.Clusters {
		prev[c.Name] = c.Phase
	}
	bad := func(p fleetv1alpha1.ClusterPhase) bool {
		return p == fleetv1alpha1.ClusterPhaseUnreachable || p == fleetv1alpha1.ClusterPhaseConflict || p == fleetv1alpha1.ClusterPhaseDegraded
	}
	for _, c := range next.Clusters {
		was, ok := prev[c.Name]
		switch {
		case !ok || was == c.Phase:
		case bad(c.Phase):
			r.recorder.Eventf(db, nil, corev1.EventTypeWarning, "Member"+string(c.Phase), "Sync", "member %s: %s", c.Name, c.Message)
		case bad(was) && c.Phase == fleetv1alpha1.ClusterPhaseReady:
			r.recorder.Eventf(db, nil, corev1.EventTypeNormal, "MemberRecovered", "Sync", "member %s is %s again (was %s)", c.Name, c.Phase, was)
		}
	}
}

func (r *databaseReconciler) registered(ctx context.Context, name string) bool {
	var mc fleetv1alpha1.MemberCluster
	return r.hub.Get(ctx, client.ObjectKey{Name: name}, &mc) == nil
}

// unreachable reports a member the registry cannot reach now.
func (r *databaseReconciler) unreachable(name string) (bool, string) {
	h := r.provider.Health(name)
	if h.Ready {
		return false, ""
	}
	why := h.Message
	if why == "" {
		why = h.Reason
	}
	if why == "" {
		why = "not connected"
	}
	return true, why
}

func (r *databaseReconciler) reachable(name string) bool {
	down, _ := r.unreachable(name)
	return !down
}

func (r *databaseReconciler) dropFinalizer(ctx context.Context, db *fleetv1alpha1.Database) error {
	if !controllerutil.ContainsFinalizer(db, fleetv1alpha1.TeardownFinalizer) {
		return nil
	}
	// A JSON patch that tests the entry it removes: status writes in flight
	// (which change the resourceVersion) cannot make it fail, and another
	// controller's finalizer added meanwhile is kept, or moves the entry and
	// fails the test (then the reconcile retries).
	i := slices.Index(db.Finalizers, fleetv1alpha1.TeardownFinalizer)
	path := fmt.Sprintf("/metadata/finalizers/%d", i)
	body, err := json.Marshal([]map[string]any{
		{"op": "test", "path": path, "value": fleetv1alpha1.TeardownFinalizer},
		{"op": "remove", "path": path},
	})
	if err != nil {
		return err
	}
	if err := r.hub.Patch(ctx, db, client.RawPatch(types.JSONPatchType, body)); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("removing finalizer: %w", err)
	}
	return nil
}

// writeStatus patches the status only when it changed: a steady fleet writes nothing.
func (r *databaseReconciler) writeStatus(ctx context.Context, db *fleetv1alpha1.Database, st fleetv1alpha1.DatabaseStatus) error {
	if apiequality.Semantic.DeepEqual(db.Status, st) {
		statusComputed(ctx, db, db.Status.Phase, st, false)
		return nil
	}
	now := r.now()
	for i := range st.Clusters {
		if st.Clusters[i].LastSyncTime == nil {
			t := metav1Time(now)
			st.Clusters[i].LastSyncTime = &t
		}
	}
	prev := db.Status.Phase
	patch := client.MergeFrom(db.DeepCopy())
	db.Status = st
	if err := r.hub.Status().Patch(ctx, db, patch); err != nil {
		if apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("writing status: %w", err)
	}
	statusComputed(ctx, db, prev, st, true)
	return nil
}

// currentMembers are the members a Database is placed on now (from its status).
func currentMembers(db *fleetv1alpha1.Database) []string {
	out := make([]string, 0, len(db.Status.Clusters))
	for _, c := range db.Status.Clusters {
		if c.Phase != fleetv1alpha1.ClusterPhaseDeleting {
			out = append(out, c.Name)
		}
	}
	return out
}

func setOf(list []string) map[string]bool {
	m := make(map[string]bool, len(list))
	for _, s := range list {
		m[s] = true
	}
	return m
}

func sortedKeys(m map[string]bool) []string {
	return slices.Sorted(maps.Keys(m))
}

func minPositive(a, b time.Duration) time.Duration {
	switch {
	case a <= 0:
		return b
	case b <= 0:
		return a
	}
	return min(a, b)
}

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

// add enqueues a request for the Database key in the named cluster ("" is the hub).
func (r *queueRef) add(cluster string, key types.NamespacedName) {
	if q := r.get(); q != nil {
		q.Add(request(cluster, key))
	}
}

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
