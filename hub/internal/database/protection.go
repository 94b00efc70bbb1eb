package database

import (
	"fmt"

	fleetv1alpha1 "github.com/fleetdb/fleetdb/apis/v1alpha1"
)

// holdProtected keeps a deleted Database whose spec.deletionProtection is
// true from being torn down: nothing is removed from any member, and the
// status says why (Stalled, reason DeletionProtected). The API server refuses
// such a delete already (deploy/hub's ValidatingAdmissionPolicy); this covers
// a hub API server without the policy, and protection set after the delete.
// Setting the field to false is a new generation, which reconciles again.
func (r *databaseReconciler) holdProtected(s *databaseScope) bool {
	db := s.db
	if !db.Spec.DeletionProtection {
		return false
	}
	msg := fmt.Sprintf("the Database is being deleted but spec.deletionProtection is true: nothing is torn down in any member; "+
		"set it to false to let the deletion proceed (deletionPolicy %s)", db.Spec.DeletionPolicy)
	st := stalledStatus(db, fleetv1alpha1.ReasonDeletionProtected, msg)
	s.status = &st
	return true
}
