package database

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/events"
	"k8s.io/client-go/util/workqueue"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
	"sigs.k8s.io/controller-runtime/pkg/cluster"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"
	mcbuilder "sigs.k8s.io/multicluster-runtime/pkg/builder"
	mchandler "sigs.k8s.io/multicluster-runtime/pkg/handler"
	mcmanager "sigs.k8s.io/multicluster-runtime/pkg/manager"
	mcreconcile "sigs.k8s.io/multicluster-runtime/pkg/reconcile"

	fleetv1alpha1 "github.com/fleetdb/fleetdb/apis/v1alpha1"
	"github.com/fleetdb/fleetdb/clusters"
	"github.com/fleetdb/fleetdb/hub/internal/backup"
	"github.com/fleetdb/fleetdb/hub/internal/hubsecret"
	"github.com/fleetdb/fleetdb/hub/internal/memberjob"
	"github.com/fleetdb/fleetdb/hub/internal/queue"
	"github.com/fleetdb/fleetdb/hub/internal/sharding"
	"github.com/fleetdb/fleetdb/hub/internal/sweep"
	"github.com/fleetdb/fleetdb/hub/internal/tombstones"
	"github.com/fleetdb/fleetdb/internal/telemetry"
	"github.com/fleetdb/fleetdb/member"
)

// Setup registers fleetdb's controllers with the manager: the Database
// controller, the member sync controller, the member-sweep controller and
// the DatabaseBackup controller.
// The registry reaches all three as a source of requests.
func Setup(ctx context.Context, mgr mcmanager.Manager, provider *clusters.Provider, opts Options) error {
	opts = opts.WithDefaults()
	local := mgr.GetLocalManager()
	w := &wiring{
		mgr: mgr, provider: provider, opts: opts, state: newState(), memo: member.NewMemo(),
		dbQueue: queue.NewRef(), memberQueue: queue.NewRef(), recorder: local.GetEventRecorder("fleetdb-hub"),
		tombstones: &tombstones.Store{Client: local.GetClient(), Live: local.GetAPIReader(), Namespace: opts.HubNamespace},
		jobs:       &memberjob.Ledger{Client: local.GetClient(), Live: local.GetAPIReader(), Namespace: opts.HubNamespace},
		// multicluster-runtime's builder does not take this from the manager's options.
		skipNames: local.GetControllerOptions().SkipNameValidation,
	}
	w.secrets = newSecretWatches(w.memo, w.memberQueue)
	if err := mgr.Add(w.secrets); err != nil {
		return fmt.Errorf("member Secret watches: %w", err)
	}
	w.hubSecrets = hubsecret.NewAccess(local, opts.protected)
	if err := local.Add(w.hubSecrets); err != nil {
		return fmt.Errorf("hub Secret access: %w", err)
	}
	if err := local.Add(w.hubSecrets.StaleBindings(local.GetCache(), hubReconcileTimeout)); err != nil {
		return fmt.Errorf("hub Secret access: %w", err)
	}
	if opts.Sharding {
		if err := w.setupSharding(); err != nil {
			return fmt.Errorf("sharding: %w", err)
		}
	}
	if err := w.databaseController(); err != nil {
		return fmt.Errorf("database controller: %w", err)
	}
	if err := w.memberSyncController(); err != nil {
		return fmt.Errorf("member sync controller: %w", err)
	}
	if err := w.sweepController(); err != nil {
		return fmt.Errorf("member sweep controller: %w", err)
	}
	// A sharded hub runs no backup controller: it writes to members from
	// the leader, whichever replica owns them (docs/sharding.md). Its
	// DatabaseBackups say so in their status.
	bopts := backup.Options{
		HubID: opts.HubID, ImageRepository: opts.ImageRepository, MemberCallTimeout: opts.MemberCallTimeout,
		ReconcileTimeout: hubReconcileTimeout, Recorder: w.recorder, SkipNameValidation: w.skipNames, Jobs: w.jobs,
	}
	backups := func() error { return backup.Setup(mgr, provider, bopts) }
	if opts.Sharding {
		backups = func() error { return backup.SetupSharded(mgr, bopts) }
	}
	if err := backups(); err != nil {
		return fmt.Errorf("database backup controller: %w", err)
	}
	telemetry.FleetGauges.Use(&fleetSource{hub: local.GetClient(), state: w.state, provider: provider})
	return nil
}

