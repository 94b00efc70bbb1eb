package database

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.opentelemetry.io/otel/trace"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/cluster"
	mcmanager "sigs.k8s.io/multicluster-runtime/pkg/manager"
	"sigs.k8s.io/multicluster-runtime/pkg/multicluster"
	mcreconcile "sigs.k8s.io/multicluster-runtime/pkg/reconcile"

	fleetv1alpha1 "github.com/fleetdb/fleetdb/apis/v1alpha1"
	"github.com/fleetdb/fleetdb/clusters"
	"github.com/fleetdb/fleetdb/hub/internal/dbstatus"
	"github.com/fleetdb/fleetdb/hub/internal/memberjob"
	"github.com/fleetdb/fleetdb/hub/internal/queue"
	"github.com/fleetdb/fleetdb/hub/internal/tombstones"
	"github.com/fleetdb/fleetdb/hub/internal/topology"
	"github.com/fleetdb/fleetdb/internal/statusmsg"
	"github.com/fleetdb/fleetdb/internal/telemetry"
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
	databases *queue.Ref
	// tracer starts the Member.Sync spans (telemetry.Tracer); nil only in benchmarks.
	tracer trace.Tracer
	// lineage tells the syncs that carry a change out from later ones.
	lineage syncLineage
	// limiter caps the syncs in flight per member; self is this controller's
	// queue, where parked requests go back.
	limiter *queue.MemberLimiter
	self    *queue.Ref
	// watches watches the CloudNativePG Clusters of members that run them.
	watches *backendWatches
	// secrets binds the hub's Secret role in each managed namespace of a
	// member and watches fleetdb's Secrets there.
	secrets *secretWatches
	// shard is the sharded hub's runtime; nil without --sharding.
	shard *shardRuntime
	// jobs is the hub's record of the Jobs it creates in members (nil in unit tests).
	jobs *memberjob.Ledger
	// refused counts the refusals (403) in a row per member and Database:
	// the retry's backoff (see forbiddenRetryFirst); nil retries at the cap.
	refused *refusals
	// tombstones hold the hub's Retain records, which vouch for the volume
	// claims a new workload would start on (claimsGuard); nil: none.
	tombstones *tombstones.Store
}

// Reconcile is the envelope of one member sync: the per-member slot, the
// plan and role, the span and deadline; the work (sync) says how it went, and
// the envelope records the result, the metrics and the span attributes once.
func (r *memberSyncReconciler) Reconcile(ctx context.Context, req mcreconcile.Request) (ctrl.Result, error) {
	cluster, key := string(req.ClusterName), req.NamespacedName
	if cluster == "" {
		return ctrl.Result{}, nil
	}
	if !r.limiter.Acquire(req) {
		return ctrl.Result{}, nil // parked: back in the queue when a sync of this member ends
	}
	defer r.releaseSlot(cluster)
	if r.shard != nil {
		return r.shardedSync(ctx, req)
	}
	p := r.state.plan(key)
	if p == nil {
		// The Database controller has not planned this Database yet; it
		// enqueues every member it places once it has.
		r.lineage.forgetDatabase(key)
		return ctrl.Result{}, nil
	}
	out := r.syncPlan(ctx, cluster, key, p)
	return ctrl.Result{RequeueAfter: out.requeue}, out.err
}

// syncPlan runs one member sync on plan p: the span and deadline, the work,
// and the result recorded.
func (r *memberSyncReconciler) syncPlan(ctx context.Context, cluster string, key types.NamespacedName, p *plan) syncOutcome {
	role := p.role(cluster)
	if role == roleNone {
		return syncOutcome{}
	}
	caller := ctx
	ctx, tel := r.startSync(ctx, cluster, key, p, role)
	ctx, cancel := context.WithTimeout(ctx, r.opts.MemberCallTimeout)
	out := cutShort(caller, r.sync(ctx, cluster, key, p, role))
	cancel()
	if out.result != nil {
		r.record(key, cluster, out.result)
		if out.result.Status.Reason != fleetv1alpha1.ReasonForbidden {
			r.refused.clear(cluster, key)
		}
	}
	tel.end(out)
	return out
}

