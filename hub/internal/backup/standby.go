package backup

import (
	"fmt"
	"slices"
	"strings"

	fleetv1alpha1 "github.com/fleetdb/fleetdb/apis/v1alpha1"
	"github.com/fleetdb/fleetdb/internal/placement"
)

// backupMembers are the members an on-demand backup of db asked of names
// runs in: a standby member of a PrimaryStandby Database is replaced by the
// primary member (see placement.BackupPrimary), and instead says, for each standby
// left out, why (its record is Skipped with that message).
func backupMembers(db *fleetv1alpha1.Database, names []string) (take []string, instead map[string]string) {
	seen := map[string]bool{}
	for _, name := range names {
		if primary := placement.BackupPrimary(db, name); primary != "" {
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
