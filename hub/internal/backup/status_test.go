package backup

import (
	"testing"

	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	fleetv1alpha1 "github.com/fleetdb/fleetdb/apis/v1alpha1"
)

func TestFoldBackupStatus(t *testing.T) {
	rec := func(cluster, phase string) fleetv1alpha1.BackupRecord {
		return fleetv1alpha1.BackupRecord{Cluster: cluster, Phase: phase}
	}
	const (
		ok, failed, skipped = fleetv1alpha1.BackupPhaseSucceeded, fleetv1alpha1.BackupPhaseFailed, fleetv1alpha1.BackupPhaseSkipped
		running, pending    = fleetv1alpha1.BackupPhaseRunning, fleetv1alpha1.BackupPhasePending
	)
	for _, tc := range []struct {
		name    string
		records []fleetv1alpha1.BackupRecord
		gone    bool
		phase   string
		ready   bool
		reason  string
		stalled bool
	}{
		{"one still running", []fleetv1alpha1.BackupRecord{rec("a", ok), rec("b", running)}, false, running, false, fleetv1alpha1.ReasonBackupRunning, false},
		{"one pending", []fleetv1alpha1.BackupRecord{rec("a", pending)}, false, pending, false, fleetv1alpha1.ReasonBackupRunning, false},
		{"all succeeded, one skipped", []fleetv1alpha1.BackupRecord{rec("a", ok), rec("b", skipped)}, false, ok, true, fleetv1alpha1.ReasonBackupSucceeded, false},
		{"some failed", []fleetv1alpha1.BackupRecord{rec("a", ok), rec("b", failed)}, false, fleetv1alpha1.BackupPhasePartiallyFailed, false, fleetv1alpha1.ReasonBackupPartiallyFailed, false},
		{"all failed", []fleetv1alpha1.BackupRecord{rec("a", failed)}, false, failed, false, fleetv1alpha1.ReasonBackupFailed, true},
		{"the Database went first", []fleetv1alpha1.BackupRecord{rec("a", failed)}, true, failed, false, fleetv1alpha1.ReasonDatabaseDeleting, true},
		{"nothing placed", []fleetv1alpha1.BackupRecord{rec("a", skipped)}, false, failed, false, fleetv1alpha1.ReasonNoMembers, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			st := fleetv1alpha1.DatabaseBackupStatus{ObservedGeneration: 1, Clusters: tc.records}
			foldBackupStatus(&st, tc.gone)
			g.Expect(st.Phase).To(Equal(tc.phase))
			ready := meta.FindStatusCondition(st.Conditions, fleetv1alpha1.ConditionReady)
			g.Expect(ready).NotTo(BeNil())
			g.Expect(ready.Status == metav1.ConditionTrue).To(Equal(tc.ready))
			g.Expect(ready.Reason).To(Equal(tc.reason))
			g.Expect(meta.IsStatusConditionTrue(st.Conditions, fleetv1alpha1.ConditionStalled)).To(Equal(tc.stalled))

			// Folding again changes nothing (a steady backup writes nothing).
			again := *st.DeepCopy()
			foldBackupStatus(&again, tc.gone)
			g.Expect(again).To(Equal(st))
		})
	}
}

func TestBackupNames(t *testing.T) {
	g := NewWithT(t)
	b := &fleetv1alpha1.DatabaseBackup{}
	b.Name, b.UID, b.Spec.DatabaseName = "nightly", types.UID("u-1"), "a234567890123456789012345678901234567890"
	g.Expect(backupID(b)).To(MatchRegexp(`^nightly-[0-9a-f]{6}$`))
	g.Expect(len(backupJobName(b))).To(BeNumerically("<=", 63))
	g.Expect(len(backupCleanupJobName(b))).To(BeNumerically("<=", 63))
	other := b.DeepCopy()
	other.UID = "u-2"
	g.Expect(backupID(other)).NotTo(Equal(backupID(b)), "a DatabaseBackup created again under the same name writes elsewhere")
	b.Name = "a.name.with.dots"
	g.Expect(backupID(b)).To(MatchRegexp(`^od-[0-9a-f]{10}$`))
}
