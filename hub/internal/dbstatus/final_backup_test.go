package dbstatus

import (
	"testing"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	fleetv1alpha1 "github.com/fleetdb/fleetdb/apis/v1alpha1"
)

func backupTestDB(deleting bool, deletion fleetv1alpha1.DeletionPolicy, removal fleetv1alpha1.PlacementRemovalPolicy, fb fleetv1alpha1.FinalBackupPolicy) *fleetv1alpha1.Database {
	db := &fleetv1alpha1.Database{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "orders", UID: "u1", Generation: 3}}
	db.Spec.DeletionPolicy = deletion
	db.Spec.Teardown.OnPlacementRemoval = removal
	if fb != "" {
		db.Spec.Backup = &fleetv1alpha1.BackupSpec{FinalBackup: fb}
	}
	if deleting {
		now := metav1.Now()
		db.DeletionTimestamp = &now
	}
	return db
}

func TestFinalBackupRecords(t *testing.T) {
	g := NewWithT(t)
	db := backupTestDB(true, fleetv1alpha1.DeletionPolicyDelete, "", "")
	db.Status.FinalBackups = []fleetv1alpha1.BackupRecord{
		{Cluster: "m1", Phase: fleetv1alpha1.BackupPhaseRunning},
		{Cluster: "m4", Phase: fleetv1alpha1.BackupPhaseSucceeded},
	}
	results := map[string]*Result{
		"m1": {FinalBackup: &fleetv1alpha1.BackupRecord{Cluster: "m1", Phase: fleetv1alpha1.BackupPhaseSucceeded}},
		"m2": {Unreachable: true},
		"m3": {Unreachable: true},
	}
	teardown := map[string]bool{"m1": true, "m2": true, "m3": true}
	recs := FinalBackupRecords(db, results, nil, teardown, map[string]bool{"m3": true})
	g.Expect(recs).To(HaveLen(4))
	g.Expect(recs[0]).To(HaveField("Phase", fleetv1alpha1.BackupPhaseSucceeded), "m1: the result wins")
	g.Expect(recs[1]).To(And(HaveField("Cluster", "m2"), HaveField("Phase", fleetv1alpha1.BackupPhasePending)))
	g.Expect(recs[2]).To(And(HaveField("Cluster", "m3"), HaveField("Phase", fleetv1alpha1.BackupPhaseSkipped), HaveField("Message", UnreachableBackupMessage)))
	g.Expect(recs[3]).To(HaveField("Cluster", "m4"), "a finished member keeps its record")

	// A live Database: a member placed again loses its record.
	live := backupTestDB(false, fleetv1alpha1.DeletionPolicyDelete, fleetv1alpha1.PlacementRemovalDelete, "")
	live.Status.FinalBackups = []fleetv1alpha1.BackupRecord{{Cluster: "m1", Phase: fleetv1alpha1.BackupPhaseSucceeded}}
	g.Expect(FinalBackupRecords(live, nil, map[string]bool{"m1": true}, nil, nil)).To(BeEmpty())
}

func TestSetFinalBackupCondition(t *testing.T) {
	rec := func(cluster, phase string) fleetv1alpha1.BackupRecord {
		return fleetv1alpha1.BackupRecord{Cluster: cluster, Phase: phase, Message: "attempt 1 failed: step x"}
	}
	required := backupTestDB(true, fleetv1alpha1.DeletionPolicyDelete, "", "")
	bestEffort := backupTestDB(true, fleetv1alpha1.DeletionPolicyDelete, "", fleetv1alpha1.FinalBackupBestEffort)
	skip := backupTestDB(true, fleetv1alpha1.DeletionPolicyDelete, "", fleetv1alpha1.FinalBackupSkip)
	live := backupTestDB(false, fleetv1alpha1.DeletionPolicyDelete, "", "")
	both := map[string]bool{"m1": true, "m2": true}
	for _, tc := range []struct {
		name     string
		db       *fleetv1alpha1.Database
		teardown map[string]bool
		records  []fleetv1alpha1.BackupRecord
		want     wantCondition
	}{
		{"a Required failure holds", required, both, []fleetv1alpha1.BackupRecord{rec("m1", "Failed"), rec("m2", "Succeeded")},
			wantCondition{metav1.ConditionFalse, fleetv1alpha1.ReasonFinalBackupFailed, "m1 (attempt 1 failed: step x)"}},
		{"running", required, both, []fleetv1alpha1.BackupRecord{rec("m1", "Running"), rec("m2", "Succeeded")},
			wantCondition{metav1.ConditionFalse, fleetv1alpha1.ReasonFinalBackupRunning, "m1"}},
		{"a member without a record yet", required, both, []fleetv1alpha1.BackupRecord{rec("m1", "Succeeded")},
			wantCondition{metav1.ConditionFalse, fleetv1alpha1.ReasonFinalBackupRunning, "m2"}},
		{"all ended", required, both, []fleetv1alpha1.BackupRecord{rec("m1", "Succeeded"), rec("m2", "Skipped")},
			wantCondition{metav1.ConditionTrue, fleetv1alpha1.ReasonFinalBackupsTaken, "succeeded in m1; skipped in m2"}},
		{"a BestEffort failure does not hold", bestEffort, both, []fleetv1alpha1.BackupRecord{rec("m1", "Failed"), rec("m2", "Succeeded")},
			wantCondition{metav1.ConditionTrue, fleetv1alpha1.ReasonFinalBackupsTaken, "failed (BestEffort, not retried) in m1"}},
		{"switched to Skip after a failure", skip, both, []fleetv1alpha1.BackupRecord{rec("m1", "Skipped")},
			wantCondition{metav1.ConditionTrue, fleetv1alpha1.ReasonFinalBackupsTaken, "skipped in m1"}},
		{"Skip from the start: no condition", skip, both, nil, wantCondition{}},
		{"a live Database with nothing torn down: no condition", live, nil, nil, wantCondition{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := conditionAt(nil, fleetv1alpha1.ConditionFinalBackup, func(st *fleetv1alpha1.DatabaseStatus) {
				st.FinalBackups = tc.records
				SetFinalBackupCondition(st, tc.db, tc.teardown)
			})
			expectCondition(NewWithT(t), c, tc.want)
		})
	}
}
