package database

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	toolscache "k8s.io/client-go/tools/cache"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/cluster"
	"sigs.k8s.io/multicluster-runtime/pkg/multicluster"

	fleetv1alpha1 "github.com/fleetdb/fleetdb/apis/v1alpha1"
	"github.com/fleetdb/fleetdb/hub/internal/dbstatus"
	"github.com/fleetdb/fleetdb/hub/internal/queue"
	"github.com/fleetdb/fleetdb/internal/placement"
	"github.com/fleetdb/fleetdb/internal/statusmsg"
	"github.com/fleetdb/fleetdb/member"
)

// backendChanged says why a Database's spec.backend cannot be acted on: it
// names another backend than the one its members run (set on a Database that
// ran on the StatefulSet backend before backends existed). fleetdb does not
// move data between backends; "" when there is nothing to say.
func backendChanged(db *fleetv1alpha1.Database) string {
	if db.Spec.Backend == "" || db.Spec.Backend == db.EffectiveBackend() {
		return ""
	}
	return fmt.Sprintf("spec.backend is %s but the members run this Database on the %s backend (recorded at its first placement); "+
		"fleetdb does not move data between backends: set spec.backend to %s, or create a new Database",
		db.Spec.Backend, db.EffectiveBackend(), db.EffectiveBackend())
}

// backendAnnotationChanged says why a Database's fleetdb.io/backend
// annotation is not followed: it was changed after the first placement to
// another backend than the one its members run (status.clusters). The
// record is immutable: the hub keeps running the members' backend
// (Database.KnownBackend) and never starts the other one, which would be an
// empty database behind the client Service; "" when there is nothing to say.
func backendAnnotationChanged(db *fleetv1alpha1.Database) string {
	changed := db.BackendAnnotationChanged()
	if changed == "" {
		return ""
	}
	running := db.EffectiveBackend()
	return fmt.Sprintf("the %s annotation was changed to %s but the members run this Database on the %s backend (recorded at its first placement); "+
		"the recorded backend cannot be changed and fleetdb keeps running %s: set the annotation back to %s (or remove it), "+
		"or create a new Database to use %s",
		fleetv1alpha1.AnnotationBackend, changed, running, running, running, changed)
}

// recordBackend records the backend of a Database that is being placed for
// the first time in its fleetdb.io/backend annotation (before the finalizer
// goes on; see Database.EffectiveBackend).
func recordBackend(db *fleetv1alpha1.Database) {
	if db.Annotations[fleetv1alpha1.AnnotationBackend] != "" {
		return
	}
	if db.Annotations == nil {
		db.Annotations = map[string]string{}
	}
	db.Annotations[fleetv1alpha1.AnnotationBackend] = string(db.EffectiveBackend())
}

// backendWaitRetry is how soon a Database whose backend is unknown reads its
// members again (a member coming back also wakes it).
const backendWaitRetry = 10 * time.Second

// settleBackend makes sure that the hub knows which backend the members run
// a placed Database on before anything reaches a member. When the Database
// no longer tells (Database.KnownBackend: its fleetdb.io/backend annotation
// was removed and its status names none), the hub reads the workload objects
// in the members and records the backend they run in the annotation. While
// no member that may run it can be read, none runs it, or they disagree, the
// Database waits with reason BackendUnknown and nothing is written to any
// member (the member syncs wait too, see memberSyncReconciler.sync): a guess
// could start an empty database on another backend behind the client Service.
func (r *databaseReconciler) settleBackend(ctx context.Context, s *databaseScope) (ctrl.Result, error) {
	if _, ok := s.db.KnownBackend(); ok {
		return ctrl.Result{}, nil
	}
	backend, why, err := r.backendFromMembers(ctx, s.db)
	if err != nil {
		return ctrl.Result{}, err
	}
	if backend == "" {
		st := dbstatus.Waiting(s.db, fleetv1alpha1.ReasonBackendUnknown, why)
		s.status = &st
		return ctrl.Result{RequeueAfter: backendWaitRetry}, errStopPhases
	}
	patch := client.MergeFromWithOptions(s.db.DeepCopy(), client.MergeFromWithOptimisticLock{})
	if s.db.Annotations == nil {
		s.db.Annotations = map[string]string{}
	}
	s.db.Annotations[fleetv1alpha1.AnnotationBackend] = string(backend)
	if err := r.hub.Patch(ctx, s.db, patch); err != nil {
		return ctrl.Result{}, fmt.Errorf("recording the backend the members run: %w", err)
	}
	r.recorder.Eventf(s.db, nil, corev1.EventTypeNormal, "BackendRecorded", "Backend",
		"the %s annotation was missing; the members run the %s backend: recorded it", fleetv1alpha1.AnnotationBackend, backend)
	// The member syncs skipped this Database while its backend was unknown
	// (a member that came back meanwhile was not looked at): wake them.
	names, err := r.membersMayRun(ctx, s.db)
	if err != nil {
		return ctrl.Result{}, err
	}
	for _, name := range names {
		r.members.AddWith(name, s.key, queue.PriorityChange, 0)
	}
	return ctrl.Result{}, nil
}

