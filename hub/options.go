package hub

import (
	"github.com/fleetdb/fleetdb/hub/internal/database"
	"github.com/fleetdb/fleetdb/hub/internal/sharding"
)

// Options tune the hub's controllers (workers, timeouts, the hub's
// namespace, sharding); the zero value takes the defaults below.
type Options = database.Options

// Defaults of Options.
const (
	// DefaultMemberCallTimeout bounds one member sync (all its API calls).
	DefaultMemberCallTimeout = database.DefaultMemberCallTimeout
	// DefaultDatabaseWorkers is the Database controller's concurrency.
	DefaultDatabaseWorkers = database.DefaultDatabaseWorkers
	// DefaultMemberWorkers is the member sync controller's concurrency.
	DefaultMemberWorkers = database.DefaultMemberWorkers
	// DefaultHubNamespace is where the hub runs.
	DefaultHubNamespace = database.DefaultHubNamespace
)

// Sharding constants the hub's users (tests, dashboards) see: the per-member
// fence Leases are named ShardFencePrefix-<member>, the replicas' peer
// Leases ShardPeerPrefix-<replica>, renewed every ShardPeerRenew; ShardProbe
// is the period of the sharded coordinator's decision loop.
const (
	ShardFencePrefix = sharding.ShardFencePrefix
	ShardPeerPrefix  = sharding.ShardPeerPrefix
	ShardPeerRenew   = sharding.ShardPeerRenew
	ShardProbe       = sharding.ShardProbe
)
