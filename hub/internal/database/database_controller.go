package database

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.opentelemetry.io/otel/trace"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	mcreconcile "sigs.k8s.io/multicluster-runtime/pkg/reconcile"

	fleetv1alpha1 "github.com/fleetdb/fleetdb/apis/v1alpha1"
	"github.com/fleetdb/fleetdb/clusters"
	"github.com/fleetdb/fleetdb/hub/internal/dbstatus"
	"github.com/fleetdb/fleetdb/hub/internal/hubsecret"
	"github.com/fleetdb/fleetdb/hub/internal/queue"
	"github.com/fleetdb/fleetdb/hub/internal/tombstones"
	"github.com/fleetdb/fleetdb/hub/internal/topology"
	"github.com/fleetdb/fleetdb/internal/placement"
	"github.com/fleetdb/fleetdb/member"
)

// +kubebuilder:rbac:groups=fleetdb.io,resources=databases,verbs=get;list;watch;update;patch
// +kubebuilder:rbac:groups=fleetdb.io,resources=databases/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=fleetdb.io,resources=databases/finalizers,verbs=update
// +kubebuilder:rbac:groups=fleetdb.io,resources=memberclusters,verbs=get;list;watch
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
	members *queue.Ref
	// now is replaceable in tests.
	now func() time.Time
	// tracer starts the Database.Reconcile spans (telemetry.Tracer: spans with
	// real ids also when no traces are exported); nil only in benchmarks.
	tracer trace.Tracer
	// tombstones record the members whose teardown was skipped.
	tombstones *tombstones.Store
	// shard is the sharded hub's runtime; nil without --sharding.
	shard *shardRuntime
	// secrets gives the hub Secret access in a member's managed namespace
	// (credentials recovery reads member Secrets); nil: not needed.
	secrets *secretWatches
	// hubSecrets gives the hub Secret access in the Database's namespace of
	// the hub cluster (its credentials and topology PKI Secrets), and takes
	// it back when the namespace's last Database is gone.
	hubSecrets *hubsecret.Access
}

// databaseScope is what one reconcile of a Database works on: the phases
// fill it in, one after the other, and the deferred write puts its status.
type databaseScope struct {
	key types.NamespacedName
	db  *fleetv1alpha1.Database
	// status is written once, when the reconcile ends; nil writes nothing.
	status *fleetv1alpha1.DatabaseStatus

	// credentials are the Database's, from its hub Secret.
	credentials map[string][]byte
	// absentSecrets are the members where looking for the credentials found
	// no member Secret (nil: not looked for in this reconcile).
	absentSecrets *absentSecrets
	// results are the member syncs' last observations.
	results map[string]*memberResult
	// placement is the resolved placement; targets are its members.
	placement placement.Result
	targets   map[string]bool
	// teardown are members the Database is still being removed from.
	teardown map[string]bool
	// allowed are targets the rollout lets run the current generation.
	allowed map[string]bool
	// leftRegistry are dropped members whose MemberCluster is gone.
	leftRegistry []string
	// rotation is the credential rotation's part of the status.
	rotation rotationOutcome
	// finalBackups is status.finalBackups, computed with the teardowns
	// (before the results of finished ones are dropped).
	finalBackups []fleetv1alpha1.BackupRecord
	// topology is each target's PrimaryStandby wiring (nil for Independent).
	topology map[string]*member.Topology
	// instanceTLS are the certificates of a postgres Database's instances on
	// the StatefulSet backend (nil otherwise).
	instanceTLS *member.InstanceCertificates
	// topologyPass is the PrimaryStandby topology's part of the status
	// (nil for an Independent Database).
	topologyPass *topology.Pass
}

// stall ends the reconcile on a terminal error: the status written at the
// end has the Stalled condition with reason, and the error is terminal, so
// nothing retries until the Database (or what it depends on) changes.
func (s *databaseScope) stall(reason string, err error) error {
	st := dbstatus.Stalled(s.db, reason, err.Error())
	s.status = &st
	return reconcile.TerminalError(err)
}

// databasePhase is one step of a Database reconcile. An error ends the
// reconcile; the requeues of the phases that ran are merged.
type databasePhase func(ctx context.Context, s *databaseScope) (ctrl.Result, error)

// Reconcile implements the hub's reconcile contract: read, validate, act,
// status. The phases act; the status is written once, on the way out.
func (r *databaseReconciler) Reconcile(ctx context.Context, req mcreconcile.Request) (res ctrl.Result, reterr error) {
	if req.ClusterName != "" {
		return ctrl.Result{}, nil
	}
	ctx, span := r.startReconcileSpan(ctx, req.NamespacedName)
	defer func() { endReconcileSpan(span, res, reterr) }()

	s, err := r.loadScope(ctx, req.NamespacedName)
	if err != nil || s == nil {
		return ctrl.Result{}, err
	}
	defer func() {
		held, err := r.writeStatus(ctx, s)
		switch {
		case err != nil:
			res, reterr = ctrl.Result{}, err
		case held > 0 && reterr == nil:
			// Back for the held status, behind new work in the queue.
			if res.RequeueAfter <= 0 || held < res.RequeueAfter {
				res.RequeueAfter, res.Priority = held, new(int(queue.PriorityStatus))
			}
		}
	}()

	switch {
	case r.opts.protected(s.db.Namespace):
		return r.reconcileProtected(ctx, s)
	case !s.db.DeletionTimestamp.IsZero():
		return r.reconcileDelete(ctx, s)
	}
	return runPhases(ctx, s,
		r.reconcileCredentials,
		r.reconcileBackend,
		r.reconcilePlacement,
		r.reconcileDroppedMembers,
		r.reconcileTopologyWiring,
		r.reconcileInstanceTLS,
		r.reconcileRotation,
		r.reconcileTopology,
		r.reconcileRollout,
		r.reconcileStatus,
	)
}

