// Package sharding is what a sharded hub (--sharding, docs/sharding.md)
// adds below the controllers: the coordinator (Coordinator: which members
// this replica owns, by rendezvous hashing, multicluster-runtime's sharder,
// and by their fence Leases, valid while their holder's peer Lease is),
// the replicas' peer Leases, the multicluster manager
// built on them (NewMCManager), and the persisted placements the leader
// writes and the members' owners report on (Placements). The Database
// controller's half (what a placement means for its plans and results)
// stays in hub/internal/database (shard_*.go); this package never imports it.
package sharding
