// Package memberjob holds what the hub's Jobs in members share: listing only
// this hub's own Jobs (by its identity label, oldest attempt first), their
// attempt numbers, success and failure, and the doubling backoff between
// attempts. Credential rotation, restore, the final backup and on-demand
// backups use it.
package memberjob
