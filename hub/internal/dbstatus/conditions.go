package dbstatus

import (
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	fleetv1alpha1 "github.com/fleetdb/fleetdb/apis/v1alpha1"
	"github.com/fleetdb/fleetdb/internal/placement"
	"github.com/fleetdb/fleetdb/internal/statusmsg"
)

// One setter per Database condition. Each reads the tally (or the
// placement) and sets its condition at the status' observedGeneration;
// phaseOf derives the phase from the result.
//
// Reconciling is kstatus' in-progress condition (abnormal-true: present only
// while True, or False beside Stalled); there is no Progressing beside it,
// which would only repeat it.

// SetCondition sets one condition at the status' observedGeneration, with a bounded message.
func SetCondition(st *fleetv1alpha1.DatabaseStatus, condType string, status metav1.ConditionStatus, reason, msg string) {
	meta.SetStatusCondition(&st.Conditions, metav1.Condition{
		Type: condType, Status: status, Reason: reason, Message: statusmsg.Bound(msg), ObservedGeneration: st.ObservedGeneration,
	})
}

// setPlacedCondition: True when placement chose at least one member; the
// message names them, and the named members that are not registered or (when
// nothing was placed) unschedulable.
func setPlacedCondition(st *fleetv1alpha1.DatabaseStatus, p placement.Result) {
	if len(p.Targets) == 0 {
		msg := "placement selects no member cluster"
		if len(p.Missing) > 0 {
			msg += "; not registered: " + names(p.Missing)
		}
		if len(p.Cordoned) > 0 {
			msg += "; unschedulable: " + names(p.Cordoned)
		}
		if len(p.Drained) > 0 {
			msg += "; draining: " + names(p.Drained)
		}
		SetCondition(st, fleetv1alpha1.ConditionPlaced, metav1.ConditionFalse, fleetv1alpha1.ReasonNoMatchingClusters, msg)
		return
	}
	msg := fmt.Sprintf("placed on %d member(s): %s", len(p.Targets), names(p.Targets))
	if len(p.Missing) > 0 {
		msg += "; not registered: " + names(p.Missing)
	}
	if len(p.DrainHeld) > 0 {
		msg += "; draining but kept (primary: switch it over first): " + names(p.DrainHeld)
	}
	if len(p.PrimaryHeld) > 0 {
		SetCondition(st, fleetv1alpha1.ConditionPlaced, metav1.ConditionTrue, fleetv1alpha1.ReasonPrimaryHeld, fmt.Sprintf(
			"%s; member(s) %s left the placement but hold the primary: kept, nothing is torn down there; "+
				"switch over first (set spec.topology.primaryCluster to another placed member), then the removal proceeds",
			msg, names(p.PrimaryHeld)))
		return
	}
	SetCondition(st, fleetv1alpha1.ConditionPlaced, metav1.ConditionTrue, fleetv1alpha1.ReasonPlaced, msg)
}

// setDegradedCondition: True while a member is unreachable, conflicted or
// failing; the message names which.
func setDegradedCondition(st *fleetv1alpha1.DatabaseStatus, t memberTally) {
	if problems := t.problems(); len(problems) > 0 {
		SetCondition(st, fleetv1alpha1.ConditionDegraded, metav1.ConditionTrue, fleetv1alpha1.ReasonMembersDegraded, strings.Join(problems, "; "))
		return
	}
	SetCondition(st, fleetv1alpha1.ConditionDegraded, metav1.ConditionFalse, fleetv1alpha1.ReasonAsExpected, "no member is degraded")
}

// setReadyCondition: the summary, True only when every placed member runs
// the current generation with all replicas ready.
func setReadyCondition(st *fleetv1alpha1.DatabaseStatus, t memberTally) {
	gen, targets := st.ObservedGeneration, len(t.targets)
	switch {
	case t.deleting:
		SetCondition(st, fleetv1alpha1.ConditionReady, metav1.ConditionFalse, fleetv1alpha1.ReasonTeardown, "the Database is being deleted")
	case t.allReady():
		SetCondition(st, fleetv1alpha1.ConditionReady, metav1.ConditionTrue, fleetv1alpha1.ReasonReady,
			fmt.Sprintf("generation %d is ready on all %d member(s)", gen, targets))
	case targets == 0:
		SetCondition(st, fleetv1alpha1.ConditionReady, metav1.ConditionFalse, fleetv1alpha1.ReasonNoMatchingClusters, "no member cluster is placed")
	default:
		SetCondition(st, fleetv1alpha1.ConditionReady, metav1.ConditionFalse, fleetv1alpha1.ReasonProgressing,
			fmt.Sprintf("%d of %d member(s) ready on generation %d", len(t.ready), targets, gen))
	}
}