// cutShort drops the result of a sync its caller cancelled: the replica
// lost the member (--sharding: another replica owns it now; shardedSync
// cancels the sync's calls) or the hub is stopping. What such a sync saw is
// its own cancellation ("context canceled" on its calls), not the member:
// recorded, it marked the member Degraded in this replica's results, and on
// the leader the Database's status (a Ready Database flapped to Degraded)
// until the new owner's report arrived. A deadline (the member too slow) is
// an observation and stays.
func cutShort(caller context.Context, out syncOutcome) syncOutcome {
	if errors.Is(caller.Err(), context.Canceled) {
		out.result = nil
	}
	return out
}

// releaseSlot frees the member's slot and runs the request parked on it, if any.
func (r *memberSyncReconciler) releaseSlot(cluster string) {
	if next, ok := r.limiter.Release(cluster); ok {
		r.self.AddWith(string(next.ClusterName), next.NamespacedName, queue.PriorityChange, 0)
	}
}

// sync is the work of one member sync: the member's role in the plan,
// carried out. An unreachable member is a condition, not an error storm:
// the registry wakes the sync when the member comes back.
func (r *memberSyncReconciler) sync(ctx context.Context, cluster string, key types.NamespacedName, p *plan, role memberRole) syncOutcome {
	if h := r.provider.Health(cluster); !h.Engaged || !h.Ready {
		if h.NotKnownYet() {
			// Not connected yet (a hub that just started): nothing is
			// known of it, so nothing is recorded (the status keeps what
			// was reported); the registry wakes the sync once it engages.
			return syncOutcome{}
		}
		return unreachableOutcome(cluster, h.Message)
	}
	cl, err := r.mgr.GetCluster(ctx, multicluster.ClusterName(cluster))
	if err != nil {
		return unreachableOutcome(cluster, "member not connected")
	}
	if role == roleTeardown {
		// Secret access before the teardown reads a Secret; a namespace that
		// is gone holds nothing of the Database, and none is created for it.
		present, err := r.secretAccess(ctx, cluster, cl, key.Namespace, nil)
		if err != nil {
			return r.secretAccessFailed(key, cluster, errReasonTeardown, fleetv1alpha1.ClusterPhaseDeleting, err)
		}
		if !present {
			r.memo.ForgetDatabase(cluster, key.Namespace, key.Name)
			return finished(outcomeTornDown, &memberResult{Status: deletingStatus(cluster, "removed"), TornDown: true})
		}
		return r.teardown(ctx, cl.GetClient(), cl.GetAPIReader(), cluster, key, p)
	}

	db := &fleetv1alpha1.Database{}
	if err := r.hub.Get(ctx, key, db); err != nil {
		if apierrors.IsNotFound(err) {
			r.lineage.forgetDatabase(key)
			return syncOutcome{}
		}
		return failedOutcome(errReasonHub, fmt.Errorf("reading database: %w", err), nil)
	}
	if db.UID != p.uid || !db.DeletionTimestamp.IsZero() {
		// The plan is stale; the Database controller is about to replace it.
		return syncOutcome{}
	}
	if _, known := db.KnownBackend(); !known {
		// The Database controller reads what the members run and records
		// it (settleBackend); nothing is written to a member meanwhile.
		// Looked at again (this cache may not hold the recorded backend yet).
		return syncOutcome{requeue: backendWaitRetry}
	}
	if err := r.backendReady(ctx, cluster, cl, db); err != nil {
		if member.IsBackendMissing(err) {
			// Terminal until the member offers it (the registry wakes us) or the Database changes.
			return finished(outcomeObserved, &memberResult{Status: backendMissingStatus(cluster, db.EffectiveBackend())})
		}
		return failedOutcome(errReasonObserve, err, r.failureResult(key, cluster, err))
	}
	// The namespace is created (when missing) and the hub's Secret role
	// bound in it before any Secret of the Database is read or written.
	if _, err := r.secretAccess(ctx, cluster, cl, db.Namespace, member.ManagedNamespace(db.Namespace)); err != nil {
		return r.secretAccessFailed(key, cluster, errReasonApply, fleetv1alpha1.ClusterPhaseDegraded, err)
	}
	c := cl.GetClient()
	if db.EffectiveBackend() == fleetv1alpha1.BackendCloudNativePG {
		c = cachedClusterReads{Client: c, cache: cl.GetCache()}
	}
	return r.syncWorkload(ctx, c, cl.GetAPIReader(), cluster, key, db, p, role)
}

