// Package hub holds fleetdb's hub controllers: the Database controller
// (finalizer, placement, rollout plan, status — the single writer of
// Database.status) and the per-member sync controller (render, apply,
// observe, tear down in one member), wired on a multicluster-runtime manager.
//
// The two talk in memory: the Database controller publishes a plan per
// Database (which members, which may take the current generation, which are
// torn down) and enqueues one member-sync request per member; member syncs
// record what they observed and wake the Database controller, which folds
// the results into one status write.
package hub
