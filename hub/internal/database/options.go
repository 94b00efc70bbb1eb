package database

import (
	"cmp"
	"slices"
	"time"

	"github.com/fleetdb/fleetdb/hub/internal/sharding"
)

// Defaults of Options.
const (
	// DefaultMemberCallTimeout bounds one member sync (all its API calls).
	DefaultMemberCallTimeout = 15 * time.Second
	// DefaultDatabaseWorkers is the Database controller's concurrency. A
	// reconcile mostly waits on one or two hub round trips, so a burst of new
	// Databases wants many at once.
	DefaultDatabaseWorkers = 16
	// DefaultMemberWorkers is the member sync controller's concurrency. Member
	// syncs are bounded by DefaultMemberCallTimeout, so a dead member holds a
	// worker for at most that long, and only when its probe still says Ready;
	// and one member holds at most a quarter of the workers, and beyond its
	// first sync only while fewer than half are busy (memberLimiter), so a
	// few slow members leave workers to the others.
	DefaultMemberWorkers = 32
	// DefaultHubNamespace is where the hub runs.
	DefaultHubNamespace = "fleetdb-system"
	// hubReconcileTimeout bounds one Database reconcile (hub calls only).
	hubReconcileTimeout = 30 * time.Second
	// statusCoalesceDelay lets the member results of one change (members
	// turning Ready together) fold into one status write.
	statusCoalesceDelay = 50 * time.Millisecond
	// progressCoalesceDelay folds progress within a phase (ready replicas
	// counting up, messages) into fewer status writes; a phase change still
	// goes out after statusCoalesceDelay.
	progressCoalesceDelay = 500 * time.Millisecond
	// teardownPoll is how often a teardown that waits for objects to go is retried.
	teardownPoll = 2 * time.Second
)

// alwaysProtected are namespaces fleetdb never manages Databases in.
var alwaysProtected = []string{"kube-system", "kube-public", "kube-node-lease"}

// Options configure the hub controllers. Zero values take the defaults.
type Options struct {
	// HubNamespace is the hub's own namespace; Databases there are refused.
	HubNamespace string
	// MemberCallTimeout bounds one member sync.
	MemberCallTimeout time.Duration
	// DatabaseWorkers and MemberWorkers are the controllers' concurrency.
	DatabaseWorkers, MemberWorkers int
	// ImageRepository overrides the engines' image repository (air-gapped fleets).
	ImageRepository string
	// HubID is the hub identity stamped on every member object (LabelHubID).
	// Empty: NewManager reads it from, or generates it into, the
	// HubIdentityConfigMap of the hub namespace. Tests set it to run two hubs.
	HubID string
	// Sharding spreads the members over the hub replicas (--sharding;
	// docs/sharding.md): each member is synced by the replica holding its
	// fence Lease; the elected leader stays the one writer of Database
	// status. Off: the single-leader hub.
	Sharding bool
	// shards is the sharded coordinator NewManager built (Sharding only).
	shards *sharding.Coordinator
}

// WithDefaults fills what is unset with the defaults.
func (o Options) WithDefaults() Options {
	o.HubNamespace = cmp.Or(o.HubNamespace, DefaultHubNamespace)
	o.MemberCallTimeout = PositiveOr(o.MemberCallTimeout, DefaultMemberCallTimeout)
	o.DatabaseWorkers = PositiveOr(o.DatabaseWorkers, DefaultDatabaseWorkers)
	o.MemberWorkers = PositiveOr(o.MemberWorkers, DefaultMemberWorkers)
	return o
}

// PositiveOr is v, or def when v is not positive.
func PositiveOr[T int | time.Duration](v, def T) T {
	if v <= 0 {
		return def
	}
	return v
}

func (o Options) protected(namespace string) bool {
	return namespace == o.HubNamespace || slices.Contains(alwaysProtected, namespace)
}
