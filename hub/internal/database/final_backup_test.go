package database

import (
	"testing"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	fleetv1alpha1 "github.com/fleetdb/fleetdb/apis/v1alpha1"
	"github.com/fleetdb/fleetdb/hub/internal/dbstatus"
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

func TestFinalBackupFor(t *testing.T) {
	for _, tc := range []struct {
		name     string
		db       *fleetv1alpha1.Database
		want     fleetv1alpha1.FinalBackupPolicy
		wantPlan bool
		wantID   string
	}{
		{"deleted, Delete, unset: Required", backupTestDB(true, fleetv1alpha1.DeletionPolicyDelete, "", ""), fleetv1alpha1.FinalBackupRequired, true, "final-u1"},
		{"deleted, policy unset (the CRD's Delete): Required", backupTestDB(true, "", "", ""), fleetv1alpha1.FinalBackupRequired, true, "final-u1"},
		{"deleted, Delete, BestEffort", backupTestDB(true, fleetv1alpha1.DeletionPolicyDelete, "", fleetv1alpha1.FinalBackupBestEffort), fleetv1alpha1.FinalBackupBestEffort, true, "final-u1"},
		{"deleted, Delete, Skip: no plan", backupTestDB(true, fleetv1alpha1.DeletionPolicyDelete, "", fleetv1alpha1.FinalBackupSkip), fleetv1alpha1.FinalBackupSkip, false, ""},
		{"deleted, Retain: the data stays", backupTestDB(true, fleetv1alpha1.DeletionPolicyRetain, "", fleetv1alpha1.FinalBackupRequired), fleetv1alpha1.FinalBackupSkip, false, ""},
		{"deleted, Orphan", backupTestDB(true, fleetv1alpha1.DeletionPolicyOrphan, "", ""), fleetv1alpha1.FinalBackupSkip, false, ""},
		{"dropped, onPlacementRemoval Delete: Required", backupTestDB(false, fleetv1alpha1.DeletionPolicyRetain, fleetv1alpha1.PlacementRemovalDelete, ""), fleetv1alpha1.FinalBackupRequired, true, "final-u1-g3"},
		{"dropped, onPlacementRemoval unset (Retain)", backupTestDB(false, fleetv1alpha1.DeletionPolicyDelete, "", ""), fleetv1alpha1.FinalBackupSkip, false, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			g.Expect(dbstatus.FinalBackupFor(tc.db, tc.db.TeardownPolicy())).To(Equal(tc.want))
			p := newFinalBackupPlan(tc.db, tc.db.TeardownPolicy(), map[string]bool{"m1": true})
			if !tc.wantPlan {
				g.Expect(p).To(BeNil())
				return
			}
			g.Expect(p).NotTo(BeNil())
			g.Expect(p.policy).To(Equal(tc.want))
			g.Expect(p.id).To(Equal(tc.wantID))
			g.Expect(newFinalBackupPlan(tc.db, tc.db.TeardownPolicy(), nil)).To(BeNil(), "no teardown, no plan")
		})
	}
}
