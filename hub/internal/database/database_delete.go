package database

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	fleetv1alpha1 "github.com/fleetdb/fleetdb/apis/v1alpha1"
	"github.com/fleetdb/fleetdb/hub/internal/dbstatus"
	"github.com/fleetdb/fleetdb/hub/internal/tombstones"
	"github.com/fleetdb/fleetdb/internal/placement"
	"github.com/fleetdb/fleetdb/internal/telemetry"
)

// reconcileDelete tears the Database down in every member it reached, then
// drops the finalizer. A member unreachable for longer than
// spec.teardown.unreachableTimeout no longer blocks: its leftovers are
// collected when it comes back.
func (r *databaseReconciler) reconcileDelete(ctx context.Context, s *databaseScope) (ctrl.Result, error) {
	db := s.db
	if r.state.finalized(db.UID) {
		// This reconcile released it a moment ago; the cache has not seen it go.
		return ctrl.Result{}, nil
	}
	if !controllerutil.ContainsFinalizer(db, fleetv1alpha1.TeardownFinalizer) {
		r.state.forget(s.key)
		return ctrl.Result{}, nil
	}
	if r.holdProtected(s) {
		r.holdTeardowns(ctx, s)
		return ctrl.Result{}, nil // until spec.deletionProtection is false (an update wakes it)
	}
	s.results = r.state.resultsFor(s.key)
	reached, err := r.membersReached(ctx, s)
	if err != nil {
		return ctrl.Result{}, err
	}
	pending, requeue := r.settleTeardowns(ctx, s, reached)
	if len(pending) == 0 {
		if err := r.recordLastFinalBackups(ctx, s); err != nil {
			return ctrl.Result{}, err
		}
		r.noFinalBackupEvent(db)
		if err := r.recordRetained(ctx, db, reached); err != nil {
			return ctrl.Result{}, err
		}
		if err := r.dropFinalizer(ctx, db); err != nil {
			return ctrl.Result{}, err
		}
		r.state.forget(s.key)
		r.forgetPlacements(ctx, s.key)
		r.state.markFinalized(db.UID)
		if r.hubSecrets != nil {
			// Released: was it the namespace's last Database? (Again when
			// the deletion's event comes, for a hub that stops right here.)
			return ctrl.Result{}, r.hubSecrets.Release(ctx, db.Namespace, db.UID)
		}
		return ctrl.Result{}, nil
	}

	r.fanOut(ctx, s.key, &plan{uid: db.UID, generation: db.Generation, policy: db.TeardownPolicy(), teardown: pending,
		finalBackup: newFinalBackupPlan(db, db.TeardownPolicy(), pending)})
	st := dbstatus.Compute(dbstatus.Input{
		DB:          db,
		Teardown:    sortedKeys(pending),
		Results:     s.results,
		Unreachable: r.statusUnreachable,
		Now:         r.now(),

		ChangeTraceID: telemetry.TraceIDOf(r.state.plan(s.key).traceparentOrEmpty()),
	})
	st.FinalBackups = s.finalBackups
	dbstatus.SetFinalBackupCondition(&st, db, pending)
	r.finalBackupEvents(db, st.FinalBackups)
	s.status = &st
	return ctrl.Result{RequeueAfter: requeue}, nil
}

// recordRetained writes the hub's record of a Retain teardown (the
// Database's UID, its hub Namespace's UID, this hub's identity and the
// members it reached) before the finalizer goes: the only thing that lets a
// later Database of this namespace/name take the credentials Secret kept in
// those members, and with it the data (recoverySources). A failure keeps the
// finalizer; the reconcile retries.
func (r *databaseReconciler) recordRetained(ctx context.Context, db *fleetv1alpha1.Database, reached map[string]bool) error {
	if r.tombstones == nil || db.TeardownPolicy() != fleetv1alpha1.DeletionPolicyRetain || len(reached) == 0 {
		return nil
	}
	var ns corev1.Namespace
	if err := r.hub.Get(ctx, client.ObjectKey{Name: db.Namespace}, &ns); err != nil {
		return fmt.Errorf("reading namespace %s: %w", db.Namespace, err)
	}
	err := r.tombstones.RecordRetained(ctx, tombstones.Retained{Namespace: db.Namespace, Name: db.Name, UID: db.UID,
		NamespaceUID: ns.UID, HubID: r.opts.HubID, Members: sortedKeys(reached)})
	if err != nil {
		return fmt.Errorf("recording the Retain teardown: %w", err)
	}
	return nil
}

