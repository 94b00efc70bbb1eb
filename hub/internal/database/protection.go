package database

import (
	"context"
	"fmt"

	fleetv1alpha1 "github.com/fleetdb/fleetdb/apis/v1alpha1"
	"github.com/fleetdb/fleetdb/hub/internal/dbstatus"
)

// holdProtected keeps a deleted Database whose spec.deletionProtection is
// true from being torn down: nothing is removed from any member, and the
// status says why (Stalled, reason DeletionProtected). The API server refuses
// such a delete already (deploy/hub's ValidatingAdmissionPolicy); this covers
// a hub API server without the policy, and protection set after the delete
// (which the policy refuses too).
// Setting the field to false is a new generation, which reconciles again.
func (r *databaseReconciler) holdProtected(s *databaseScope) bool {
	db := s.db
	if !db.Spec.DeletionProtection {
		return false
	}
	msg := fmt.Sprintf("the Database is being deleted but spec.deletionProtection is true: no member is torn down further while it is set; "+
		"set it to false to let the deletion proceed (deletionPolicy %s)", db.Spec.DeletionPolicy)
	st := dbstatus.Stalled(db, fleetv1alpha1.ReasonDeletionProtected, msg)
	s.status = &st
	return true
}

// holdTeardowns stops the teardowns already under way of a Database that
// holdProtected holds (protection set after the delete, on a hub API server
// without deploy/hub's policy): the plan fanned out with the delete named
// its members for teardown, and their syncs went on with it. The held plan
// tears nothing down: the members it reached become roleHold, whose sync
// reads the Database, finds it deleting and does nothing; the sweep still
// sees them planned (PlannedOn), so it collects nothing either. What a
// teardown removed before the plan changed stays removed. Once protection is
// false, reconcileDelete fans the teardown out again.
func (r *databaseReconciler) holdTeardowns(ctx context.Context, s *databaseScope) {
	prev := r.state.plan(s.key)
	if prev == nil || prev.uid != s.db.UID || len(prev.teardown) == 0 {
		return // nothing fanned out, or held already
	}
	held := map[string]bool{}
	for _, m := range []map[string]bool{prev.targets, prev.teardown} {
		for name := range m {
			held[name] = true
		}
	}
	r.fanOut(ctx, s.key, &plan{uid: s.db.UID, generation: s.db.Generation, policy: prev.policy, targets: held})
}
