package database

import (
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/types"

	fleetv1alpha1 "github.com/fleetdb/fleetdb/apis/v1alpha1"
)

func TestRecordClassifiesChanges(t *testing.T) {
	st := newState()
	key := types.NamespacedName{Namespace: "ns", Name: "db"}
	result := func(phase fleetv1alpha1.ClusterPhase, ready int32) *memberResult {
		return &memberResult{HasWorkload: phase != fleetv1alpha1.ClusterPhasePending,
			Status: fleetv1alpha1.ClusterStatus{Name: "m1", Phase: phase, ReadyReplicas: ready}}
	}
	steps := []struct {
		name string
		res  *memberResult
		want resultChange
	}{
		{"first result, on the way", result(fleetv1alpha1.ClusterPhasePending, 0), resultProgress},
		{"same again", result(fleetv1alpha1.ClusterPhasePending, 0), resultSame},
		{"provisioning", result(fleetv1alpha1.ClusterPhaseProvisioning, 0), resultProgress},
		{"a replica ready", result(fleetv1alpha1.ClusterPhaseProvisioning, 1), resultProgress},
		{"ready", result(fleetv1alpha1.ClusterPhaseReady, 2), resultPhase},
		{"ready, same", result(fleetv1alpha1.ClusterPhaseReady, 2), resultSame},
		{"degraded", result(fleetv1alpha1.ClusterPhaseDegraded, 2), resultPhase},
		{"unreachable", &memberResult{Unreachable: true, Status: fleetv1alpha1.ClusterStatus{Name: "m1", Phase: fleetv1alpha1.ClusterPhaseUnreachable}}, resultPhase},
		{"back, provisioning", result(fleetv1alpha1.ClusterPhaseProvisioning, 1), resultProgress},
		{"torn down", &memberResult{TornDown: true, Status: fleetv1alpha1.ClusterStatus{Name: "m1", Phase: fleetv1alpha1.ClusterPhaseDeleting}}, resultPhase},
	}
	for _, s := range steps {
		if got := st.record(key, "m1", s.res); got != s.want {
			t.Errorf("%s: record = %d, want %d", s.name, got, s.want)
		}
	}
}

// TestRecordRedactsMemberAddresses: every member result passes through
// record on its way to the Database's status, which the tenant reads; a member
// error often names the member's API server (a URL, an address). The messages
// below are the shapes of the paths that once wrote err.Error() unredacted
// (teardown failed, removing the final backup Jobs, the member's RBAC refused
// the hub) and of the other messages a result carries.
func TestRecordRedactsMemberAddresses(t *testing.T) {
	st := newState()
	key := types.NamespacedName{Namespace: "ns", Name: "db"}
	leak := `Delete "https://10.20.30.40:6443/apis/apps/v1/namespaces/ns/statefulsets/db": dial tcp [fd00::1]:6443: connect: connection refused`
	results := map[string]*memberResult{
		"teardown":  {Status: deletingStatus("teardown", "teardown failed, retrying: "+leak)},
		"jobs":      {Status: deletingStatus("jobs", "removing the final backup jobs: "+leak)},
		"forbidden": {Status: fleetv1alpha1.ClusterStatus{Name: "forbidden", Phase: fleetv1alpha1.ClusterPhaseDegraded, Message: "the member's RBAC refused the hub: " + leak}},
		"reports": {
			Status:      fleetv1alpha1.ClusterStatus{Name: "reports", Phase: fleetv1alpha1.ClusterPhaseProvisioning},
			Rotation:    rotationReport{Waiting: "waiting: " + leak},
			Restore:     restoreReport{Message: "restore: " + leak},
			FinalBackup: &fleetv1alpha1.BackupRecord{Message: "final backup: " + leak},
		},
	}
	for cluster, r := range results {
		st.record(key, cluster, r)
	}
	for cluster, r := range st.resultsFor(key) {
		msgs := []string{r.Status.Message, r.Rotation.Waiting, r.Restore.Message}
		if r.FinalBackup != nil {
			msgs = append(msgs, r.FinalBackup.Message)
		}
		for _, m := range msgs {
			for _, addr := range []string{"10.20.30.40", "fd00::1", "https://"} {
				if strings.Contains(m, addr) {
					t.Errorf("%s: a message bound for the Database's status names the member's address %q: %s", cluster, addr, m)
				}
			}
		}
		if !strings.Contains(r.Status.Message+r.Restore.Message, "connection refused") {
			t.Errorf("%s: the redaction dropped the error itself: %q", cluster, r.Status.Message)
		}
	}
}
