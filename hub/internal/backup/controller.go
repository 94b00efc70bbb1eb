package backup

import (
	"context"
	"fmt"
	"sync"
	"time"

	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/client-go/tools/events"
	"k8s.io/client-go/util/workqueue"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	mcbuilder "sigs.k8s.io/multicluster-runtime/pkg/builder"
	mchandler "sigs.k8s.io/multicluster-runtime/pkg/handler"
	mcmanager "sigs.k8s.io/multicluster-runtime/pkg/manager"
	mcreconcile "sigs.k8s.io/multicluster-runtime/pkg/reconcile"

	fleetv1alpha1 "github.com/fleetdb/fleetdb/apis/v1alpha1"
	"github.com/fleetdb/fleetdb/clusters"
	"github.com/fleetdb/fleetdb/hub/internal/memberjob"
	"github.com/fleetdb/fleetdb/hub/internal/queue"
	"github.com/fleetdb/fleetdb/internal/placement"
	"github.com/fleetdb/fleetdb/internal/telemetry"
)

// +kubebuilder:rbac:groups=fleetdb.io,resources=databasebackups,verbs=get;list;watch;update;patch
// +kubebuilder:rbac:groups=fleetdb.io,resources=databasebackups/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=fleetdb.io,resources=databasebackups/finalizers,verbs=update

const (
	// backupWorkers is the DatabaseBackup controller's concurrency: backups
	// are rare, and each reconcile handles its members in parallel, every
	// member call bounded by Options.MemberCallTimeout.
	backupWorkers = 4
	// backupJobPoll is how often a running backup or cleanup Job is read
	// (Jobs are read live, never watched: see rotationJobPoll).
	backupJobPoll = 5 * time.Second
	// backupWaitPoll is how often a member whose Database is not Ready yet
	// is looked at again.
	backupWaitPoll = 30 * time.Second
	// Backoff of a member that could not be reached or refused a call.
	backupRetryBase = 5 * time.Second
	backupRetryMax  = 5 * time.Minute
)

// backupReconciler is the hub's DatabaseBackup controller: the finalizer,
// one backup Job per member, the per-member records and, on deletion, a
// cleanup Job per member. It reaches members through the manager's clusters
// (the registry's clients), reads Jobs live and only while they matter, and
// never writes a DatabaseBackup that finished.
type backupReconciler struct {
	hub      client.Client
	mgr      mcmanager.Manager
	provider *clusters.Provider
	opts     Options
	recorder events.EventRecorder
	now      func() time.Time
	// retry backs off per DatabaseBackup and member ("uid/member").
	retry workqueue.TypedRateLimiter[string]
	// cleaned are the members whose cleanup finished, per DatabaseBackup
	// UID. In memory only: a cleanup run again after a restart removes
	// nothing more.
	mu      sync.Mutex
	cleaned map[types.UID]map[string]bool
}

// Options configure the DatabaseBackup controllers; the hub's wiring fills
// them from its own.
type Options struct {
	// HubID is the hub identity stamped on (and required of) every member Job.
	HubID string
	// ImageRepository overrides the engines' image repository.
	ImageRepository string
	// MemberCallTimeout bounds one member's step.
	MemberCallTimeout time.Duration
	// ReconcileTimeout bounds one reconcile (hub calls).
	ReconcileTimeout time.Duration
	// Recorder records the Events of DatabaseBackups.
	Recorder events.EventRecorder
	// Jobs is the hub's record of the Jobs it creates in members: the
	// backup and cleanup Jobs it trusts after a spec change, and the only
	// ones it deletes (nil in unit tests: none kept).
	Jobs *memberjob.Ledger
	// SkipNameValidation is the manager's controller option (multicluster-runtime's builder does not take it from the manager).
	SkipNameValidation *bool
}

