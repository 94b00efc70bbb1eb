package v1alpha1

import (
	"crypto/sha256"
	"encoding/hex"
	"regexp"
)

// BackupPhaseFinal reports a member record phase that never changes again:
// Succeeded, Failed or Skipped.
func BackupPhaseFinal(phase string) bool {
	return phase == BackupPhaseSucceeded || phase == BackupPhaseFailed || phase == BackupPhaseSkipped
}

// UIDHash is the LabelBackup value of a DatabaseBackup's member Jobs and
// the stem of their names: deterministic from its UID, so a restarted hub
// finds the Jobs it created.
func (b *DatabaseBackup) UIDHash() string {
	sum := sha256.Sum256([]byte(b.UID))
	return hex.EncodeToString(sum[:5])
}

var backupIDName = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`)

// BackupID is the directory of a DatabaseBackup's files in each member
// (/backups/<namespace>/<database>/<backupID>/ on the backup volume): its
// name and a hash of its UID (a DatabaseBackup created again under the same
// name writes elsewhere), or "od-<hash>" for a name that does not fit.
func (b *DatabaseBackup) BackupID() string {
	if len(b.Name) <= 48 && backupIDName.MatchString(b.Name) {
		return b.Name + "-" + b.UIDHash()[:6]
	}
	return "od-" + b.UIDHash()
}
