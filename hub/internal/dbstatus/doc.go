// Package dbstatus computes a Database's status: from the Database, its
// placement and what the member syncs last observed in each member (Result),
// one DatabaseStatus with one setter per condition and the phase derived
// from the conditions, plus the parts the Database controller adds
// (restores, final backups, members left behind, a stalled or waiting
// status) and the pace of routine status writes (Routine). It is pure: no
// client, no controller-runtime, no clock of its own (the caller passes
// Input.Now and the change's trace ID), so the same input gives the same
// status and a steady fleet writes nothing. The Database controller
// (hub/internal/database) is its one caller; the member syncs fill Result.
package dbstatus
