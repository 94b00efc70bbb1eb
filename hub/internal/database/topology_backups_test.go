package database

import (
	"testing"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	fleetv1alpha1 "github.com/fleetdb/fleetdb/apis/v1alpha1"
	"github.com/fleetdb/fleetdb/hub/internal/dbstatus"
)

// primaryStandbyDB is a PrimaryStandby Database on m1, m2, m3 whose primary
// member is m2 (recorded by the hub; the spec still names m1 until a
// switchover is asked for).
func primaryStandbyDB() *fleetv1alpha1.Database {
	db := &fleetv1alpha1.Database{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "orders", UID: "u1"}}
	db.Spec.Topology = &fleetv1alpha1.TopologySpec{Mode: fleetv1alpha1.TopologyPrimaryStandby, PrimaryCluster: "m1"}
	db.Status.Topology = &fleetv1alpha1.TopologyStatus{Mode: fleetv1alpha1.TopologyPrimaryStandby, PrimaryCluster: "m2"}
	for _, m := range []string{"m1", "m2", "m3"} {
		db.Status.Clusters = append(db.Status.Clusters, fleetv1alpha1.ClusterStatus{Name: m})
	}
	return db
}

// TestFinalBackupFromPrimary: when a PrimaryStandby Database is deleted, a
// standby member's teardown waits for the primary member's final backup and
// is then covered by it; it takes its own only when the primary member's
// backup ended without one, or when the primary member stays.
func TestFinalBackupFromPrimary(t *testing.T) {
	g := NewWithT(t)
	db := primaryStandbyDB()
	now := metav1.Now()
	db.DeletionTimestamp = &now
	key := types.NamespacedName{Namespace: "team-a", Name: "orders"}
	all := map[string]bool{"m1": true, "m2": true, "m3": true}
	r := &memberSyncReconciler{state: newState()}
	p := &plan{teardown: all, finalBackup: newFinalBackupPlan(db, fleetv1alpha1.DeletionPolicyDelete, all)}

	_, ok := r.standbyFinalBackup(key, "m2", p)
	g.Expect(ok).To(BeFalse(), "the primary member takes its own")
	step, ok := r.standbyFinalBackup(key, "m1", p)
	g.Expect(ok).To(BeTrue())
	g.Expect(step.hold).To(BeTrue(), "the standby's teardown waits for the primary's backup")
	g.Expect(step.record.Phase).To(Equal(fleetv1alpha1.BackupPhasePending))

	r.state.record(key, "m2", &memberResult{FinalBackup: &fleetv1alpha1.BackupRecord{Cluster: "m2", Phase: fleetv1alpha1.BackupPhaseSucceeded}})
	step, ok = r.standbyFinalBackup(key, "m1", p)
	g.Expect(ok).To(BeTrue())
	g.Expect(step.hold).To(BeFalse())
	g.Expect(step.record).To(And(HaveField("Phase", fleetv1alpha1.BackupPhaseSkipped), HaveField("Message", ContainSubstring("m2"))))

	r.state.record(key, "m2", &memberResult{FinalBackup: &fleetv1alpha1.BackupRecord{Cluster: "m2", Phase: fleetv1alpha1.BackupPhaseSkipped, Message: dbstatus.UnreachableBackupMessage}})
	_, ok = r.standbyFinalBackup(key, "m1", p)
	g.Expect(ok).To(BeFalse(), "no backup in the primary member: the standby takes its own")

	dropped := &plan{teardown: map[string]bool{"m1": true}, finalBackup: p.finalBackup}
	_, ok = r.standbyFinalBackup(key, "m1", dropped)
	g.Expect(ok).To(BeFalse(), "a standby dropped alone takes its own")
}