// backendFromMembers reads which backend the members run db on: the one
// backend found, or "" and why not (to show in the status).
func (r *databaseReconciler) backendFromMembers(ctx context.Context, db *fleetv1alpha1.Database) (fleetv1alpha1.Backend, string, error) {
	names, err := r.membersMayRun(ctx, db)
	if err != nil {
		return "", "", err
	}
	owner := member.Owner{Namespace: db.Namespace, Name: db.Name, UID: db.UID, HubID: r.opts.HubID}
	found := map[fleetv1alpha1.Backend][]string{}
	var unreadable []string
	for _, name := range names {
		backends, ok := r.memberBackends(ctx, name, owner)
		if !ok {
			unreadable = append(unreadable, name)
			continue
		}
		for _, b := range backends {
			found[b] = append(found[b], name)
		}
	}
	const what = "the " + fleetv1alpha1.AnnotationBackend + " annotation is gone and the status names no backend, so the hub reads what the members run " +
		"and writes to no member until it knows (another backend would start an empty database); to go on at once, set the annotation to the backend the members run (CloudNativePG or StatefulSet)"
	switch {
	case len(found) == 1:
		for b := range found {
			return b, "", nil
		}
	case len(found) > 1:
		var on []string
		for b, members := range found {
			on = append(on, fmt.Sprintf("%s in %s", b, strings.Join(members, ", ")))
		}
		sort.Strings(on)
		return "", fmt.Sprintf("the members run this Database on different backends (%s): %s", strings.Join(on, "; "), what), nil
	case len(unreadable) > 0:
		return "", fmt.Sprintf("waiting for member(s) %s to be readable: %s", strings.Join(unreadable, ", "), what), nil
	}
	return "", fmt.Sprintf("no member runs this Database (read: %s): %s", strings.Join(names, ", "), what), nil
}

// membersMayRun are the registered members a Database may run on: those in
// its status and those its placement resolves to.
func (r *databaseReconciler) membersMayRun(ctx context.Context, db *fleetv1alpha1.Database) ([]string, error) {
	var members fleetv1alpha1.MemberClusterList
	if err := r.hub.List(ctx, &members); err != nil {
		return nil, fmt.Errorf("listing member clusters: %w", err)
	}
	maybe := map[string]bool{}
	for _, c := range db.Status.Clusters {
		maybe[c.Name] = true
	}
	if placed, err := placement.Resolve(db, members.Items, placement.CurrentMembers(db)); err == nil {
		for _, name := range placed.Targets {
			maybe[name] = true
		}
	}
	var out []string
	for i := range members.Items {
		if maybe[members.Items[i].Name] {
			out = append(out, members.Items[i].Name)
		}
	}
	sort.Strings(out)
	return out, nil
}