// setReconcilingCondition: True while placed members move to the current
// generation or dropped ones are being removed (reason RollingOut while the
// rollout holds some back); removed otherwise. The Progressing condition of
// earlier versions, which repeated it, is removed too.
func setReconcilingCondition(st *fleetv1alpha1.DatabaseStatus, t memberTally) {
	meta.RemoveStatusCondition(&st.Conditions, fleetv1alpha1.ConditionProgressing)
	targets := len(t.targets)
	if t.allReady() || t.deleting || targets == 0 || len(t.progressing)+len(t.teardown) == 0 {
		meta.RemoveStatusCondition(&st.Conditions, fleetv1alpha1.ConditionReconciling)
		return
	}
	reason := fleetv1alpha1.ReasonProgressing
	if t.allowed < targets {
		reason = fleetv1alpha1.ReasonRollingOut
	}
	msg := fmt.Sprintf("moving to generation %d: %s", st.ObservedGeneration, names(t.progressing))
	if len(t.teardown) > 0 {
		msg += "; removing from: " + names(t.teardown)
	}
	SetCondition(st, fleetv1alpha1.ConditionReconciling, metav1.ConditionTrue, reason, msg)
}

// setDeletingCondition: True while the Database is being torn down, naming
// the members it is still being removed from.
func setDeletingCondition(st *fleetv1alpha1.DatabaseStatus, t memberTally) {
	if !t.deleting {
		meta.RemoveStatusCondition(&st.Conditions, fleetv1alpha1.ConditionDeleting)
		return
	}
	SetCondition(st, fleetv1alpha1.ConditionDeleting, metav1.ConditionTrue, fleetv1alpha1.ReasonTeardown,
		"removing the Database from: "+names(t.teardown))
}

// setStalledCondition marks a terminal error that retrying cannot fix:
// Stalled True, and Ready and Reconciling False with the same reason.
func setStalledCondition(st *fleetv1alpha1.DatabaseStatus, reason, msg string) {
	SetCondition(st, fleetv1alpha1.ConditionStalled, metav1.ConditionTrue, reason, msg)
	SetCondition(st, fleetv1alpha1.ConditionReady, metav1.ConditionFalse, reason, msg)
	SetCondition(st, fleetv1alpha1.ConditionReconciling, metav1.ConditionFalse, reason, "retrying cannot fix this; change the Database")
}

// clearStalledCondition: Stalled is set only by the pass that met the
// terminal error; a later pass that got through has none.
func clearStalledCondition(st *fleetv1alpha1.DatabaseStatus) {
	meta.RemoveStatusCondition(&st.Conditions, fleetv1alpha1.ConditionStalled)
}

// phaseOf is the one place the Database's phase comes from: its conditions.
func phaseOf(conds []metav1.Condition) fleetv1alpha1.Phase {
	switch {
	case meta.IsStatusConditionTrue(conds, fleetv1alpha1.ConditionDeleting):
		return fleetv1alpha1.PhaseDeleting
	case meta.IsStatusConditionTrue(conds, fleetv1alpha1.ConditionStalled):
		return fleetv1alpha1.PhaseFailed
	case meta.IsStatusConditionTrue(conds, fleetv1alpha1.ConditionReady):
		return fleetv1alpha1.PhaseReady
	case meta.IsStatusConditionTrue(conds, fleetv1alpha1.ConditionDegraded):
		return fleetv1alpha1.PhaseDegraded
	case meta.IsStatusConditionFalse(conds, fleetv1alpha1.ConditionPlaced):
		return fleetv1alpha1.PhasePending
	}
	return fleetv1alpha1.PhaseProvisioning
}

// Stalled is the status of a Database that cannot be acted on: the
// current one with the Stalled condition set.
func Stalled(db *fleetv1alpha1.Database, reason, msg string) fleetv1alpha1.DatabaseStatus {
	st := *db.Status.DeepCopy()
	if st.ObservedGeneration != db.Generation {
		// The recorded change trace is an earlier generation's: kept with
		// the new observedGeneration, it would stand for this generation's
		// change once the stall clears without a spec edit (a member
		// admitting the namespace), and explain would name the wrong trace.
		st.LastChangeTraceID = ""
	}
	st.ObservedGeneration = db.Generation
	setStalledCondition(&st, reason, msg)
	st.Phase = phaseOf(st.Conditions)
	return st
}

// Waiting is the status of a Database that waits for something outside
// it (not Stalled: it goes on by itself once that is there).
func Waiting(db *fleetv1alpha1.Database, reason, msg string) fleetv1alpha1.DatabaseStatus {
	st := *db.Status.DeepCopy()
	gen := db.Generation
	if st.Phase == "" || st.Phase == fleetv1alpha1.PhaseFailed {
		st.Phase = fleetv1alpha1.PhasePending
	}
	for _, c := range []metav1.Condition{
		{Type: fleetv1alpha1.ConditionReady, Status: metav1.ConditionFalse, Reason: reason, Message: statusmsg.Bound(msg)},
		{Type: fleetv1alpha1.ConditionReconciling, Status: metav1.ConditionTrue, Reason: reason, Message: statusmsg.Bound(msg)},
		{Type: fleetv1alpha1.ConditionStalled, Status: metav1.ConditionFalse, Reason: reason, Message: "waiting; not terminal"},
	} {
		c.ObservedGeneration = gen
		meta.SetStatusCondition(&st.Conditions, c)
	}
	return st
}
