package backup

import (
	"testing"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	fleetv1alpha1 "github.com/fleetdb/fleetdb/apis/v1alpha1"
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

// TestOnDemandBackupFromPrimary: an on-demand backup of a PrimaryStandby
// Database runs in the member that is primary; a standby member, asked for
// or not, is Skipped and says where the backup is.
func TestOnDemandBackupFromPrimary(t *testing.T) {
	g := NewWithT(t)
	db := primaryStandbyDB()
	b := &fleetv1alpha1.DatabaseBackup{ObjectMeta: metav1.ObjectMeta{UID: "b1"}}
	recs := initialRecords(b, db)
	g.Expect(recs).To(HaveLen(3))
	g.Expect(recs[0]).To(And(HaveField("Cluster", "m1"), HaveField("Phase", fleetv1alpha1.BackupPhaseSkipped), HaveField("Message", ContainSubstring("primary member m2"))))
	g.Expect(recs[1]).To(And(HaveField("Cluster", "m2"), HaveField("Phase", fleetv1alpha1.BackupPhasePending)))
	g.Expect(recs[2]).To(And(HaveField("Cluster", "m3"), HaveField("Phase", fleetv1alpha1.BackupPhaseSkipped)))

	b.Spec.ClusterNames = []string{"m3"}
	recs = initialRecords(b, db)
	g.Expect(recs).To(HaveLen(2), "the standby asked for is replaced by the primary")
	g.Expect(recs[0]).To(And(HaveField("Cluster", "m2"), HaveField("Phase", fleetv1alpha1.BackupPhasePending)))
	g.Expect(recs[1]).To(And(HaveField("Cluster", "m3"), HaveField("Phase", fleetv1alpha1.BackupPhaseSkipped)))

	db.Spec.Topology, db.Status.Topology = nil, nil
	recs = initialRecords(b, db)
	g.Expect(recs).To(ConsistOf(And(HaveField("Cluster", "m3"), HaveField("Phase", fleetv1alpha1.BackupPhasePending))), "Independent: each member its own")
}
