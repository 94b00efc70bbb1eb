package database

import (
	"time"

	fleetv1alpha1 "github.com/fleetdb/fleetdb/apis/v1alpha1"
	"github.com/fleetdb/fleetdb/internal/statusmsg"
	"github.com/fleetdb/fleetdb/member"
)

// syncOutcome is what the work of a member sync did. The envelope
// (memberSyncReconciler.Reconcile) records result for the Database
// controller, and outcome, reason, message and applied on the metrics and
// the span, once.
type syncOutcome struct {
	// outcome is one of the outcome* constants; "" is outcomeSkipped
	// (nothing to do: the plan is stale or the Database gone).
	outcome string
	// reason is the fleetdb_member_sync_errors_total reason; "" counts no error.
	reason string
	// message says why a sync that returns no error still failed.
	message string
	// result is recorded for the Database controller; nil records nothing.
	result *memberResult
	// applied is what member.Apply wrote.
	applied member.ApplyResult
	// requeue and err are what Reconcile returns.
	requeue time.Duration
	err     error
}

// finished: the work ended with outcome and observed result.
func finished(outcome string, result *memberResult) syncOutcome {
	return syncOutcome{outcome: outcome, result: result}
}

// unreachableOutcome: the member could not be reached; that is recorded,
// not retried (the registry wakes the sync when the member is back).
func unreachableOutcome(cluster, msg string) syncOutcome {
	return syncOutcome{
		outcome: outcomeUnreachable, reason: errReasonUnreachable, message: msg,
		result: &memberResult{
			Status:      fleetv1alpha1.ClusterStatus{Name: cluster, Phase: fleetv1alpha1.ClusterPhaseUnreachable, Message: statusmsg.Bound(msg)},
			Unreachable: true,
		},
	}
}

// conflictOutcome: an object fleetdb does not own blocks the member.
func conflictOutcome(cluster string, conflict *member.ConflictError) syncOutcome {
	return syncOutcome{
		outcome: outcomeConflict, reason: errReasonConflict, message: conflict.Error(),
		result: &memberResult{Status: fleetv1alpha1.ClusterStatus{
			Name: cluster, Phase: fleetv1alpha1.ClusterPhaseConflict, Message: statusmsg.Bound(conflict.Error()),
		}, HasWorkload: true},
	}
}

// failedOutcome: the sync returns err (and is retried with backoff); reason
// is the step that failed, unless the error says the member could not be
// reached. result, when not nil, is recorded.
func failedOutcome(reason string, err error, result *memberResult) syncOutcome {
	return syncOutcome{outcome: outcomeError, reason: errorReason(reason, err), result: result, err: err}
}

// errorReason is reason, or errReasonUnreachable when err says the member
// could not be reached.
func errorReason(reason string, err error) string {
	if isUnreachable(err) {
		return errReasonUnreachable
	}
	return reason
}