// cachedClusterReads serves the Gets of CloudNativePG Clusters from the
// member's cache, which watches them (backendReady started the watch):
// controller-runtime's cache-backed client reads every unstructured object
// live, so each sync read the Cluster from the API server, and member.Apply
// did so twice for a new one (its cache look-up, then its live read, one
// after the other). Through the cache, an unchanged Cluster costs no request
// and a new one one live read (member.Apply reads what the cache misses
// live, with the other objects at once: an unowned Cluster, which the cache
// does not hold, is still refused). Lists are not touched: they stay live
// (teardown lists CloudNativePG's claims, which carry no fleetdb label).
type cachedClusterReads struct {
	client.Client
	cache client.Reader
}

// Get reads a CloudNativePG Cluster from the cache, anything else as the client does.
func (c cachedClusterReads) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	if u, ok := obj.(*unstructured.Unstructured); ok && u.GroupVersionKind() == member.CNPGClusterGVK {
		return c.cache.Get(ctx, key, obj, opts...)
	}
	return c.Client.Get(ctx, key, obj, opts...)
}

// knownSecret is the member credentials Secret as prepareRotation read it
// from the member's API server this sync (nil: NotFound). The apply's
// ownership check is answered with it (knownSecretClient, knownSecretReader)
// instead of reading the Secret twice more, one read after the other (the
// member cache holds no Secrets, so its "cached" read went to the API server
// too, and its NotFound then to the live read): a sync reads the Secret once.
type knownSecret struct {
	key    client.ObjectKey
	secret *corev1.Secret
}

// get answers a Get of the known Secret; ok is false for any other object.
func (k knownSecret) get(key client.ObjectKey, obj client.Object) (ok bool, err error) {
	s, isSecret := obj.(*corev1.Secret)
	if !isSecret || key != k.key {
		return false, nil
	}
	if k.secret == nil {
		return true, apierrors.NewNotFound(corev1.Resource("secrets"), key.Name)
	}
	k.secret.DeepCopyInto(s)
	return true, nil
}

type knownSecretClient struct {
	client.Client
	known knownSecret
}

// Get answers the known Secret from the sync's read, anything else as the client does.
func (c knownSecretClient) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	return knownSecretReader{Reader: c.Client, known: c.known}.Get(ctx, key, obj, opts...)
}

type knownSecretReader struct {
	client.Reader
	known knownSecret
}

// Get answers the known Secret from the sync's read, anything else through the reader.
func (r knownSecretReader) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	if ok, err := r.known.get(key, obj); ok {
		return err
	}
	return r.Reader.Get(ctx, key, obj, opts...)
}

// memberScope is what one member sync of a Database works on: the member's
// clients, the Database and its plan, and what the steps found on the way
// (the rotation and restore parts, the apply's result). The steps are the
// memberPhases, run in order by syncWorkload, as the Database reconciler
// runs its phases over a databaseScope.
type memberScope struct {
	c       client.Client
	live    client.Reader
	cluster string
	key     types.NamespacedName
	db      *fleetv1alpha1.Database
	p       *plan
	role    memberRole

	rot     *memberRotation
	rest    *memberRestore
	outcome string
	applied member.ApplyResult
	wrote   bool
	// rotation and rotationAfter are what finishRotation reported and when
	// it wants to look again.
	rotation      rotationReport
	rotationAfter time.Duration
	// out is the sync's outcome once a step decided it.
	out syncOutcome
}

