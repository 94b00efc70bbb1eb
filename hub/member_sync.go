package hub

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.opentelemetry.io/otel/trace"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	mcmanager "sigs.k8s.io/multicluster-runtime/pkg/manager"
	"sigs.k8s.io/multicluster-runtime/pkg/multicluster"
	mcreconcile "sigs.k8s.io/multicluster-runtime/pkg/reconcile"

	fleetv1alpha1 "github.com/fleetdb/fleetdb/apis/v1alpha1"
	"github.com/fleetdb/fleetdb/clusters"
	"github.com/fleetdb/fleetdb/member"
)

// memberSyncReconciler brings one Database to one member: a request carries
// the member's name and the hub Database's key. It acts on the plan the
// Database controller published, records what it observed in memory and
// wakes the Database controller when that changed.
type memberSyncReconciler struct {
	mgr mcmanager.Manager
	hub client.Client
	// hubLive reads the hub uncached, for objects the cache may not have yet.
	hubLive  client.Reader
	provider *clusters.Provider
	state    *state
	memo     *member.Memo
	opts     Options
	recorder events.EventRecorder
	// databases enqueues hub Database requests.
	databases *queueRef
	// tracer starts the Member.Sync spans; nil when tracing is off.
	tracer trace.Tracer
	// lineage tells the syncs that carry a change out from later ones.
	lineage syncLineage
	// limiter caps the syncs in flight per member; self is this controller's
	// queue, where parked requests go back.
	limiter *memberLimiter
	self    *queueRef
}

// Reconcile syncs one Database in one member, bounded by the member call timeout.
func (r *memberSyncReconciler) Reconcile(ctx context.Context, req mcreconcile.Request) (_ ctrl.Result, err error) {
	cluster, key := string(req.ClusterName), req.NamespacedName
	if cluster == "" {
		return ctrl.Result{}, nil
	}
	if !r.limiter.acquire(req) {
		return ctrl.Result{}, nil // parked: back in the queue when a sync of this member ends
	}
	defer func() {
		if next, ok := r.limiter.release(cluster); ok {
			r.self.addWith(string(next.ClusterName), next.NamespacedName, priorityChange, 0)
		}
	}()
	log := ctrl.LoggerFrom(ctx).WithValues("cluster", cluster, "database", key.String())
	ctx = ctrl.LoggerInto(ctx, log)
	p := r.state.plan(key)
	if p == nil {
		// The Database controller has not planned this Database yet; it
		// enqueues every member it places once it has.
		r.lineage.forgetDatabase(key)
		return ctrl.Result{}, nil
	}
	role := p.role(cluster)
	if role == roleNone {
		return ctrl.Result{}, nil
	}
	ctx, tel := r.startSync(ctx, cluster, key, p, role)
	defer func() { tel.end(err) }()

	ctx, cancel := context.WithTimeout(ctx, r.opts.MemberCallTimeout)
	defer cancel()

	if h := r.provider.Health(cluster); !h.Engaged || !h.Ready {
		// An unreachable member is a condition, not an error storm: the
		// registry wakes us when it comes back.
		tel.unreachable(h.Message)
		r.record(key, cluster, &memberResult{
			Status:      fleetv1alpha1.ClusterStatus{Name: cluster, Phase: fleetv1alpha1.ClusterPhaseUnreachable, Message: truncate(h.Message)},
			Unreachable: true,
		})
		return ctrl.Result{}, nil
	}
	cl, err := r.mgr.GetCluster(ctx, multicluster.ClusterName(cluster))
	if err != nil {
		tel.unreachable("member not connected")
		r.record(key, cluster, &memberResult{
			Status:      fleetv1alpha1.ClusterStatus{Name: cluster, Phase: fleetv1alpha1.ClusterPhaseUnreachable, Message: "member not connected"},
			Unreachable: true,
		})
		return ctrl.Result{}, nil
	}
	c := cl.GetClient()

	if role == roleTeardown {
		done, err := member.Teardown(ctx, c, key.Namespace, key.Name, p.policy, r.memo)
		if err != nil {
			tel.failed(errReasonTeardown, err)
			r.record(key, cluster, &memberResult{Status: deletingStatus(cluster, "teardown failed, retrying: "+err.Error())})
			return ctrl.Result{}, err
		}
		if !done {
			tel.finish(outcomeTeardownWaiting)
			r.record(key, cluster, &memberResult{Status: deletingStatus(cluster, "waiting for objects to be removed")})
			return ctrl.Result{RequeueAfter: teardownPoll}, nil
		}
		tel.finish(outcomeTornDown)
		r.memo.ForgetDatabase(cluster, key.Namespace, key.Name)
		r.record(key, cluster, &memberResult{Status: deletingStatus(cluster, "removed"), TornDown: true})
		return ctrl.Result{}, nil
	}

	db := &fleetv1alpha1.Database{}
	if err := r.hub.Get(ctx, key, db); err != nil {
		if apierrors.IsNotFound(err) {
			r.lineage.forgetDatabase(key)
			return ctrl.Result{}, nil
		}
		tel.failed(errReasonHub, err)
		return ctrl.Result{}, fmt.Errorf("reading database: %w", err)
	}
	if db.UID != p.uid || !db.DeletionTimestamp.IsZero() {
		// The plan is stale; the Database controller is about to replace it.
		return ctrl.Result{}, nil
	}

	outcome := outcomeObserved
	rotation, err := r.prepareRotation(ctx, c, db, p)
	if err != nil {
		tel.failed(errReasonObserve, err)
		r.recordFailure(key, cluster, err)
		return ctrl.Result{}, err
	}
	applied := false
	if role == roleApply && db.Generation == p.generation {
		res, err := r.apply(ctx, cl.GetAPIReader(), c, cluster, db, p, rotation.creds)
		tel.appliedObjects(res)
		if err != nil {
			var conflict *member.ConflictError
			if errors.As(err, &conflict) {
				// Terminal until something changes: the member's objects (watched) or the Database.
				tel.conflict(conflict)
				r.record(key, cluster, &memberResult{Status: fleetv1alpha1.ClusterStatus{
					Name: cluster, Phase: fleetv1alpha1.ClusterPhaseConflict, Message: truncate(conflict.Error()),
				}, HasWorkload: true})
				return ctrl.Result{}, nil
			}
			tel.failed(errReasonApply, err)
			r.recordFailure(key, cluster, err)
			return ctrl.Result{}, err
		}
		outcome = outcomeSynced
		applied = true
	}
	report, requeue, err := r.finishRotation(ctx, c, cluster, db, p, rotation, applied)
	if err != nil {
		tel.failed(errReasonApply, err)
		r.recordFailure(key, cluster, err)
		return ctrl.Result{}, err
	}

	st, err := member.Observe(ctx, c, db, cluster)
	if err != nil {
		tel.failed(errReasonObserve, err)
		r.recordFailure(key, cluster, err)
		return ctrl.Result{}, err
	}
	tel.finish(outcome)
	r.record(key, cluster, &memberResult{Status: st, HasWorkload: st.Phase != fleetv1alpha1.ClusterPhasePending, Rotation: report})
	return ctrl.Result{RequeueAfter: requeue}, nil
}

