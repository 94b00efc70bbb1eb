package clusters

import (
	"context"
	"slices"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/cluster"

	fleetv1alpha1 "github.com/fleetdb/fleetdb/apis/v1alpha1"
)

// Messages of the conditions that hold no problem; fixed so that they never
// cause a status write on their own.
const (
	messageJoined     = "the hub is connected to the member's API server"
	messageReady      = "the member's /readyz answers ok"
	messageConnecting = "the hub is connecting to the member's API server"
)

// failure is a classified problem: a condition reason and a human message.
type failure struct {
	reason, message string
}

// condition is the part of a metav1.Condition the provider decides.
type condition struct {
	status  metav1.ConditionStatus
	reason  string
	message string
}

// view is what the provider believes about a member: the source of both
// MemberCluster.status and Health.
type view struct {
	joined, ready condition
	version       string
	backends      []fleetv1alpha1.Backend
	engaged       bool
	lastProbe     time.Time
	// clusterID is the member cluster's identity (kube-system uid).
	clusterID string
}

// member is one MemberCluster the provider knows.
type member struct {
	name string
	// created is the MemberCluster's creationTimestamp: of two
	// registrations of one cluster the older is used (sameCluster).
	created time.Time
	// recordedID is the cluster identity in the MemberCluster's status
	// (a run's own reading takes precedence): after a hub restart, the
	// registration in use is known before it connects again.
	recordedID string
	// hash is the sha256 of the kubeconfig bytes last acted on; "" when the
	// Secret or its key is missing.
	hash string
	// problem says why there is no run: Secret missing or kubeconfig invalid.
	problem *failure
	// run lives as long as the member's kubeconfig stays the same.
	run *run
	// view and health are the last computed view and its Health.
	view   view
	health Health
}

// run is one member kubeconfig's lifetime: cancelling ctx disengages the
// member's cluster and stops its prober and any connect in flight.
type run struct {
	ctx    context.Context
	cancel context.CancelFunc
	cfg    *rest.Config
	prober rest.Interface

	// pending is the cluster a connect in flight created; cl the engaged one.
	pending cluster.Cluster
	cl      cluster.Cluster
	// clCancel ends the engaged cluster alone (when it dies under us).
	clCancel context.CancelFunc

	connecting  bool
	connectErr  *failure
	attempts    int
	nextAttempt time.Time

	lastProbe    time.Time
	lastProbeOK  bool
	failingSince time.Time
	probeErr     *failure
	version      string
	backends     []fleetv1alpha1.Backend
	// clusterID is the identity the last connect read (kube-system uid).
	clusterID string
}

// computeView derives the member's conditions from its state at now.
//
// Joined is True while the cluster is engaged; False with the reason of the
// config problem or of the last failed connect; Unknown while the first
// connect with the current kubeconfig is in flight. Ready is Joined and the
// probes passing, where an engaged member keeps Ready=True until its probes
// have failed for grace.
func (m *member) computeView(now time.Time, grace time.Duration) view {
	var v view
	r := m.run
	if r != nil {
		v.version, v.lastProbe, v.engaged, v.backends, v.clusterID = r.version, r.lastProbe, r.cl != nil, r.backends, r.clusterID
	}
	switch {
	case m.problem != nil:
		c := condition{status: metav1.ConditionFalse, reason: m.problem.reason, message: m.problem.message}
		v.joined, v.ready = c, c
	case r == nil:
		c := condition{status: metav1.ConditionUnknown, reason: fleetv1alpha1.ReasonConnecting, message: messageConnecting}
		v.joined, v.ready = c, c
	case r.cl != nil:
		v.joined = condition{status: metav1.ConditionTrue, reason: fleetv1alpha1.ReasonJoined, message: messageJoined}
		v.ready = condition{status: metav1.ConditionTrue, reason: fleetv1alpha1.ReasonProbeSucceeded, message: messageReady}
		if r.probeErr != nil && !r.failingSince.IsZero() && now.Sub(r.failingSince) >= grace {
			v.ready = condition{status: metav1.ConditionFalse, reason: r.probeErr.reason, message: r.probeErr.message}
		}
	case r.connectErr != nil:
		c := condition{status: metav1.ConditionFalse, reason: r.connectErr.reason, message: r.connectErr.message}
		v.joined, v.ready = c, c
	default:
		c := condition{status: metav1.ConditionUnknown, reason: fleetv1alpha1.ReasonConnecting, message: messageConnecting}
		v.joined, v.ready = c, c
	}
	return v
}

// refresh recomputes the member's view and Health at now. It reports whether
// the status-relevant part changed (the MemberCluster needs a reconcile) and
// whether subscribers must hear of it (engaged or Ready changed, or a
// first failed connect: see known).
func (m *member) refresh(now time.Time, grace time.Duration) (statusChanged, notify bool) {
	v := m.computeView(now, grace)
	old := m.view
	backendsChanged := !slices.Equal(v.backends, old.backends)
	statusChanged = v.joined != old.joined || v.ready != old.ready || v.version != old.version || backendsChanged || v.clusterID != old.clusterID
	wasReady, isReady := old.ready.status == metav1.ConditionTrue, v.ready.status == metav1.ConditionTrue
	// Leaving "not known yet" (the first connect failed) is news too: a
	// hub that just started shows the members it has not reached yet as
	// they were last reported, until it knows better.
	notify = v.engaged != old.engaged || wasReady != isReady || backendsChanged || known(old) != known(v)
	since := m.health.Since
	if since.IsZero() || wasReady != isReady {
		since = now
	}
	m.view = v
	m.health = Health{
		Engaged:   v.engaged,
		Ready:     isReady,
		Reason:    v.ready.reason,
		Message:   tenantMessage(v.ready),
		Since:     since,
		LastProbe: v.lastProbe,
		Backends:  v.backends,
	}
	return statusChanged, notify
}

// known reports a view that says something of the member: not the zero
// view, not Connecting.
func known(v view) bool {
	return v.ready.reason != "" && v.ready.reason != fleetv1alpha1.ReasonConnecting
}

// backoff is the delay before connect attempt n+1 after n failed attempts.
func backoff(attempts int) time.Duration {
	if attempts < 1 {
		return 0
	}
	d := connectBackoffBase
	for i := 1; i < attempts && d < connectBackoffMax; i++ {
		d *= 2
	}
	return min(d, connectBackoffMax)
}
