// Package memberjob holds what the hub's Jobs in members share: listing only
// this hub's own Jobs (by its identity label, oldest attempt first), their
// attempt numbers, success and failure, the doubling backoff between
// attempts, and the one trust check (SamePod: the Job's pod runs what the
// hub renders for it) applied before a Job's result is taken. Credential
// rotation, restore, the final backup and on-demand backups use it.
package memberjob