// apply renders the Database for the member and applies it; the objects
// carry the plan's traceparent, the change's (see publish). creds, when not
// nil, replace the plan's credentials (a member that switched in a rotation).
func (r *memberSyncReconciler) apply(ctx context.Context, live client.Reader, c client.Client, cluster string, db *fleetv1alpha1.Database, p *plan,
	creds map[string][]byte) (member.ApplyResult, error) {
	if creds == nil {
		creds = p.credentials
	}
	if creds == nil {
		var s corev1.Secret
		key := types.NamespacedName{Namespace: db.Namespace, Name: credentialsName(db)}
		err := r.hub.Get(ctx, key, &s)
		if apierrors.IsNotFound(err) {
			// The Database controller created it a moment ago; the cache may lag.
			err = r.hubLive.Get(ctx, key, &s)
		}
		if err != nil {
			return member.ApplyResult{}, fmt.Errorf("reading credentials: %w", err)
		}
		creds = s.Data
	}
	objs, err := member.Render(member.Params{
		Database:        db,
		Cluster:         cluster,
		Credentials:     creds,
		ImageRepository: r.opts.ImageRepository,
		Traceparent:     p.traceparent,
	})
	if err != nil {
		return member.ApplyResult{}, fmt.Errorf("rendering: %w", err)
	}
	res, err := member.Apply(ctx, cluster, c, live, objs, r.memo)
	countRestored(cluster, res.Restored)
	if err != nil {
		return res, err
	}
	if len(res.Applied) > 0 {
		ctrl.LoggerFrom(ctx).Info("applied member objects", "objects", res.Applied, "generation", db.Generation)
	}
	if len(res.Restored) > 0 {
		r.recorder.Eventf(db, nil, corev1.EventTypeWarning, "DriftCorrected", "Sync",
			"member %s: put back objects that were changed or removed there: %v", cluster, res.Restored)
		ctrl.LoggerFrom(ctx).Info("restored drifted member objects", "objects", res.Restored)
	}
	return res, nil
}

// recordFailure keeps the last observation but marks the member degraded with why.
func (r *memberSyncReconciler) recordFailure(key types.NamespacedName, cluster string, err error) {
	prev := r.state.resultsFor(key)[cluster]
	res := &memberResult{Status: fleetv1alpha1.ClusterStatus{Name: cluster}}
	if prev != nil {
		res.Status, res.HasWorkload = prev.Status, prev.HasWorkload
	}
	res.Status.Phase = fleetv1alpha1.ClusterPhaseDegraded
	res.Status.Message = truncate(err.Error())
	r.record(key, cluster, res)
}

// record stores a result and wakes the Database controller when it changed:
// soon for a phase change (the results of members that change together fold
// into one status write), later for progress within a phase, and behind new
// Databases and spec changes in its queue.
func (r *memberSyncReconciler) record(key types.NamespacedName, cluster string, res *memberResult) {
	res.At = time.Now()
	switch r.state.record(key, cluster, res) {
	case resultPhase:
		r.databases.addWith("", key, priorityStatus, statusCoalesceDelay)
	case resultProgress:
		r.databases.addWith("", key, priorityStatus, progressCoalesceDelay)
	}
}

func deletingStatus(cluster, msg string) fleetv1alpha1.ClusterStatus {
	return fleetv1alpha1.ClusterStatus{Name: cluster, Phase: fleetv1alpha1.ClusterPhaseDeleting, Message: truncate(msg)}
}