// memberPhase is one step of a member sync. It returns false to stop: s.out
// then holds the sync's outcome.
type memberPhase func(ctx context.Context, s *memberScope) bool

// syncWorkload applies the plan (a member whose turn in the rollout came)
// and observes the member, with the credential rotation's part around the
// apply: prepareRotation says which credentials to render, finishRotation
// runs the member's rotation Job and says when to look again; the restore's
// part comes after the observation.
func (r *memberSyncReconciler) syncWorkload(ctx context.Context, c client.Client, live client.Reader, cluster string, key types.NamespacedName,
	db *fleetv1alpha1.Database, p *plan, role memberRole) syncOutcome {
	s := &memberScope{c: c, live: live, cluster: cluster, key: key, db: db, p: p, role: role, outcome: outcomeObserved}
	for _, phase := range []memberPhase{
		r.memberPrepare,
		r.memberApply,
		r.memberFinishRotation,
		r.memberObserve,
		r.memberRestore,
	} {
		if !phase(ctx, s) {
			break
		}
	}
	return s.out
}

// memberPrepare: which credentials to render (the rotation's part) and the
// restore's part before the apply.
func (r *memberSyncReconciler) memberPrepare(ctx context.Context, s *memberScope) bool {
	var err error
	if s.rot, err = r.prepareRotation(ctx, s.c, s.live, s.cluster, s.db, s.p); err == nil {
		s.rest, err = r.prepareRestore(ctx, s.c, s.live, s.db, s.cluster)
	}
	if err != nil {
		s.out = r.stepFailed(s.key, s.cluster, errReasonObserve, err)
		return false
	}
	return true
}

// memberApply writes the member's objects when its turn in the rollout
// came. A PrimaryStandby Database's members are written once the hub
// stored which one is primary (topology.Decided).
func (r *memberSyncReconciler) memberApply(ctx context.Context, s *memberScope) bool {
	if s.role != roleApply || s.db.Generation != s.p.generation || !topology.Decided(s.db) {
		return true
	}
	known := knownSecret{key: client.ObjectKey{Namespace: s.db.Namespace, Name: member.CredentialsSecretName(s.db.Name)}, secret: s.rot.secret}
	res, err := r.apply(ctx, knownSecretReader{Reader: s.live, known: known}, knownSecretClient{Client: s.c, known: known},
		s.cluster, s.db, s.p, s.rot.creds, s.rest)
	if err != nil {
		s.out = r.applyFailed(s.key, s.cluster, err)
		s.out.applied = res
		return false
	}
	s.outcome, s.applied, s.wrote = outcomeSynced, res, true
	return true
}

// memberFinishRotation runs the member's rotation Job and says when to look
// again; memberObserve puts its report on the result.
func (r *memberSyncReconciler) memberFinishRotation(ctx context.Context, s *memberScope) bool {
	report, requeue, err := r.finishRotation(ctx, s.c, s.live, s.cluster, s.db, s.p, s.rot, s.wrote)
	if err != nil {
		s.out = r.stepFailed(s.key, s.cluster, errReasonApply, err)
		s.out.applied = s.applied
		return false
	}
	s.rotation, s.rotationAfter = report, requeue
	return true
}

// memberObserve reads the member's state into the result.
func (r *memberSyncReconciler) memberObserve(ctx context.Context, s *memberScope) bool {
	s.out = r.observe(ctx, s.c, s.key, s.cluster, s.db, s.outcome)
	s.out.applied = s.applied
	if s.out.err != nil || s.out.result == nil {
		return false
	}
	s.out.result.Rotation = s.rotation
	s.out.requeue = minPositive(s.out.requeue, s.rotationAfter)
	return true
}

// memberRestore runs the member's part of spec.restoreFrom after the
// observation and puts its report on the result.
func (r *memberSyncReconciler) memberRestore(ctx context.Context, s *memberScope) bool {
	s.out = r.restoreStep(ctx, s.c, s.live, s.key, s.cluster, s.db, s.rest, s.out)
	return true
}

