// Package database holds fleetdb's hub controllers: the Database controller
// (finalizer, placement, rollout plan, status — the single writer of
// Database.status), the per-member sync controller (render, apply, observe,
// tear down in one member) and the member-sweep controller (leftovers in a
// member that reconnects), wired on a multicluster-runtime manager.
//
// The two main controllers talk in memory: the Database controller
// publishes a plan per Database (which members, which may take the current
// generation, which are torn down) and enqueues one member-sync request per
// member; member syncs record what they observed and wake the Database
// controller, which folds the results into one status write. The cluster
// registry reaches all three controllers as a source of requests
// (clusters.RegistrySource).
//
// Where things are:
//   - database_controller.go: Reconcile, the scope, the phases it runs and
//     the one deferred status write; database_credentials.go,
//     database_phases.go and database_delete.go: the phases.
//   - the status is computed by hub/internal/dbstatus (Compute, from the
//     member syncs' results: memberResult is dbstatus.Result);
//     status_pace.go holds routine status writes back. The hub Secrets
//     (credentials, topology PKI) are hub/internal/hubsecret.
//   - member_sync.go: the member sync's envelope (Reconcile) and its work;
//     member_sync_outcome.go: what the work returns.
//   - instrumentation.go: spans and metrics of both controllers (plans,
//     outcomes); the plumbing is internal/telemetry.
//   - setup.go, handlers.go: wiring, event handlers; the queues are
//     hub/internal/queue, the switchover state machine hub/internal/topology,
//     the teardown tombstones hub/internal/tombstones.
//   - final_backup*.go, restore*.go, rotation*.go: restores, credential
//     rotation and the final backup of a teardown; DatabaseBackups are
//     hub/internal/backup, the member sweep hub/internal/sweep.
//   - shard_*.go: the Database controller's half of the sharded hub (its
//     plans and results as placements); the coordinator, the peers and the
//     placement store are hub/internal/sharding.
package database