// recordLastFinalBackups stores the final backups' outcome before the
// finalizer goes, when this pass learned it: a member whose backup ended and
// whose teardown finished in the same sync would otherwise go unrecorded,
// and the Database's last state (what a watcher, an audit log or kubectl
// wait reads) would show a backup still running. One status write per
// deletion at most; a conflict retries the reconcile, the finalizer stays.
func (r *databaseReconciler) recordLastFinalBackups(ctx context.Context, s *databaseScope) error {
	db := s.db
	if len(s.finalBackups) == 0 && len(db.Status.FinalBackups) == 0 {
		return nil
	}
	st := *db.Status.DeepCopy()
	st.FinalBackups = s.finalBackups
	dbstatus.SetFinalBackupCondition(&st, db, nil)
	if apiequality.Semantic.DeepEqual(db.Status, st) {
		return nil
	}
	r.finalBackupEvents(db, st.FinalBackups)
	patch := client.MergeFromWithOptions(db.DeepCopy(), client.MergeFromWithOptimisticLock{})
	db.Status = st
	if err := r.hub.Status().Patch(ctx, db, patch); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("recording the final backups: %w", err)
	}
	return nil
}

// startTeardown fans a deletion out to the members from the deletion event
// itself, before the Database's reconcile (which may wait in a queue behind
// other Databases' hub writes in a burst) publishes the same plan again: the
// members this process planned the Database on, or has results from that
// are not torn down yet, get their teardown now. It does what
// reconcileDelete would, and nothing where that would hold: a protected
// namespace, spec.deletionProtection, no finalizer, or a Database this
// process never planned (the reconcile decides those). A member that must
// not block the teardown any longer (unreachable past its timeout) is still
// woken here; its sync finds it unreachable, and the reconcile settles it.
func (r *databaseReconciler) startTeardown(db *fleetv1alpha1.Database) {
	if r.opts.protected(db.Namespace) || db.Spec.DeletionProtection || !controllerutil.ContainsFinalizer(db, fleetv1alpha1.TeardownFinalizer) {
		return
	}
	key := client.ObjectKeyFromObject(db)
	prev := r.state.plan(key)
	if prev == nil || prev.uid != db.UID || r.state.finalized(db.UID) {
		return
	}
	results := r.state.resultsFor(key)
	teardown := map[string]bool{}
	for _, m := range []map[string]bool{prev.targets, prev.teardown} {
		for name := range m {
			if res := results[name]; res == nil || !res.TornDown {
				teardown[name] = true
			}
		}
	}
	if len(teardown) == 0 {
		return
	}
	policy := db.TeardownPolicy()
	r.fanOut(context.Background(), key, &plan{uid: db.UID, generation: db.Generation, policy: policy, teardown: teardown,
		finalBackup: newFinalBackupPlan(db, policy, teardown)})
}

// membersReached are the members a deleted Database may have objects in:
// those in its status, with results, or in its last plan. A Database this
// hub process never planned whose status names no member (its first status
// was held back, see statusHoldDelay, and the hub restarted since) may
// still have reached the members its placement resolves to: those are
// added, and a teardown that finds nothing there is done at once.
func (r *databaseReconciler) membersReached(ctx context.Context, s *databaseScope) (map[string]bool, error) {
	reached := map[string]bool{}
	for _, c := range s.db.Status.Clusters {
		reached[c.Name] = true
	}
	for name := range s.results {
		reached[name] = true
	}
	prev := r.state.plan(s.key)
	if prev != nil {
		for name := range prev.targets {
			reached[name] = true
		}
		for name := range prev.teardown {
			reached[name] = true
		}
	}
	if prev == nil && len(reached) == 0 {
		placed, err := r.placedNow(ctx, s.db)
		if err != nil {
			return nil, err
		}
		for _, name := range placed {
			reached[name] = true
		}
	}
	return reached, nil
}

// placedNow are the members the Database's placement resolves to now (none
// when it cannot be resolved: such a Database was never placed).
func (r *databaseReconciler) placedNow(ctx context.Context, db *fleetv1alpha1.Database) ([]string, error) {
	var members fleetv1alpha1.MemberClusterList
	if err := r.hub.List(ctx, &members); err != nil {
		return nil, fmt.Errorf("listing member clusters: %w", err)
	}
	admitted, _, err := r.admitMembers(ctx, db, members.Items)
	if err != nil {
		return nil, err
	}
	placed, err := placement.Resolve(db, admitted, nil)
	if err != nil {
		return nil, nil //nolint:nilerr // an unresolvable placement placed nothing
	}
	return placed.Targets, nil
}

