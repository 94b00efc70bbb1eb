package hub

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/client-go/tools/record"

	"github.com/fleetdb/fleetdb/hub/internal/database"
)

// Leader election: every replica starts its caches and health endpoints; only
// the one holding the Lease LeaderElectionID in the hub namespace runs the
// controllers and the cluster registry (every Runnable the hub adds needs
// leader election), so a standby writes nothing to the hub or to a member.
const (
	// LeaderElectionID is the name of the hub's Lease in the hub namespace
	// (deploy/rbac/leader_election_role.yaml grants exactly that one).
	LeaderElectionID = "fleetdb-hub.fleetdb.io"
	// DefaultLeaseDuration, DefaultRenewDeadline and DefaultRetryPeriod
	// bound a takeover to about 20 s: a standby counts the lease duration
	// from the last change of the Lease it saw and polls every retry period
	// plus up to 120 % jitter, so it takes over within the lease duration
	// plus two polls (12 + 2 x 3.3 s), and then connects to the members.
	// (controller-runtime's 15 s / 10 s / 2 s reach 24 s.) The leader renews
	// every 1.5 s: one small write to the hub API server.
	DefaultLeaseDuration = 12 * time.Second
	DefaultRenewDeadline = 8 * time.Second
	DefaultRetryPeriod   = 1500 * time.Millisecond
	// leaseJitter is client-go's JitterFactor: a renewal must fit retries.
	leaseJitter = 1.2
)

// LeaderElection tunes the election of the acting hub replica.
type LeaderElection struct {
	// Enabled turns leader election on.
	Enabled bool
	// LeaseDuration is how long a standby waits, from the last renewal it
	// saw, before it takes the Lease; RenewDeadline is how long the leader
	// keeps trying to renew before it gives up (and exits); RetryPeriod is
	// the interval of both. Zero values take the Default* constants.
	LeaseDuration, RenewDeadline, RetryPeriod time.Duration
}

func (l LeaderElection) withDefaults() LeaderElection {
	l.LeaseDuration = database.PositiveOr(l.LeaseDuration, DefaultLeaseDuration)
	l.RenewDeadline = database.PositiveOr(l.RenewDeadline, DefaultRenewDeadline)
	l.RetryPeriod = database.PositiveOr(l.RetryPeriod, DefaultRetryPeriod)
	return l
}

// validate fails early on durations client-go's elector would refuse at start.
func (l LeaderElection) validate() error {
	switch {
	case l.LeaseDuration <= l.RenewDeadline:
		return fmt.Errorf("leader election: the lease duration (%s) must be longer than the renew deadline (%s)", l.LeaseDuration, l.RenewDeadline)
	case float64(l.RenewDeadline) <= leaseJitter*float64(l.RetryPeriod):
		return fmt.Errorf("leader election: the renew deadline (%s) must be longer than %.1f times the retry period (%s)", l.RenewDeadline, leaseJitter, l.RetryPeriod)
	}
	return nil
}

// NewReplicaID returns a replica's identity: name (default: the host name,
// a Pod's name in a Deployment) and a random suffix, so that two processes
// never share it (two holders of one identity would both act). It is the
// Lease's holderIdentity and part of every user agent the replica sends, so
// an API server's audit log tells which replica wrote what.
func NewReplicaID(name string) (string, error) {
	if name == "" {
		var err error
		if name, err = os.Hostname(); err != nil {
			return "", fmt.Errorf("replica name: %w", err)
		}
	}
	return name + "_" + string(uuid.NewUUID()), nil
}

// UserAgent is the user agent of every hub and member client of a replica:
// "fleetdb-hub/<version> (<replica id>)".
func UserAgent(version, replicaID string) string {
	if version == "" {
		version = "dev"
	}
	return fmt.Sprintf("fleetdb-hub/%s (%s)", version, replicaID)
}

// newLeaseLock is controller-runtime's Lease lock with the replica's own
// identity (controller-runtime would make up one that no log or user agent
// shows). Its client's timeout stays under the renew deadline, so one hung
// request does not cost the lease; its Events ("<id> became leader", "...
// stopped leading") go to the hub namespace until shortly after ctx ends.
func newLeaseLock(ctx context.Context, cfg *rest.Config, namespace, identity string, le LeaderElection) (resourcelock.Interface, error) {
	if identity == "" {
		return nil, errors.New("leader election: no replica identity")
	}
	lc := rest.AddUserAgent(rest.CopyConfig(cfg), "leader-election")
	lc.Timeout = max(le.RenewDeadline/2, time.Second)
	cs, err := kubernetes.NewForConfig(lc)
	if err != nil {
		return nil, fmt.Errorf("leader election client: %w", err)
	}
	broadcaster := record.NewBroadcaster()
	broadcaster.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: cs.CoreV1().Events(namespace)})
	go func() {
		// The lease is released, and that recorded, after ctx ends.
		<-ctx.Done()
		time.Sleep(lc.Timeout)
		broadcaster.Shutdown()
	}()
	recorder := broadcaster.NewRecorder(clientgoscheme.Scheme, corev1.EventSource{Component: identity})
	return resourcelock.New(resourcelock.LeasesResourceLock, namespace, LeaderElectionID, cs.CoreV1(), cs.CoordinationV1(),
		resourcelock.ResourceLockConfig{Identity: identity, EventRecorder: recorder})
}