// restoreStep runs the member's part of spec.restoreFrom after the
// observation and puts its report on the result.
func (r *memberSyncReconciler) restoreStep(ctx context.Context, c client.Client, live client.Reader, key types.NamespacedName, cluster string,
	db *fleetv1alpha1.Database, rest *memberRestore, out syncOutcome) syncOutcome {
	rep, after, err := r.finishRestore(ctx, c, live, db, cluster, rest, out.result.Status)
	if err != nil {
		failed := r.stepFailed(key, cluster, errReasonApply, err)
		failed.applied = out.applied
		return failed
	}
	out.result.Restore = rep
	dbstatus.ApplyReport(&out.result.Status, rep)
	out.requeue = minPositive(out.requeue, after)
	return out
}

// stepFailed: a step other than the apply failed; a Forbidden is the
// member's RBAC (see forbiddenOutcome), anything else is retried.
func (r *memberSyncReconciler) stepFailed(key types.NamespacedName, cluster, reason string, err error) syncOutcome {
	if isForbidden(err) {
		return r.forbiddenOutcome(key, cluster, reason, err, fleetv1alpha1.ClusterPhaseDegraded)
	}
	return failedOutcome(reason, err, r.failureResult(key, cluster, err))
}

// teardown removes the Database's objects from the member per the plan's
// deletion policy, polling while they go. A final backup the plan asks for
// comes first: while it holds, nothing is deleted in the member.
func (r *memberSyncReconciler) teardown(ctx context.Context, c client.Client, live client.Reader, cluster string, key types.NamespacedName, p *plan) syncOutcome {
	fb, err := r.finalBackup(ctx, c, live, cluster, key, p)
	switch {
	case err != nil && isForbidden(err) && p.finalBackup.policy == fleetv1alpha1.FinalBackupBestEffort:
		// The member's RBAC refuses the backup: BestEffort records it and goes on.
		fb = finalBackupStep{record: &fleetv1alpha1.BackupRecord{Cluster: cluster, Phase: fleetv1alpha1.BackupPhaseFailed,
			Message: statusmsg.Bound("the member's RBAC refused the final backup: " + statusmsg.RedactAddresses(err.Error()))}}
	case err != nil:
		return r.finalBackupFailed(key, cluster, err)
	}
	if fb.hold {
		out := finished(outcomeTeardownWaiting, &memberResult{Status: deletingStatus(cluster, fb.waiting), FinalBackup: fb.record})
		out.requeue = fb.requeue
		return out
	}
	// Read live: a cache that lags (a member's watches back off after an
	// outage) would miss a data claim made meanwhile, and the teardown would
	// call itself done with the claim left behind.
	reads := liveReads{Client: c, live: live}
	// The rotation Jobs go first, whatever the policy (machinery, not data),
	// while the member Secret still shows the rotation; member.Teardown
	// touches no Job.
	err = r.teardownRotationJobs(ctx, reads, live, cluster, r.owner(key, p))
	var done bool
	if err == nil {
		done, err = member.Teardown(ctx, reads, r.owner(key, p), p.policy, r.memo)
	}
	switch {
	case isForbidden(err):
		return r.forbiddenOutcome(key, cluster, errReasonTeardown, err, fleetv1alpha1.ClusterPhaseDeleting)
	case err != nil:
		return failedOutcome(errReasonTeardown, err, &memberResult{Status: deletingStatus(cluster, "teardown failed, retrying: "+err.Error()), FinalBackup: fb.record})
	case !done:
		out := finished(outcomeTeardownWaiting, &memberResult{Status: deletingStatus(cluster, "waiting for objects to be removed"), FinalBackup: fb.record})
		out.requeue = teardownPoll
		return out
	}
	if fb.jobs {
		// The result is recorded: the backup Jobs go, the volume claim stays.
		if err := r.removeFinalBackupJobs(ctx, c, live, cluster, p.finalBackup); err != nil {
			return failedOutcome(errReasonTeardown, err, &memberResult{Status: deletingStatus(cluster, "removing the final backup jobs: "+err.Error()), FinalBackup: fb.record})
		}
	}
	r.memo.ForgetDatabase(cluster, key.Namespace, key.Name)
	msg := "removed"
	if p.policy == fleetv1alpha1.DeletionPolicyOrphan {
		msg = "left running without fleetdb's labels (deletionPolicy Orphan): the workload is no longer managed"
	}
	return finished(outcomeTornDown, &memberResult{Status: deletingStatus(cluster, msg), TornDown: true, FinalBackup: fb.record})
}

