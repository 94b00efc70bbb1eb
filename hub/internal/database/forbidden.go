package database

import (
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"

	fleetv1alpha1 "github.com/fleetdb/fleetdb/apis/v1alpha1"
	"github.com/fleetdb/fleetdb/internal/statusmsg"
	"github.com/fleetdb/fleetdb/member"
)

// forbiddenRecheck is how often a member that refused the hub (403) is tried
// again for the same Database when nothing else changed: RBAC changes in a
// member are not watched, so this is how they are noticed; no retry storm.
// A new generation of the Database, or a reconnect of the member (a rotated
// kubeconfig), syncs it at once.
const forbiddenRecheck = 5 * time.Minute

// isForbidden reports whether the member's RBAC refused the hub.
func isForbidden(err error) bool { return apierrors.IsForbidden(err) }

// forbiddenOutcome: the member's RBAC refused the hub. That is terminal for
// the member: its result says so (keeping the last observation), the sync
// returns no error (no backoff retries) and looks again only after
// forbiddenRecheck (RBAC changes inside a member cannot be watched).
func (r *memberSyncReconciler) forbiddenOutcome(key types.NamespacedName, cluster, reason string, err error, phase fleetv1alpha1.ClusterPhase) syncOutcome {
	if r.secrets != nil {
		// The refusal may be of a Secret: the next sync checks the Secret
		// role's binding in the namespace again (the member's admins may
		// have removed it).
		r.secrets.forget(cluster, key.Namespace)
	}
	res := &memberResult{Status: fleetv1alpha1.ClusterStatus{Name: cluster}}
	if prev := r.state.resultsFor(key)[cluster]; prev != nil {
		res.Status, res.HasWorkload = prev.Status, prev.HasWorkload
	}
	res.Status.Phase = phase
	res.Status.Reason = fleetv1alpha1.ReasonForbidden
	res.Status.Message = statusmsg.Bound("the member's RBAC refused the hub (not retried until the Database or the member's registration changes): " + err.Error())
	return syncOutcome{outcome: outcomeError, reason: reason, message: err.Error(), result: res, requeue: forbiddenRecheck}
}

// owner is whose member objects a teardown of the Database key may touch:
// this hub's, for the plan's Database UID.
func (r *memberSyncReconciler) owner(key types.NamespacedName, p *plan) member.Owner {
	return member.Owner{Namespace: key.Namespace, Name: key.Name, UID: p.uid, HubID: r.opts.HubID}
}