// Setup registers the DatabaseBackup controller: DatabaseBackup
// events, the Database a DatabaseBackup names, and registry changes (a
// member coming back resumes its backups at once).
func Setup(mgr mcmanager.Manager, provider *clusters.Provider, opts Options) error {
	local := mgr.GetLocalManager()
	br := &backupReconciler{
		hub: local.GetClient(), mgr: mgr, provider: provider, opts: opts, recorder: opts.Recorder, now: time.Now,
		retry:   workqueue.NewTypedItemExponentialFailureRateLimiter[string](backupRetryBase, backupRetryMax),
		cleaned: map[types.UID]map[string]bool{},
	}
	hubOnly := []mcbuilder.WatchesOption{mcbuilder.WithEngageWithLocalCluster(true), mcbuilder.WithEngageWithProviderClusters(false)}
	return mcbuilder.ControllerManagedBy(mgr).
		Named("databasebackup").
		Watches(&fleetv1alpha1.DatabaseBackup{}, mchandler.TypedEnqueueRequestForObject[client.Object](), hubOnly...).
		Watches(&fleetv1alpha1.Database{},
			mchandler.TypedEnqueueRequestsFromMapFunc[client.Object, mcreconcile.Request](backupsOfDatabase(local.GetClient())), hubOnly...).
		WatchesRawSource(clusters.RegistrySource[mcreconcile.Request]{Provider: provider, Requests: br.backupsOnMember}).
		WithOptions(controller.TypedOptions[mcreconcile.Request]{
			MaxConcurrentReconciles: backupWorkers,
			SkipNameValidation:      opts.SkipNameValidation,
			ReconciliationTimeout:   opts.ReconcileTimeout,
			LogConstructor: telemetry.ReconcileLogs(mgr.GetLogger(), "databasebackup", func(req *mcreconcile.Request) []any {
				return []any{"databaseBackup", req.NamespacedName.String()}
			}),
		}).
		Complete(telemetry.TracedReconciler[mcreconcile.Request]{Inner: br, Tracer: telemetry.Tracer(), Span: telemetry.SpanBackupReconcile})
}

// backupsOfDatabase maps a Database event to the unfinished (or deleting)
// DatabaseBackups that name it.
func backupsOfDatabase(c client.Client) func(context.Context, client.Object) []mcreconcile.Request {
	return func(ctx context.Context, obj client.Object) []mcreconcile.Request {
		var list fleetv1alpha1.DatabaseBackupList
		if err := c.List(ctx, &list, client.InNamespace(obj.GetNamespace())); err != nil {
			ctrl.LoggerFrom(ctx).Error(err, "listing database backups")
			return nil
		}
		var out []mcreconcile.Request
		for i := range list.Items {
			b := &list.Items[i]
			if b.Spec.DatabaseName == obj.GetName() && (!b.Finished() || !b.DeletionTimestamp.IsZero()) {
				out = append(out, queue.Request("", client.ObjectKeyFromObject(b)))
			}
		}
		return out
	}
}

// backupsOnMember maps a registry change of a member to the DatabaseBackups
// that still have work there.
func (r *backupReconciler) backupsOnMember(name string, _ clusters.Health) []mcreconcile.Request {
	ctx, cancel := context.WithTimeout(context.Background(), r.opts.ReconcileTimeout)
	defer cancel()
	var list fleetv1alpha1.DatabaseBackupList
	if err := r.hub.List(ctx, &list); err != nil {
		return nil
	}
	var out []mcreconcile.Request
	for i := range list.Items {
		b := &list.Items[i]
		if (b.Finished() && b.DeletionTimestamp.IsZero()) || b.Record(name) == nil {
			continue
		}
		out = append(out, queue.Request("", client.ObjectKeyFromObject(b)))
	}
	return out
}

// Reconcile is the envelope: read, finalizer, act per member, write the
// status once when it changed.
func (r *backupReconciler) Reconcile(ctx context.Context, req mcreconcile.Request) (ctrl.Result, error) {
	if req.ClusterName != "" {
		return ctrl.Result{}, nil
	}
	b := &fleetv1alpha1.DatabaseBackup{}
	if err := r.hub.Get(ctx, req.NamespacedName, b); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if !b.DeletionTimestamp.IsZero() {
		return r.reconcileBackupDelete(ctx, b)
	}
	if b.Finished() {
		return ctrl.Result{}, nil // a finished backup is never acted on again
	}
	if controllerutil.AddFinalizer(b, fleetv1alpha1.BackupFinalizer) {
		// The update's event brings the next pass; no Job exists before the finalizer.
		return ctrl.Result{}, r.hub.Update(ctx, b)
	}
	st := *b.Status.DeepCopy()
	res, err := r.runBackup(ctx, b, &st)
	if werr := r.writeBackupStatus(ctx, b, st); werr != nil {
		return ctrl.Result{}, werr
	}
	return res, err
}

