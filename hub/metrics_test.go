package hub

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"regexp"
	"strings"
	"testing"

	. "github.com/onsi/gomega"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	"go.opentelemetry.io/otel/trace/noop"
	"k8s.io/apimachinery/pkg/types"
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

func TestMetricsCountRestored(t *testing.T) {
	g := NewWithT(t)
	before := testutil.ToFloat64(driftRestored.WithLabelValues("metrics-m1", "ConfigMap"))
	countRestored("metrics-m1", []string{"ConfigMap/team-a/orders-config", "StatefulSet/team-a/orders"})
	g.Expect(testutil.ToFloat64(driftRestored.WithLabelValues("metrics-m1", "ConfigMap"))).To(Equal(before + 1))
	g.Expect(testutil.ToFloat64(driftRestored.WithLabelValues("metrics-m1", "StatefulSet"))).To(BeNumerically(">=", 1))
}

func TestMetricsMemberSyncOutcomes(t *testing.T) {
	key := types.NamespacedName{Namespace: "team-a", Name: "orders"}
	m := &memberSyncReconciler{tracer: noop.NewTracerProvider().Tracer("")}
	p := &plan{uid: "u", generation: 1}
	for _, tc := range []struct {
		name        string
		run         func(s *memberSync) error
		outcome     string
		errorReason string
	}{
		{"synced", func(s *memberSync) error { s.finish(outcomeSynced); return nil }, outcomeSynced, ""},
		{"unreachable", func(s *memberSync) error { s.unreachable("probe failed"); return nil }, outcomeUnreachable, errReasonUnreachable},
		{"conflict", func(s *memberSync) error { s.conflict(errors.New("not ours")); return nil }, outcomeConflict, errReasonConflict},
		{"apply", func(s *memberSync) error {
			err := errors.New("invalid")
			s.failed(errReasonApply, err)
			return err
		}, outcomeError, errReasonApply},
		{"apply, connection refused", func(s *memberSync) error {
			err := fmt.Errorf("patching: %w", &net.OpError{Op: "dial", Err: errors.New("connection refused")})
			s.failed(errReasonApply, err)
			return err
		}, outcomeError, errReasonUnreachable},
		{"observe", func(s *memberSync) error {
			err := errors.New("boom")
			s.failed(errReasonObserve, err)
			return err
		}, outcomeError, errReasonObserve},
		{"unexpected error", func(*memberSync) error { return errors.New("boom") }, outcomeError, errReasonApply},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			cluster := "outcome-" + tc.name
			errSeries := testutil.CollectAndCount(memberSyncErrors)
			_, s := m.startSync(context.Background(), cluster, key, p, roleApply)
			s.end(tc.run(&s))
			g.Expect(histogramCount(g, cluster, tc.outcome)).To(BeEquivalentTo(1))
			if tc.errorReason != "" {
				g.Expect(testutil.ToFloat64(memberSyncErrors.WithLabelValues(cluster, tc.errorReason))).To(Equal(1.0))
			} else {
				g.Expect(testutil.CollectAndCount(memberSyncErrors)).To(Equal(errSeries), "no error counted")
			}
		})
	}
}

func histogramCount(g Gomega, cluster, outcome string) uint64 {
	var m dto.Metric
	g.Expect(memberSyncDuration.WithLabelValues(cluster, outcome).(prometheus.Histogram).Write(&m)).To(Succeed())
	return m.GetHistogram().GetSampleCount()
}

// TestMetricsDashboard keeps deploy/dashboards/fleetdb.json in step with the
// metrics: every fleetdb_* series it queries exists, and every metric is on it.
func TestMetricsDashboard(t *testing.T) {
	g := NewWithT(t)
	raw, err := os.ReadFile("../deploy/dashboards/fleetdb.json")
	g.Expect(err).NotTo(HaveOccurred())
	var dash struct {
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	g.Expect(json.Unmarshal(raw, &dash)).To(Succeed())
	known := map[string]bool{}
	for _, m := range []string{MetricMemberSyncDuration, MetricMemberSyncErrors, MetricMemberReachable, MetricDatabases,
		MetricDriftRestored, MetricTeardownWaitingUnreachable} {
		known[m] = false
	}
	series := regexp.MustCompile(`fleetdb_[a-z_]+`)
	for _, p := range dash.Panels {
		for _, target := range p.Targets {
			for _, name := range series.FindAllString(target.Expr, -1) {
				base := strings.TrimSuffix(strings.TrimSuffix(name, "_bucket"), "_count")
				_, ok := known[base]
				g.Expect(ok).To(BeTrue(), "panel %q queries unknown series %s", p.Title, name)
				known[base] = true
			}
		}
	}
	for m, used := range known {
		g.Expect(used).To(BeTrue(), "%s is on no panel", m)
	}
}