// memberBackends reads the backends the Owner's Database runs on in one
// member (live, within the member call timeout); ok is false when the member
// cannot be read now.
func (r *databaseReconciler) memberBackends(ctx context.Context, name string, o member.Owner) ([]fleetv1alpha1.Backend, bool) {
	cl, ok := r.readableMember(ctx, name)
	if !ok {
		return nil, false
	}
	cctx, cancel := context.WithTimeout(ctx, r.opts.MemberCallTimeout)
	defer cancel()
	backends, err := member.RunningBackends(cctx, cl.GetAPIReader(), o)
	if err != nil {
		ctrl.LoggerFrom(ctx).V(1).Info("reading the backend a member runs", "member", name, "error", statusmsg.Bound(err.Error()))
		return nil, false
	}
	return backends, true
}

// readableMember is the member's cluster when the registry reports it
// engaged and ready; ok is false when it cannot be read now.
func (r *databaseReconciler) readableMember(ctx context.Context, name string) (cl cluster.Cluster, ok bool) {
	if h := r.provider.Health(name); !h.Engaged || !h.Ready {
		return nil, false
	}
	cl, err := r.provider.Get(ctx, multicluster.ClusterName(name))
	return cl, err == nil
}

// backendMissingStatus is a member's status when it does not offer the
// Database's backend.
func backendMissingStatus(cluster string, backend fleetv1alpha1.Backend) fleetv1alpha1.ClusterStatus {
	return fleetv1alpha1.ClusterStatus{
		Name:    cluster,
		Phase:   fleetv1alpha1.ClusterPhaseDegraded,
		Backend: backend,
		Reason:  fleetv1alpha1.ReasonBackendMissing,
		Message: statusmsg.Bound((&member.BackendMissingError{Backend: backend}).Error()),
	}
}

// backendWatches watches the CloudNativePG Clusters of each member that
// offers them, so that CloudNativePG's status reports and drift wake the
// member sync like the StatefulSet's events do. The watch is started on
// first use, not with the member: a member without CloudNativePG's CRDs
// could not sync a static watch of the kind, and would never engage.
type backendWatches struct {
	mu sync.Mutex
	// clusters holds, per member, the cluster whose cache has the watch (a
	// reconnect makes a new cluster, which needs its own).
	clusters map[string]cluster.Cluster
	queue    *queue.Ref
}

func newBackendWatches(queue *queue.Ref) *backendWatches {
	return &backendWatches{clusters: map[string]cluster.Cluster{}, queue: queue}
}

// ensure starts the Cluster watch in the member's cache once. It fails with
// a no-match error when the member serves no Cluster API.
func (w *backendWatches) ensure(ctx context.Context, name string, cl cluster.Cluster) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.clusters[name] == cl {
		return nil
	}
	inf, err := cl.GetCache().GetInformer(ctx, member.NewCNPGCluster())
	if err != nil {
		return err
	}
	enqueue := func(obj any) {
		if t, ok := obj.(toolscache.DeletedFinalStateUnknown); ok {
			obj = t.Obj
		}
		o, ok := obj.(client.Object)
		if !ok {
			return
		}
		for _, req := range databaseOfMemberObject(ctx, o) {
			w.queue.AddWith(name, req.NamespacedName, 0, 0)
		}
	}
	if _, err := inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc:    enqueue,
		UpdateFunc: func(_, obj any) { enqueue(obj) },
		DeleteFunc: enqueue,
	}); err != nil {
		return err
	}
	w.clusters[name] = cl
	return nil
}

// backendReady makes sure that the member can run db's backend; for
// CloudNativePG it starts the member's Cluster watch. It returns a
// *member.BackendMissingError when the member does not offer it.
func (r *memberSyncReconciler) backendReady(ctx context.Context, cluster string, cl cluster.Cluster, db *fleetv1alpha1.Database) error {
	backend := db.EffectiveBackend()
	if backend != fleetv1alpha1.BackendCloudNativePG {
		return nil
	}
	if offered, known := r.provider.Offers(cluster, backend); known && !offered {
		return &member.BackendMissingError{Backend: backend}
	}
	if err := r.watches.ensure(ctx, cluster, cl); err != nil {
		if member.IsBackendMissing(err) {
			return &member.BackendMissingError{Backend: backend}
		}
		return fmt.Errorf("watching CloudNativePG Clusters: %w", err)
	}
	return nil
}