// runBackup resolves the Database and the members, runs each member's step
// in parallel and folds the records into st.
func (r *backupReconciler) runBackup(ctx context.Context, b *fleetv1alpha1.DatabaseBackup, st *fleetv1alpha1.DatabaseBackupStatus) (ctrl.Result, error) {
	db := &fleetv1alpha1.Database{}
	switch err := r.hub.Get(ctx, client.ObjectKey{Namespace: b.Namespace, Name: b.Spec.DatabaseName}, db); {
	case apierrors.IsNotFound(err):
		db = nil
	case err != nil:
		return ctrl.Result{}, fmt.Errorf("reading database: %w", err)
	}
	st.ObservedGeneration = b.Generation
	if len(st.Clusters) == 0 {
		if db == nil {
			// Nothing ran yet: wait for the Database (its creation wakes us).
			st.Phase = fleetv1alpha1.BackupPhasePending
			setBackupStalled(st, fleetv1alpha1.ReasonDatabaseNotFound,
				fmt.Sprintf("Database %q does not exist in namespace %q", b.Spec.DatabaseName, b.Namespace))
			setBackupCondition(st, fleetv1alpha1.ConditionReady, false, fleetv1alpha1.ReasonDatabaseNotFound, "waiting for the Database")
			return ctrl.Result{}, nil
		}
		st.Clusters = initialRecords(b, db)
	}
	gone := db == nil || !db.DeletionTimestamp.IsZero()
	requeue := r.memberSteps(ctx, b, db, st.Clusters, gone)
	foldBackupStatus(st, gone)
	return ctrl.Result{RequeueAfter: requeue}, nil
}

// memberSteps runs the step of every member whose record is not final, in
// parallel, and returns when to look again (0: nothing left to do).
func (r *backupReconciler) memberSteps(ctx context.Context, b *fleetv1alpha1.DatabaseBackup, db *fleetv1alpha1.Database,
	records []fleetv1alpha1.BackupRecord, gone bool) time.Duration {
	var (
		wg      sync.WaitGroup
		mu      sync.Mutex
		requeue time.Duration
	)
	for i := range records {
		rec := &records[i]
		if fleetv1alpha1.BackupPhaseFinal(rec.Phase) {
			continue
		}
		if gone && rec.Phase == fleetv1alpha1.BackupPhasePending {
			t := r.stamp()
			rec.Phase, rec.Finished = fleetv1alpha1.BackupPhaseFailed, &t
			rec.Message = "the Database was deleted before the backup ran in this member"
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			next, after := r.memberBackup(ctx, b, db, *rec)
			mu.Lock()
			defer mu.Unlock()
			*rec = next
			requeue = queue.Sooner(requeue, after)
		}()
	}
	wg.Wait()
	return requeue
}

// initialRecords fixes the members of a backup at its first pass:
// spec.clusterNames (or every member the Database is placed on), a named
// member that is not placed recorded as Skipped.
func initialRecords(b *fleetv1alpha1.DatabaseBackup, db *fleetv1alpha1.Database) []fleetv1alpha1.BackupRecord {
	placed := placement.CurrentMembers(db)
	names := b.Spec.ClusterNames
	if len(names) == 0 {
		names = placed
	}
	placedSet := sets.New(placed...)
	names, instead := backupMembers(db, names)
	out := make([]fleetv1alpha1.BackupRecord, 0, len(names))
	for _, name := range sets.List(sets.New(names...)) {
		rec := fleetv1alpha1.BackupRecord{Cluster: name, Phase: fleetv1alpha1.BackupPhasePending, BackupID: backupID(b)}
		if !placedSet.Has(name) {
			rec.Phase = fleetv1alpha1.BackupPhaseSkipped
			rec.Message = "the Database is not placed on this member"
		}
		out = append(out, rec)
	}
	return withStandbyRecords(out, instead, backupID(b))
}

// stamp is now as a status timestamp (whole seconds).
func (r *backupReconciler) stamp() metav1.Time {
	return metav1.NewTime(r.now().Truncate(time.Second))
}

// writeBackupStatus patches the status when it changed.
func (r *backupReconciler) writeBackupStatus(ctx context.Context, b *fleetv1alpha1.DatabaseBackup, st fleetv1alpha1.DatabaseBackupStatus) error {
	if apiequality.Semantic.DeepEqual(b.Status, st) {
		return nil
	}
	patch := client.MergeFrom(b.DeepCopy())
	b.Status = st
	if err := r.hub.Status().Patch(ctx, b, patch); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("writing status: %w", err)
	}
	return nil
}
