package database

import (
	"fmt"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/types"

	fleetv1alpha1 "github.com/fleetdb/fleetdb/apis/v1alpha1"
)

// backupPrimary is the member a backup of db's data in member cluster is
// taken from instead of cluster: for a PrimaryStandby Database whose
// cluster is a standby member, the member that is primary now
// (status.topology.primaryCluster; spec.topology.primaryCluster before the
// hub recorded one). "" when cluster takes its own: an Independent
// Database, or cluster is the primary.
//
// A standby member's Cluster is a CloudNativePG replica cluster, a hot
// standby: a pg_dump there runs in one long transaction that WAL replay can
// cancel ("canceling statement due to conflict with recovery", whenever
// replay waits longer than max_standby_streaming_delay; PostgreSQL's
// "Handling Query Conflicts" in high-availability.sgml). The primary has
// no such conflict, and holds the same data.
func backupPrimary(db *fleetv1alpha1.Database, cluster string) string {
	if db == nil || db.Spec.Topology == nil || db.Spec.Topology.Mode != fleetv1alpha1.TopologyPrimaryStandby {
		return ""
	}
	primary := db.Spec.Topology.PrimaryCluster
	if st := db.Status.Topology; st != nil && st.PrimaryCluster != "" {
		primary = st.PrimaryCluster
	}
	if primary == cluster {
		return ""
	}
	return primary
}

// backupMembers are the members an on-demand backup of db asked of names
// runs in: a standby member of a PrimaryStandby Database is replaced by the
// primary member (see backupPrimary), and instead says, for each standby
// left out, why (its record is Skipped with that message).
func backupMembers(db *fleetv1alpha1.Database, names []string) (take []string, instead map[string]string) {
	seen := map[string]bool{}
	for _, name := range names {
		if primary := backupPrimary(db, name); primary != "" {
			if instead == nil {
				instead = map[string]string{}
			}
			instead[name] = standbyBackupMessage(primary)
			name = primary
		}
		if !seen[name] {
			seen[name] = true
			take = append(take, name)
		}
	}
	return take, instead
}

// standbyBackupMessage is the record of a standby member whose backup the
// primary member takes.
func standbyBackupMessage(primary string) string {
	return fmt.Sprintf("a standby member: the backup is taken in the primary member %s (a dump of a standby can be cancelled by recovery conflicts)", primary)
}

// withStandbyRecords adds to records (sorted by member) a Skipped record
// with backup id for each standby member left out (instead, see backupMembers).
func withStandbyRecords(records []fleetv1alpha1.BackupRecord, instead map[string]string, id string) []fleetv1alpha1.BackupRecord {
	for name, why := range instead {
		records = append(records, fleetv1alpha1.BackupRecord{Cluster: name, Phase: fleetv1alpha1.BackupPhaseSkipped, BackupID: id, Message: why})
	}
	slices.SortFunc(records, func(a, b fleetv1alpha1.BackupRecord) int { return strings.Compare(a.Cluster, b.Cluster) })
	return records
}

// standbyFinalBackup is the final backup step of a standby member of a
// PrimaryStandby Database whose primary member the same plan tears down
// (the Database is deleted): the primary member takes the final backup (see
// backupPrimary) and the standby's teardown holds until it succeeded; the
// standby's record is then Skipped, covered by it. ok is false when the
// member takes its own as before: it is no such standby, the primary member
// stays (a standby dropped from the placement: the data lives on there), or
// the primary member's backup ended without one (given up as unreachable):
// then a Required backup is still taken, from the standby.
func (r *memberSyncReconciler) standbyFinalBackup(key types.NamespacedName, cluster string, p *plan) (finalBackupStep, bool) {
	fb := p.finalBackup
	primary := backupPrimary(fb.db, cluster)
	if primary == "" || !p.teardown[primary] {
		return finalBackupStep{}, false
	}
	rec := backupRecordFor(fb.db.Status.FinalBackups, primary)
	if res := r.state.resultsFor(key)[primary]; res != nil && res.FinalBackup != nil {
		rec = res.FinalBackup
	}
	switch phase := backupPhase(rec); {
	case phase == fleetv1alpha1.BackupPhaseSucceeded:
		return finalBackupStep{record: &fleetv1alpha1.BackupRecord{Cluster: cluster, Phase: fleetv1alpha1.BackupPhaseSkipped,
			Message: "a standby member: the final backup of the primary member " + primary + " covers it"}}, true
	case backupEnded(phase):
		return finalBackupStep{}, false
	}
	msg := "waiting for the final backup in the primary member " + primary + " (a dump of a standby can be cancelled by recovery conflicts)"
	return finalBackupStep{record: &fleetv1alpha1.BackupRecord{Cluster: cluster, Phase: fleetv1alpha1.BackupPhasePending, Message: msg},
		hold: true, waiting: msg, requeue: finalBackupPollMin}, true
}
