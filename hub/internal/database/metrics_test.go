package database

import (
	"context"
	"errors"
	"fmt"
	"net"
	"testing"

	. "github.com/onsi/gomega"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	"go.opentelemetry.io/otel/trace/noop"
	"k8s.io/apimachinery/pkg/types"

	"github.com/fleetdb/fleetdb/internal/telemetry"
	"github.com/fleetdb/fleetdb/member"
)

func TestMetricsTeardownWaitingOn(t *testing.T) {
	g := NewWithT(t)
	s := newState()
	s.setPlan(types.NamespacedName{Namespace: "a", Name: "placed"}, &plan{targets: setOf([]string{"m1", "m3"})})
	s.setPlan(types.NamespacedName{Namespace: "a", Name: "dropped"}, &plan{targets: setOf([]string{"m1"}), teardown: setOf([]string{"m3"})})
	s.setPlan(types.NamespacedName{Namespace: "a", Name: "deleting"}, &plan{teardown: setOf([]string{"m1", "m3"})})
	s.setPlan(types.NamespacedName{Namespace: "a", Name: "deleting-ok"}, &plan{teardown: setOf([]string{"m1", "m2"})})
	down := func(c string) bool { return c == "m3" }
	g.Expect(s.teardownWaitingOn(down)).To(Equal(2), "placed members do not count, teardowns on m3 do")
	g.Expect(s.teardownWaitingOn(func(string) bool { return false })).To(Equal(0))
}

func TestMetricsMemberSyncOutcomes(t *testing.T) {
	key := types.NamespacedName{Namespace: "team-a", Name: "orders"}
	m := &memberSyncReconciler{tracer: noop.NewTracerProvider().Tracer("")}
	p := &plan{uid: "u", generation: 1}
	for _, tc := range []struct {
		name        string
		out         syncOutcome
		outcome     string
		errorReason string
	}{
		{"synced", finished(outcomeSynced, nil), outcomeSynced, ""},
		{"unreachable", unreachableOutcome("m1", "probe failed"), outcomeUnreachable, errReasonUnreachable},
		{"conflict", conflictOutcome("m1", &member.ConflictError{Kind: "Secret", Namespace: "a", Name: "b"}), outcomeConflict, errReasonConflict},
		{"apply", failedOutcome(errReasonApply, errors.New("invalid"), nil), outcomeError, errReasonApply},
		{"apply, connection refused", failedOutcome(errReasonApply,
			fmt.Errorf("patching: %w", &net.OpError{Op: "dial", Err: errors.New("connection refused")}), nil), outcomeError, errReasonUnreachable},
		{"observe", failedOutcome(errReasonObserve, errors.New("boom"), nil), outcomeError, errReasonObserve},
		{"unexpected error", syncOutcome{err: errors.New("boom")}, outcomeError, errReasonApply},
		{"skipped: not counted", syncOutcome{}, "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			cluster := "outcome-" + tc.name
			errSeries := testutil.CollectAndCount(telemetry.MemberSyncErrors)
			_, s := m.startSync(context.Background(), cluster, key, p, roleApply)
			s.end(tc.out)
			if tc.outcome != "" {
				g.Expect(histogramCount(g, cluster, tc.outcome)).To(BeEquivalentTo(1))
			} else {
				g.Expect(histogramCount(g, cluster, outcomeSkipped)).To(BeZero())
			}
			if tc.errorReason != "" {
				g.Expect(testutil.ToFloat64(telemetry.MemberSyncErrors.WithLabelValues(cluster, tc.errorReason))).To(Equal(1.0))
			} else {
				g.Expect(testutil.CollectAndCount(telemetry.MemberSyncErrors)).To(Equal(errSeries), "no error counted")
			}
		})
	}
}

func histogramCount(g Gomega, cluster, outcome string) uint64 {
	var m dto.Metric
	g.Expect(telemetry.MemberSyncDuration.WithLabelValues(cluster, outcome).(prometheus.Histogram).Write(&m)).To(Succeed())
	return m.GetHistogram().GetSampleCount()
}