// secretAccess gives the hub Secret access in namespace ns of the member
// (secretWatches.ensure); it reports false only when create is nil and the
// namespace does not exist.
func (r *memberSyncReconciler) secretAccess(ctx context.Context, cluster string, cl cluster.Cluster, ns string, create *corev1.Namespace) (bool, error) {
	if r.secrets == nil {
		return true, nil
	}
	return r.secrets.ensure(ctx, cluster, cl, ns, create)
}

// secretAccessFailed: the member refused the namespace or the Secret role's
// binding (a namespace fleetdb does not manage: terminal until rechecked,
// with the admission policy's message), or it could not be given yet (retried).
func (r *memberSyncReconciler) secretAccessFailed(key types.NamespacedName, cluster, reason string, phase fleetv1alpha1.ClusterPhase, err error) syncOutcome {
	if isForbidden(err) {
		return r.forbiddenOutcome(key, cluster, reason, err, phase)
	}
	return failedOutcome(reason, err, r.failureResult(key, cluster, err))
}

// finalBackupFailed: the final backup could not be started or read; the
// teardown holds (a Forbidden until the Database or the member's
// registration changes, anything else is retried).
func (r *memberSyncReconciler) finalBackupFailed(key types.NamespacedName, cluster string, err error) syncOutcome {
	if isForbidden(err) {
		out := r.forbiddenOutcome(key, cluster, errReasonTeardown, err, fleetv1alpha1.ClusterPhaseDeleting)
		out.result.FinalBackup = &fleetv1alpha1.BackupRecord{Cluster: cluster, Phase: fleetv1alpha1.BackupPhaseFailed,
			Message: statusmsg.Bound("the member's RBAC refused the final backup (Jobs, volume claims, pods): " + statusmsg.RedactAddresses(err.Error()))}
		return out
	}
	return failedOutcome(errReasonTeardown, err, &memberResult{Status: deletingStatus(cluster, "final backup: "+statusmsg.RedactAddresses(err.Error()))})
}

// applyFailed: an object fleetdb does not own blocks the member (terminal
// until something changes: the member's objects, watched, or the Database),
// or the apply failed and is retried.
func (r *memberSyncReconciler) applyFailed(key types.NamespacedName, cluster string, err error) syncOutcome {
	var conflict *member.ConflictError
	if errors.As(err, &conflict) {
		return conflictOutcome(cluster, conflict)
	}
	var retained *member.RetainedDataError
	if errors.As(err, &retained) {
		return retainedDataOutcome(cluster, retained)
	}
	if isForbidden(err) {
		return r.forbiddenOutcome(key, cluster, errReasonApply, err, fleetv1alpha1.ClusterPhaseDegraded)
	}
	return failedOutcome(errReasonApply, err, r.failureResult(key, cluster, err))
}

// observe reads what the member runs for the Database.
func (r *memberSyncReconciler) observe(ctx context.Context, c client.Client, key types.NamespacedName, cluster string, db *fleetv1alpha1.Database, outcome string) syncOutcome {
	st, err := member.Observe(ctx, c, db, cluster)
	if isForbidden(err) {
		return r.forbiddenOutcome(key, cluster, errReasonObserve, err, fleetv1alpha1.ClusterPhaseDegraded)
	}
	if err != nil {
		return failedOutcome(errReasonObserve, err, r.failureResult(key, cluster, err))
	}
	repl, err := observeReplication(ctx, c, db)
	if err != nil {
		return failedOutcome(errReasonObserve, err, r.failureResult(key, cluster, err))
	}
	return finished(outcome, &memberResult{Status: st, HasWorkload: st.Phase != fleetv1alpha1.ClusterPhasePending, Replication: repl})
}

