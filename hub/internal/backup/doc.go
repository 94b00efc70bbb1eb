// Package backup is the hub half of on-demand backups: the DatabaseBackup
// controller (finalizer, one backup Job per member, the per-member records
// and the status folded from them, and on deletion a cleanup Job per
// member), and on a sharded hub the controller that says a DatabaseBackup
// does not run there. It reaches members through the manager's clusters
// and the cluster registry, renders its Jobs with package member, and
// never imports the Database controller (hub/internal/database): the
// wiring passes what it needs in Options.
package backup