// wiring is what the controllers share: the state they meet in and each
// other's queues.
type wiring struct {
	mgr      mcmanager.Manager
	provider *clusters.Provider
	opts     Options
	state    *state
	memo     *member.Memo
	// secrets gives the hub Secret access in the members' managed
	// namespaces and watches fleetdb's Secrets there.
	secrets *secretWatches
	// hubSecrets gives the hub Secret access in the hub cluster's tenant
	// namespaces (where Databases live) and caches fleetdb's Secrets there.
	hubSecrets           *hubsecret.Access
	dbQueue, memberQueue *queue.Ref
	recorder             events.EventRecorder
	skipNames            *bool
	// tombstones are the hub's record of member teardowns it skipped.
	tombstones *tombstones.Store
	// jobs is the hub's record of the Jobs it creates in members.
	jobs *memberjob.Ledger
	// shard is the sharded hub's runtime; nil without --sharding.
	shard *shardRuntime
}

// databaseController: hub Database events, registry changes (MemberCluster
// objects: placement may change; health: status and teardown accounting).
func (w *wiring) databaseController() error {
	local := w.mgr.GetLocalManager()
	dbr := &databaseReconciler{
		hub: w.hubSecrets.Wrap(local.GetClient()), live: local.GetAPIReader(), provider: w.provider, state: w.state,
		opts: w.opts, recorder: w.recorder, members: w.memberQueue, now: time.Now, tracer: telemetry.Tracer(),
		tombstones: w.tombstones, shard: w.shard, secrets: w.secrets, hubSecrets: w.hubSecrets,
	}
	hubOnly := []mcbuilder.WatchesOption{mcbuilder.WithEngageWithLocalCluster(true), mcbuilder.WithEngageWithProviderClusters(false)}
	return mcbuilder.ControllerManagedBy(w.mgr).
		Named("database").
		Watches(&fleetv1alpha1.Database{}, databaseEvents(dbr.startTeardown), hubOnly...).
		Watches(&fleetv1alpha1.MemberCluster{},
			mchandler.TypedEnqueueRequestsFromMapFunc[client.Object, mcreconcile.Request](allDatabases(local.GetClient())), hubOnly...).
		Watches(&corev1.Namespace{},
			mchandler.TypedEnqueueRequestsFromMapFunc[client.Object, mcreconcile.Request](databasesIn(local.GetClient())), hubOnly...).
		WatchesRawSource(clusters.RegistrySource[mcreconcile.Request]{Provider: w.provider, Requests: w.databasesOnMember}).
		WatchesRawSource(captureQueue(w.dbQueue)).
		WithOptions(controller.TypedOptions[mcreconcile.Request]{
			MaxConcurrentReconciles: w.opts.DatabaseWorkers,
			SkipNameValidation:      w.skipNames,
			LogConstructor: telemetry.ReconcileLogs(w.mgr.GetLogger(), "database", func(req *mcreconcile.Request) []any {
				return []any{"database", req.NamespacedName.String()}
			}),
			// Every hub API call of a reconcile is bounded.
			ReconciliationTimeout: hubReconcileTimeout,
		}).
		Complete(dbr)
}

// memberSyncController: member object events, registry changes (a member
// that changed is synced again) and the Database controller's fan-out.
func (w *wiring) memberSyncController() error {
	local := w.mgr.GetLocalManager()
	msr := &memberSyncReconciler{
		mgr: w.mgr, hub: w.hubSecrets.Wrap(local.GetClient()), hubLive: local.GetAPIReader(), provider: w.provider, state: w.state, memo: w.memo,
		opts: w.opts, recorder: w.recorder, databases: w.dbQueue, tracer: telemetry.Tracer(),
		limiter: queue.NewMemberLimiter(max(2, w.opts.MemberWorkers/4)), self: w.memberQueue,
		watches: newBackendWatches(w.memberQueue), secrets: w.secrets, shard: w.shard, jobs: w.jobs,
		refused: newRefusals(), tombstones: w.tombstones,
	}
	// Beyond its first sync, a member starts another only while fewer than
	// half the workers are busy: slow members cannot starve the others.
	msr.limiter.Budget = max(1, w.opts.MemberWorkers/2)
	mgr := w.mgr
	if w.shard != nil {
		// Sharded, every replica syncs the members it owns.
		mgr = sharding.EveryReplica{Manager: w.mgr}
	}
	b := mcbuilder.ControllerManagedBy(mgr).Named("member-sync")
	memberOnly := []mcbuilder.WatchesOption{mcbuilder.WithEngageWithLocalCluster(false), mcbuilder.WithEngageWithProviderClusters(true)}
	for _, obj := range memberKinds() {
		gvk, err := apiutil.GVKForObject(obj, local.GetScheme())
		if err != nil {
			return err
		}
		b = b.Watches(obj, msr.memberObjectEvents(gvk, false), memberOnly...)
	}
	b = b.Watches(&corev1.PersistentVolumeClaim{}, msr.memberObjectEvents(corev1.SchemeGroupVersion.WithKind("PersistentVolumeClaim"), true), memberOnly...)
	// A change of a member's MemberCluster (what the hub can see of it)
	// retries at once the syncs that member refused (issue 42, item 7).
	// Its status (the probe's reports) is not such a change.
	b = b.Watches(&fleetv1alpha1.MemberCluster{}, mchandler.TypedEnqueueRequestsFromMapFunc[client.Object, mcreconcile.Request](msr.refusedOnMember),
		mcbuilder.WithEngageWithLocalCluster(true), mcbuilder.WithEngageWithProviderClusters(false),
		mcbuilder.WithPredicates(predicate.Or(predicate.GenerationChangedPredicate{}, predicate.LabelChangedPredicate{}, predicate.AnnotationChangedPredicate{})))
	return b.WatchesRawSource(clusters.RegistrySource[mcreconcile.Request]{Provider: w.provider, Requests: w.syncsOnMember}).
		WatchesRawSource(captureQueue(w.memberQueue)).
		WithOptions(controller.TypedOptions[mcreconcile.Request]{
			MaxConcurrentReconciles: w.opts.MemberWorkers,
			ReconciliationTimeout:   w.opts.MemberCallTimeout,
			SkipNameValidation:      w.skipNames,
			LogConstructor: telemetry.ReconcileLogs(w.mgr.GetLogger(), "member-sync", func(req *mcreconcile.Request) []any {
				return []any{"cluster", string(req.ClusterName), "database", req.NamespacedName.String()}
			}),
		}).
		Complete(msr)
}

