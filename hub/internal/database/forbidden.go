package database

import (
	"context"
	"strings"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	mcreconcile "sigs.k8s.io/multicluster-runtime/pkg/reconcile"

	fleetv1alpha1 "github.com/fleetdb/fleetdb/apis/v1alpha1"
	"github.com/fleetdb/fleetdb/hub/internal/queue"
	"github.com/fleetdb/fleetdb/internal/statusmsg"
	"github.com/fleetdb/fleetdb/member"
)

// A member that refused the hub (403: its RBAC, or its admission policy,
// fleetdb-hub-agent-scope) is tried again for the same Database with a
// capped backoff, forbiddenRetryFirst doubling to forbiddenRetryMax, when
// nothing else changed: what refused it lives in the member, where the hub
// cannot watch it. The hub's member identity may only get a Namespace by
// name (deploy/member/cluster_role.yaml): RBAC can narrow get to named
// objects but not to names that are not known in advance, and list/watch of
// every Namespace would show the hub every namespace of the member and its
// labels, so the label that lets fleetdb into a namespace it did not create
// is noticed by this retry, not by a watch (issue 42, item 7). A new
// generation of the Database, a change of the member's MemberCluster (its
// labels, its spec: what the hub can see) or a reconnect of the member (a
// rotated kubeconfig) retries at once and starts the backoff over.
const (
	forbiddenRetryFirst = 30 * time.Second
	forbiddenRetryMax   = 5 * time.Minute
)

// refusals counts, per member and Database, the member syncs in a row that
// the member refused: the next retry's delay.
type refusals struct {
	mu sync.Mutex
	n  map[string]map[types.NamespacedName]int
}

func newRefusals() *refusals {
	return &refusals{n: map[string]map[types.NamespacedName]int{}}
}

// next records a refusal and returns how long until the next retry.
func (r *refusals) next(cluster string, key types.NamespacedName) time.Duration {
	if r == nil {
		return forbiddenRetryMax
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	m := r.n[cluster]
	if m == nil {
		m = map[types.NamespacedName]int{}
		r.n[cluster] = m
	}
	n := m[key]
	m[key] = n + 1
	return forbiddenDelay(n)
}

// forbiddenDelay is the delay after the n+1-th refusal in a row.
func forbiddenDelay(n int) time.Duration {
	d := forbiddenRetryFirst
	for i := 0; i < n && d < forbiddenRetryMax; i++ {
		d *= 2
	}
	return min(d, forbiddenRetryMax)
}

// clear forgets the refusals of key on cluster: the member let the hub in.
func (r *refusals) clear(cluster string, key types.NamespacedName) {
	if r == nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if m := r.n[cluster]; m != nil {
		delete(m, key)
		if len(m) == 0 {
			delete(r.n, cluster)
		}
	}
}

// reset forgets every refusal on cluster and returns the Databases it had
// refused: they are synced again at once.
func (r *refusals) reset(cluster string) []types.NamespacedName {
	if r == nil {
		return nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []types.NamespacedName
	for key := range r.n[cluster] {
		out = append(out, key)
	}
	delete(r.n, cluster)
	return out
}

// isForbidden reports whether the member's RBAC refused the hub.
func isForbidden(err error) bool { return apierrors.IsForbidden(err) }

// forbiddenOutcome: the member's RBAC or admission policy refused the hub.
// Its result says so, with what to fix (keeping the last observation); the
// sync returns no error (no fast backoff retries) and looks again after the
// capped refusal backoff (see forbiddenRetryFirst).
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
	res.Status.Message = statusmsg.Bound(forbiddenMessage(key.Namespace, err))
	return syncOutcome{outcome: outcomeError, reason: reason, message: err.Error(), result: res, requeue: r.refused.next(cluster, key)}
}

// forbiddenMessage says what refused the hub and what to fix. The text is
// the same at every retry (a changing text would write the status each
// time). A refusal by the member's admission policy because the namespace is
// not one fleetdb manages (it existed before, unlabelled) names the label.
func forbiddenMessage(ns string, err error) string {
	retry := "retried every few minutes (" + forbiddenRetryFirst.String() + " doubling to " + forbiddenRetryMax.String() +
		") and at once when the Database or its MemberCluster changes: "
	if strings.Contains(err.Error(), fleetv1alpha1.LabelManagedNamespace) {
		return "namespace " + ns + " exists in the member but fleetdb does not manage it, so the member's admission policy refuses the hub there: " +
			"label it (kubectl label namespace " + ns + " " + fleetv1alpha1.LabelManagedNamespace + "=" + fleetv1alpha1.ManagedByValue +
			") or, if it holds nothing, delete it and let fleetdb create it; " + retry + statusmsg.RedactAddresses(err.Error())
	}
	return "the member's RBAC or admission policy refused the hub; " + retry + statusmsg.RedactAddresses(err.Error())
}

// owner is whose member objects a teardown of the Database key may touch:
// this hub's, for the plan's Database UID.
func (r *memberSyncReconciler) owner(key types.NamespacedName, p *plan) member.Owner {
	return member.Owner{Namespace: key.Namespace, Name: key.Name, UID: p.uid, HubID: r.opts.HubID}
}

// refusedOnMember maps a change of a MemberCluster to a sync of every
// Database the member refused, its backoff started over: the change may be
// what the member needed (or a person nudging the hub after fixing the member).
func (r *memberSyncReconciler) refusedOnMember(_ context.Context, obj client.Object) []mcreconcile.Request {
	var out []mcreconcile.Request
	for _, key := range r.refused.reset(obj.GetName()) {
		out = append(out, queue.Request(obj.GetName(), key))
	}
	return out
}
