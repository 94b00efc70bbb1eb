// Package topology is the switchover state machine of a PrimaryStandby
// Database: from the Database and what each member reports about its
// replication, Run decides the next step of a switchover (check the target,
// fence, demote, promote, repoint), the roles each member is rendered with,
// and the status and events of the pass. It is pure: no client, no clock of
// its own; the Database controller (hub) feeds it and applies what it
// returns.
package topology