// sweepController: a member that turns Ready is swept for leftovers of
// Databases that are gone or no longer placed there.
func (w *wiring) sweepController() error {
	local := w.mgr.GetLocalManager()
	sw := sweep.New(w.mgr, local.GetClient(), w.state, w.provider, w.memo, w.opts.MemberCallTimeout)
	sw.HubID, sw.Tombstones = w.opts.HubID, w.tombstones
	sw.SecretAccess = func(ctx context.Context, name string, cl cluster.Cluster, ns string) (bool, error) {
		return w.secrets.ensure(ctx, name, cl, ns, nil)
	}
	// The sweep's teardowns remove the hub's own rotation Jobs as the
	// member sync's do (member.Teardown touches no Job).
	jobs := &memberSyncReconciler{opts: w.opts, jobs: w.jobs}
	sw.RemoveJobs = jobs.teardownRotationJobs
	if w.shard != nil {
		sw.Owns = w.shard.coord.Owns
	}
	return ctrl.NewControllerManagedBy(local).
		Named("member-sweep").
		WatchesRawSource(clusters.RegistrySource[reconcile.Request]{Provider: w.provider, Requests: sw.Requests}).
		WithOptions(controller.Options{
			MaxConcurrentReconciles: sweep.Workers, SkipNameValidation: w.skipNames,
			LogConstructor: telemetry.ReconcileLogs(local.GetLogger(), "member-sweep", func(req *reconcile.Request) []any {
				return []any{"namespace", req.Namespace, "name", req.Name}
			}),
		}).
		Complete(telemetry.TracedReconciler[reconcile.Request]{Inner: sw, Tracer: telemetry.Tracer(), Span: telemetry.SpanSweep})
}

// databasesOnMember maps a registry change of a member to the Databases
// planned on it: their status and teardown accounting may change.
func (w *wiring) databasesOnMember(name string, _ clusters.Health) []mcreconcile.Request {
	var out []mcreconcile.Request
	for _, key := range w.state.databasesOn(name) {
		out = append(out, queue.Request("", key))
	}
	return out
}

// syncsOnMember maps a registry change of a member to a sync of every
// Database planned on it.
func (w *wiring) syncsOnMember(name string, _ clusters.Health) []mcreconcile.Request {
	var out []mcreconcile.Request
	for _, key := range w.state.databasesOn(name) {
		out = append(out, queue.Request(name, key))
	}
	if w.shard != nil {
		for _, key := range w.shard.databasesOn(name) {
			out = append(out, queue.Request(name, key))
		}
	}
	return out
}

// captureQueue is a source that only hands the controller's queue to ref, so
// the other controller can enqueue requests into it in memory.
func captureQueue(ref *queue.Ref) source.TypedSource[mcreconcile.Request] {
	return source.TypedFunc[mcreconcile.Request](func(_ context.Context, q workqueue.TypedRateLimitingInterface[mcreconcile.Request]) error {
		ref.Set(q)
		return nil
	})
}
