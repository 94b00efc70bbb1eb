package dbstatus

import (
	"testing"

	. "github.com/onsi/gomega"

	fleetv1alpha1 "github.com/fleetdb/fleetdb/apis/v1alpha1"
)

func TestRoutineStatus(t *testing.T) {
	st := func(p fleetv1alpha1.Phase) fleetv1alpha1.DatabaseStatus {
		return fleetv1alpha1.DatabaseStatus{Phase: p, ObservedGeneration: 1, ReadySummary: "0/1",
			Clusters: []fleetv1alpha1.ClusterStatus{{Name: "m1", Phase: fleetv1alpha1.ClusterPhase(p)}}}
	}
	withTopology := st(fleetv1alpha1.PhaseProvisioning)
	withTopology.Topology = &fleetv1alpha1.TopologyStatus{PrimaryCluster: "m1"}
	progress := st(fleetv1alpha1.PhaseProvisioning)
	progress.ReadySummary, progress.Clusters[0].ReadyReplicas = "0/1", 1
	withBackups := st(fleetv1alpha1.PhaseDeleting)
	withBackups.FinalBackups = []fleetv1alpha1.BackupRecord{{Cluster: "m1"}}
	for _, tc := range []struct {
		name       string
		prev, next fleetv1alpha1.DatabaseStatus
		routine    bool
	}{
		{"a new Database's first status", fleetv1alpha1.DatabaseStatus{}, st(fleetv1alpha1.PhasePending), true},
		{"pending to provisioning", st(fleetv1alpha1.PhasePending), st(fleetv1alpha1.PhaseProvisioning), true},
		{"progress while provisioning", st(fleetv1alpha1.PhaseProvisioning), progress, true},
		{"ready to deleting", st(fleetv1alpha1.PhaseReady), st(fleetv1alpha1.PhaseDeleting), true},
		{"turning ready", st(fleetv1alpha1.PhaseProvisioning), st(fleetv1alpha1.PhaseReady), false},
		{"turning degraded", st(fleetv1alpha1.PhaseProvisioning), st(fleetv1alpha1.PhaseDegraded), false},
		{"failing", st(fleetv1alpha1.PhasePending), st(fleetv1alpha1.PhaseFailed), false},
		{"ready leaving ready", st(fleetv1alpha1.PhaseReady), st(fleetv1alpha1.PhaseProvisioning), false},
		{"degraded recovering", st(fleetv1alpha1.PhaseDegraded), st(fleetv1alpha1.PhaseProvisioning), false},
		{"the primary decided", st(fleetv1alpha1.PhaseProvisioning), withTopology, false},
		{"a final backup recorded", st(fleetv1alpha1.PhaseDeleting), withBackups, false},
		{"a member's teardown finished", st(fleetv1alpha1.PhaseProvisioning), fleetv1alpha1.DatabaseStatus{Phase: fleetv1alpha1.PhasePending}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			NewWithT(t).Expect(Routine(tc.prev, tc.next)).To(Equal(tc.routine))
		})
	}
}
