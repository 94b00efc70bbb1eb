// Package tombstones is the hub's record, in a ConfigMap of its own
// namespace, of the member teardowns it skipped (a member unreachable past a
// Database's spec.teardown.unreachableTimeout): the reconnect sweep reads it
// to collect those members' leftovers with the policy that was in force.
package tombstones