// settleTeardowns returns the members that still block a teardown, and when
// to look again at the unreachable ones among them.
func (r *databaseReconciler) settleTeardowns(ctx context.Context, s *databaseScope, members map[string]bool) (pending map[string]bool, requeue time.Duration) {
	pending = map[string]bool{}
	skipped := map[string]bool{}
	for name := range members {
		done, wait, noBackup := r.teardownSettled(ctx, s.db, name, s.results[name])
		if !done {
			pending[name] = true
			requeue = minPositive(requeue, wait)
		}
		if noBackup {
			skipped[name] = true
		}
	}
	s.finalBackups = dbstatus.FinalBackupRecords(s.db, s.results, s.targets, members, skipped)
	return pending, requeue
}

// teardownSettled says whether a member no longer blocks the Database's
// teardown: its objects are gone, or it has been unreachable for longer than
// the timeout. wait is when to look again for an unreachable member;
// noBackup reports a member given up as unreachable before the final
// backup its teardown needed was taken there.
func (r *databaseReconciler) teardownSettled(ctx context.Context, db *fleetv1alpha1.Database, name string, res *memberResult) (done bool, wait time.Duration, noBackup bool) {
	if res != nil && res.TornDown {
		return true, 0, false
	}
	h := r.provider.Health(name)
	if !h.Engaged && !r.registered(ctx, name) {
		// The member left the registry: there is nothing left to reach.
		r.recorder.Eventf(db, nil, corev1.EventTypeWarning, fleetv1alpha1.ReasonMemberRemoved, "Teardown", "%s", dbstatus.LeftBehindMessage(db, name))
		r.state.dropResult(client.ObjectKeyFromObject(db), name) // once
		return true, 0, false
	}
	down, _ := r.unreachable(name)
	if !down {
		return false, 0, false
	}
	start := h.Since
	if !db.DeletionTimestamp.IsZero() && db.DeletionTimestamp.After(start) {
		start = db.DeletionTimestamp.Time
	}
	timeout := db.EffectiveUnreachableTimeout()
	if left := timeout - r.now().Sub(start); left > 0 {
		return false, left, false
	}
	// The hub's own record of what to collect on reconnect, and how (the
	// sweep trusts nothing read back from the member). Without the final
	// backup a Required policy asked for, the data there is retained, never
	// deleted on reconnect.
	policy, fbp := db.TeardownPolicy(), dbstatus.FinalBackupFor(db, db.TeardownPolicy())
	noBackup = fbp != fleetv1alpha1.FinalBackupSkip && !backupTaken(db, name, res)
	if noBackup && fbp == fleetv1alpha1.FinalBackupRequired {
		policy = fleetv1alpha1.DeletionPolicyRetain
	}
	var ns corev1.Namespace
	err := r.hub.Get(ctx, client.ObjectKey{Name: db.Namespace}, &ns)
	if err == nil {
		err = r.tombstones.Record(ctx, db, ns.UID, name, policy)
	}
	if err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "recording a tombstone; teardown of the member keeps blocking", "cluster", name)
		return false, teardownPoll, false
	}
	if policy != db.TeardownPolicy() {
		r.recorder.Eventf(db, nil, corev1.EventTypeWarning, "TeardownSkipped", "Teardown",
			"member %s unreachable for longer than %s: no longer blocking; no final backup could be taken there, so its data is retained "+
				"(deletionPolicy Retain) when it reconnects: delete its volume claims by hand once they are not needed", name, timeout)
		return true, 0, noBackup
	}
	r.recorder.Eventf(db, nil, corev1.EventTypeWarning, "TeardownSkipped", "Teardown",
		"member %s unreachable for longer than %s: no longer blocking; its leftovers are removed when it reconnects", name, timeout)
	return true, 0, noBackup
}

// backupTaken: the member's final backup succeeded (status or latest result).
func backupTaken(db *fleetv1alpha1.Database, name string, res *memberResult) bool {
	if res != nil && res.FinalBackup != nil {
		return res.FinalBackup.Phase == fleetv1alpha1.BackupPhaseSucceeded
	}
	rec := dbstatus.BackupRecordFor(db.Status.FinalBackups, name)
	return rec != nil && rec.Phase == fleetv1alpha1.BackupPhaseSucceeded
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

func (r *databaseReconciler) registered(ctx context.Context, name string) bool {
	var mc fleetv1alpha1.MemberCluster
	return r.hub.Get(ctx, client.ObjectKey{Name: name}, &mc) == nil
}

// unreachable reports a member the registry cannot reach now.
func (r *databaseReconciler) unreachable(name string) (bool, string) {
	return r.provider.Health(name).Unreachable()
}

// statusUnreachable is unreachable as the status shows it: see statusHealth.
func (r *databaseReconciler) statusUnreachable(name string) (bool, string) {
	return r.provider.Health(name).StatusUnreachable()
}

func (r *databaseReconciler) reachable(name string) bool {
	down, _ := r.unreachable(name)
	return !down
}
