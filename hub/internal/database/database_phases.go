package database

import (
	"context"
	"errors"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"

	fleetv1alpha1 "github.com/fleetdb/fleetdb/apis/v1alpha1"
	"github.com/fleetdb/fleetdb/hub/internal/dbstatus"
	"github.com/fleetdb/fleetdb/hub/internal/queue"
	"github.com/fleetdb/fleetdb/internal/placement"
	"github.com/fleetdb/fleetdb/internal/telemetry"
)

// reconcilePlacement resolves which members the Database is placed on. A
// placement that cannot be resolved (a selector the CRD could not check)
// stalls the Database.
func (r *databaseReconciler) reconcilePlacement(ctx context.Context, s *databaseScope) (ctrl.Result, error) {
	var members fleetv1alpha1.MemberClusterList
	if err := r.hub.List(ctx, &members); err != nil {
		return ctrl.Result{}, fmt.Errorf("listing member clusters: %w", err)
	}
	admitted, denied, err := r.admitMembers(ctx, s.db, members.Items)
	if err != nil {
		return ctrl.Result{}, err
	}
	if len(denied) > 0 {
		return ctrl.Result{}, s.stall(fleetv1alpha1.ReasonNamespaceNotAllowed, errors.New(placement.NotAllowedMessage(s.db, denied)))
	}
	current := placement.CurrentMembers(s.db)
	placed, err := placement.Resolve(s.db, admitted, current)
	if err != nil {
		return ctrl.Result{}, s.stall(fleetv1alpha1.ReasonInvalidSpec, err)
	}
	// A member leaving the placement by any way but a MemberCluster's
	// deletion keeps the primary until it is switched over.
	placed = placement.HoldPrimary(s.db, placed, members.Items, current)
	s.placement, s.targets = placed, setOf(placed.Targets)
	return ctrl.Result{}, nil
}

// reconcileDroppedMembers accounts for members in the status (or with
// results) that are no longer placed: they are torn down. One whose teardown
// is done, or that stayed unreachable past the timeout, leaves the status
// (its leftovers are collected on reconnect).
func (r *databaseReconciler) reconcileDroppedMembers(ctx context.Context, s *databaseScope) (ctrl.Result, error) {
	s.results = r.state.resultsFor(s.key)
	dropped := map[string]bool{}
	for _, c := range s.db.Status.Clusters {
		if !s.targets[c.Name] {
			dropped[c.Name] = true
		}
	}
	for name, res := range s.results {
		if !s.targets[name] && !res.TornDown {
			dropped[name] = true
		}
	}
	// A member that left the registry is not torn down (it cannot be): it
	// moves to status.leftBehind.
	s.leftRegistry = r.membersLeftRegistry(ctx, s.db, dropped, s.results)
	pending, requeue := r.settleTeardowns(ctx, s, dropped)
	for name := range dropped {
		if !pending[name] {
			r.state.dropResult(s.key, name)
			delete(s.results, name)
		}
	}
	s.teardown = pending
	return ctrl.Result{RequeueAfter: requeue}, nil
}

// reconcileRollout decides which targets may run the current generation
// and publishes the plan to the member syncs.
func (r *databaseReconciler) reconcileRollout(ctx context.Context, s *databaseScope) (ctrl.Result, error) {
	var prevAllowed map[string]bool
	if prev := r.state.plan(s.key); prev != nil && prev.uid == s.db.UID && prev.generation == s.db.Generation {
		prevAllowed = prev.allowed
	}
	s.allowed = planRollout(s.db, s.placement.Targets, s.results, prevAllowed, r.reachable)
	maintenance, err := r.nodeMaintenance(ctx, s.db, s.placement.Targets)
	if err != nil {
		return ctrl.Result{}, err
	}
	r.fanOut(ctx, s.key, &plan{
		uid:             s.db.UID,
		generation:      s.db.Generation,
		policy:          s.db.TeardownPolicy(), // spec.teardown.onPlacementRemoval
		allowed:         s.allowed,
		targets:         s.targets,
		teardown:        s.teardown,
		credentials:     s.credentials,
		absentSecrets:   s.absentSecrets,
		finalBackup:     newFinalBackupPlan(s.db, s.db.TeardownPolicy(), s.teardown),
		topology:        s.topology,
		instanceTLS:     s.instanceTLS,
		roles:           topologyRoles(s.db, s.placement.Targets, s.topology),
		nodeMaintenance: maintenance,
		rotationHeld:    rotationHeldMembers(s.db, s.credentials, s.placement.Targets, s.results),
		adopt:           types.UID(s.db.Annotations[fleetv1alpha1.AnnotationAdoptCredentials]),
	})
	return ctrl.Result{}, nil
}

// reconcileStatus folds the member results into the status written at the
// end, and records an Event for each member transition worth a human's eye.
func (r *databaseReconciler) reconcileStatus(_ context.Context, s *databaseScope) (ctrl.Result, error) {
	st := dbstatus.Compute(dbstatus.Input{
		DB:          s.db,
		Placement:   s.placement,
		Teardown:    sortedKeys(s.teardown),
		Allowed:     s.allowed,
		Results:     s.results,
		Unreachable: r.statusUnreachable,
		Now:         r.now(),

		ChangeTraceID: telemetry.TraceIDOf(r.state.plan(s.key).traceparentOrEmpty()),
	})
	st.LeftBehind = dbstatus.LeftBehind(s.db, s.leftRegistry, s.targets, r.now())
	st.FinalBackups = s.finalBackups
	dbstatus.SetFinalBackupCondition(&st, s.db, s.teardown)
	r.finalBackupEvents(s.db, st.FinalBackups)
	s.rotation.apply(&st)
	if s.topologyPass != nil {
		s.topologyPass.Apply(&st)
	}
	dbstatus.ApplyRestore(&st, s.db, s.results, s.placement.Targets)
	r.memberEvents(s.db, st)
	s.status = &st
	return ctrl.Result{}, nil
}

// fanOut publishes the plan and wakes the member syncs it gives new work
// to, ahead of observation work. A member whose role did not change is not
// woken: its own objects' events, its errors' retries and the registry
// (reconnects) wake it, so that status refreshes do not fan out again.
func (r *databaseReconciler) fanOut(ctx context.Context, key types.NamespacedName, p *plan) {
	prev := r.state.plan(key)
	r.publish(ctx, key, p)
	if r.shard != nil {
		r.publishPlacements(ctx, key, p)
	}
	for _, name := range p.changedMembers(prev) {
		r.members.AddWith(name, key, queue.PriorityChange, 0)
	}
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
