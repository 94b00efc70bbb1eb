package database

import (
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
