// Package tombstones is the hub's record, in a ConfigMap of its own
// namespace, of the member teardowns it skipped (a member unreachable past a
// Database's spec.teardown.unreachableTimeout): the reconnect sweep reads it
// to collect those members' leftovers with the policy that was in force.
// The same ConfigMap holds the retained records (Retained): the Databases
// torn down with deletionPolicy Retain, whose kept credentials a later
// Database of the same namespace/name may adopt.
package tombstones
