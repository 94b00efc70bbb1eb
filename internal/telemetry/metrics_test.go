package telemetry

import (
	"encoding/json"
	"os"
	"regexp"
	"strings"
	"testing"

	. "github.com/onsi/gomega"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

func TestMetricsCountRestored(t *testing.T) {
	g := NewWithT(t)
	before := testutil.ToFloat64(DriftRestored.WithLabelValues("metrics-m1", "ConfigMap"))
	CountRestored("metrics-m1", []string{"ConfigMap/team-a/orders-config", "StatefulSet/team-a/orders"})
	g.Expect(testutil.ToFloat64(DriftRestored.WithLabelValues("metrics-m1", "ConfigMap"))).To(Equal(before + 1))
	g.Expect(testutil.ToFloat64(DriftRestored.WithLabelValues("metrics-m1", "StatefulSet"))).To(BeNumerically(">=", 1))
}

// TestMetricsDashboard keeps deploy/dashboards/fleetdb.json in step with the
// metrics: every fleetdb_* series it queries exists, and every metric is on it.
func TestMetricsDashboard(t *testing.T) {
	g := NewWithT(t)
	raw, err := os.ReadFile("../../deploy/dashboards/fleetdb.json")
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