// loadScope reads the Database; nil when it is gone (and forgotten).
func (r *databaseReconciler) loadScope(ctx context.Context, key types.NamespacedName) (*databaseScope, error) {
	db := &fleetv1alpha1.Database{}
	if err := r.hub.Get(ctx, key, db); err != nil {
		if apierrors.IsNotFound(err) {
			r.state.forget(key)
			r.forgetPlacements(ctx, key)
			if r.hubSecrets != nil {
				// The namespace's last Database gone: the hub's Secret access
				// there goes too.
				return nil, r.hubSecrets.Release(ctx, key.Namespace, "")
			}
			return nil, nil
		}
		return nil, fmt.Errorf("reading database: %w", err)
	}
	return &databaseScope{key: key, db: db}, nil
}

// errStatusConflict: the Database changed between the read and the status
// write; the reconcile is retried (with the controller's backoff) on what is
// stored now.
var errStatusConflict = errors.New("the Database changed since it was read; deciding again")

// errStopPhases ends a reconcile early without an error: the phase that
// returns it has set the status and the requeue (a wait, not a failure).
var errStopPhases = errors.New("stop phases")

// runPhases runs the phases in order until one fails or stops.
func runPhases(ctx context.Context, s *databaseScope, phases ...databasePhase) (ctrl.Result, error) {
	var res ctrl.Result
	for _, phase := range phases {
		r, err := phase(ctx, s)
		res.RequeueAfter = minPositive(res.RequeueAfter, r.RequeueAfter)
		if errors.Is(err, errStopPhases) {
			return res, nil
		}
		if err != nil {
			return ctrl.Result{}, err
		}
	}
	return res, nil
}

// reconcileProtected refuses a Database in a protected namespace: it stalls,
// and when deleted it is let go at once (fleetdb never placed it).
func (r *databaseReconciler) reconcileProtected(ctx context.Context, s *databaseScope) (ctrl.Result, error) {
	if !s.db.DeletionTimestamp.IsZero() {
		return ctrl.Result{}, r.dropFinalizer(ctx, s.db)
	}
	return ctrl.Result{}, s.stall(fleetv1alpha1.ReasonProtectedNamespace, fmt.Errorf(
		"namespace %q is protected: fleetdb does not manage Databases in it; create the Database in an application namespace", s.db.Namespace))
}

// reconcileBackend settles the backend of a Database that no longer tells
// it (settleBackend), and stalls a Database whose backend was changed after
// its members started on another one (spec.backend, or the recorded
// fleetdb.io/backend annotation): switching would start an empty database.
func (r *databaseReconciler) reconcileBackend(ctx context.Context, s *databaseScope) (ctrl.Result, error) {
	if res, err := r.settleBackend(ctx, s); err != nil {
		return res, err
	}
	if msg := backendAnnotationChanged(s.db); msg != "" {
		return ctrl.Result{}, s.stall(fleetv1alpha1.ReasonBackendChanged, errors.New(msg))
	}
	if msg := backendChanged(s.db); msg != "" {
		return ctrl.Result{}, s.stall(fleetv1alpha1.ReasonBackendChanged, errors.New(msg))
	}
	return ctrl.Result{}, nil
}

// writeStatus patches the status a phase computed, only when it changed: a
// steady fleet writes nothing. A routine change (dbstatus.Routine) is held
// back for statusHoldDelay: held says when to come back for it.
func (r *databaseReconciler) writeStatus(ctx context.Context, s *databaseScope) (held time.Duration, err error) {
	if s.status == nil {
		return 0, nil
	}
	db, st := s.db, *s.status
	if apiequality.Semantic.DeepEqual(db.Status, st) {
		r.state.statusSettled(s.key)
		statusComputed(ctx, db, db.Status.Phase, st, false)
		return 0, nil
	}
	now := r.now()
	if dbstatus.Routine(db.Status, st) {
		if wait := r.state.holdStatus(s.key, now); wait > 0 {
			return wait, nil
		}
	}
	for i := range st.Clusters {
		if st.Clusters[i].LastSyncTime == nil {
			t := metav1Time(now)
			st.Clusters[i].LastSyncTime = &t
		}
	}
	prev := db.Status.Phase
	// The status decides the switchover (status.topology: members render
	// from the status as stored, topology.DecideRole), so it is written only
	// over the object it was computed from: the patch carries the
	// resourceVersion read, and a status or spec stored meanwhile (an abort,
	// a write of an earlier hub that landed late) makes it fail with a
	// Conflict. Nothing of this pass is stored then; the Database is read
	// again and decided afresh (errStatusConflict).
	patch := client.MergeFromWithOptions(db.DeepCopy(), client.MergeFromWithOptimisticLock{})
	db.Status = st
	if err := r.hub.Status().Patch(ctx, db, patch); err != nil {
		switch {
		case apierrors.IsNotFound(err):
			return 0, nil
		case apierrors.IsConflict(err):
			return 0, fmt.Errorf("%w: %w", errStatusConflict, err)
		}
		return 0, fmt.Errorf("writing status: %w", err)
	}
	r.state.statusSettled(s.key)
	statusComputed(ctx, db, prev, st, true)
	return 0, nil
}
