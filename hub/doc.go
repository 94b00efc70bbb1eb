// Package hub builds fleetdb's hub: a multicluster-runtime manager with the
// cluster registry (package clusters) and the hub's controllers, and the
// public API its binary (cmd/fleetdb-hub) and tests use: Config, NewManager,
// Options and their defaults, leader election, the replica identity.
//
// The controllers live in hub/internal (docs/architecture.md): database (the
// Database controller, the member sync, backups, the sweep and sharding),
// topology (the switchover state machine), queue and tombstones.
package hub
