// Package sweep is the member-sweep controller's reconciler: when a member
// turns Ready again it collects the leftovers of Databases whose teardown
// was skipped there (by the hub's tombstones) or that are no longer placed
// there, touching only objects with this hub's identity. It asks the
// Database controller's plans through Plans and never imports the
// controllers.
package sweep
