package topology

import (
	"fmt"
	"time"
)

// Some of what the pass waits on, CloudNativePG publishes only when it
// reconciles the Cluster: an instance's timeline (pg_control_checkpoint()'s,
// which a standby moves only at a restartpoint, up to checkpoint_timeout
// after it replayed a new timeline's checkpoint), and the state of an
// instance it could not read. A restartpoint is no Kubernetes event, and a
// healthy Cluster is reconciled only when something it watches changes
// (ClusterReconciler.SetupWithManager in internal/controller/
// cluster_controller.go, v1.30.0: For(&apiv1.Cluster{}) with no predicate,
// and the operator sets no SyncPeriod, so controller-runtime's 10 hours
// apply). So while the pass waits on such a report it asks for one: the
// member's Cluster is rendered with a new fleetdb.io/report-request value
// (ReportRequest), a Cluster update that makes the operator reconcile it,
// read every instance (GetStatusFromInstances) and publish what it read
// (updateClusterStatusThatRequiresInstancesState).
//
// The requests are spaced out: every reportRequestFast for the first
// reportRequestFastFor of a wait, then every reportRequestSlow until
// reportRequestSlowUntil, then every reportRequestIdle (a member that never
// reports what the pass waits on, such as a diverged fenced one, costs one
// Cluster write and one operator reconcile per reportRequestIdle).
const (
	reportRequestFast      = 10 * time.Second
	reportRequestFastFor   = 2 * time.Minute
	reportRequestSlow      = 30 * time.Second
	reportRequestSlowUntil = 15 * time.Minute
	reportRequestIdle      = 10 * time.Minute
)

// await records that the pass waits, since since, on a report of member m
// that CloudNativePG publishes only when it reconciles m's Cluster.
func (t *Pass) await(m string, since time.Time) {
	if t.Awaited == nil {
		t.Awaited = map[string]time.Time{}
	}
	if prev, ok := t.Awaited[m]; !ok || since.Before(prev) {
		t.Awaited[m] = since
	}
}

// ReportRequest is the fleetdb.io/report-request value of a wait that began
// at since, at now, and how long until the next one: the value changes at
// the spacing above, so each change is one request.
func ReportRequest(since, now time.Time) (string, time.Duration) {
	age := max(now.Sub(since), 0)
	fastRequests := int64(reportRequestFastFor / reportRequestFast)
	slowRequests := int64((reportRequestSlowUntil - reportRequestFastFor) / reportRequestSlow)
	var n int64
	var next time.Duration
	switch {
	case age < reportRequestFastFor:
		n = int64(age / reportRequestFast)
		next = time.Duration(n+1)*reportRequestFast - age
	case age < reportRequestSlowUntil:
		k := int64((age - reportRequestFastFor) / reportRequestSlow)
		n = fastRequests + k
		next = reportRequestFastFor + time.Duration(k+1)*reportRequestSlow - age
	default:
		k := int64((age - reportRequestSlowUntil) / reportRequestIdle)
		n = fastRequests + slowRequests + k
		next = reportRequestSlowUntil + time.Duration(k+1)*reportRequestIdle - age
	}
	return fmt.Sprintf("%d-%d", since.Unix(), n), next
}