// apply renders the Database for the member and applies it; the objects
// carry the plan's traceparent, the change's (see publish). creds, when not
// nil, replace the plan's credentials (a member that switched in a rotation).
func (r *memberSyncReconciler) apply(ctx context.Context, live client.Reader, c client.Client, cluster string, db *fleetv1alpha1.Database, p *plan,
	creds map[string][]byte, rest *memberRestore) (member.ApplyResult, error) {
	if creds == nil {
		creds = p.credentials
	}
	if creds == nil {
		var s corev1.Secret
		key := types.NamespacedName{Namespace: db.Namespace, Name: member.CredentialsSecretName(db.Name)}
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
	topology := p.topology[cluster]
	if db.TopologyMode() == fleetv1alpha1.TopologyPrimaryStandby && topology == nil {
		// Never render a PrimaryStandby member without its wiring: it would
		// start a second, independent primary.
		return member.ApplyResult{}, fmt.Errorf("the plan has no topology wiring for member %s yet", cluster)
	}
	if needsInstanceTLS(db) && p.instanceTLS == nil {
		// Never render its postgres without TLS: the rotation Job would
		// refuse it.
		return member.ApplyResult{}, fmt.Errorf("the plan has no instance certificates for member %s yet", cluster)
	}
	objs, err := member.Render(member.Params{
		Database:        db,
		Cluster:         cluster,
		Credentials:     creds,
		ImageRepository: r.opts.ImageRepository,
		Traceparent:     p.traceparent,
		Topology:        topology,
		InstanceTLS:     p.instanceTLS,
		NodeMaintenance: p.nodeMaintenance[cluster],
	})
	if err != nil {
		return member.ApplyResult{}, fmt.Errorf("rendering: %w", err)
	}
	objs = restoreObjects(objs, db, rest)
	member.StampHub(objs, r.opts.HubID)
	res, err := member.Apply(ctx, cluster, c, live, objs, r.memo, member.WithClaimsGuard(r.claimsGuard(db, cluster)))
	telemetry.CountRestored(cluster, res.Restored)
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

// failureResult keeps the last observation but marks the member degraded with why.
func (r *memberSyncReconciler) failureResult(key types.NamespacedName, cluster string, err error) *memberResult {
	prev := r.state.resultsFor(key)[cluster]
	res := &memberResult{Status: fleetv1alpha1.ClusterStatus{Name: cluster}}
	if prev != nil {
		res.Status, res.HasWorkload = prev.Status, prev.HasWorkload
	}
	res.Status.Phase = fleetv1alpha1.ClusterPhaseDegraded
	res.Status.Message = statusmsg.Bound(statusmsg.RedactAddresses(err.Error()))
	return res
}

// record stores a result and wakes the Database controller when it changed:
// soon for a phase change (the results of members that change together fold
// into one status write), later for progress within a phase, and behind new
// Databases and spec changes in its queue.
func (r *memberSyncReconciler) record(key types.NamespacedName, cluster string, res *memberResult) {
	res.At = time.Now()
	switch r.state.record(key, cluster, res) {
	case resultPhase:
		r.databases.AddWith("", key, queue.PriorityStatus, statusCoalesceDelay)
	case resultProgress:
		r.databases.AddWith("", key, queue.PriorityStatus, progressCoalesceDelay)
	}
}

func deletingStatus(cluster, msg string) fleetv1alpha1.ClusterStatus {
	return fleetv1alpha1.ClusterStatus{Name: cluster, Phase: fleetv1alpha1.ClusterPhaseDeleting, Message: statusmsg.Bound(msg)}
}

// liveReads is a member client whose reads go to the API server, not the cache.
type liveReads struct {
	client.Client
	live client.Reader
}

func (l liveReads) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	return l.live.Get(ctx, key, obj, opts...)
}

func (l liveReads) List(ctx context.Context, list client.ObjectList, opts ...client.ListOption) error {
	return l.live.List(ctx, list, opts...)
}
