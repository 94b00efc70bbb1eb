package integration

import (
	"net"
	"net/http"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleetv1alpha1 "github.com/fleetdb/fleetdb/apis/v1alpha1"
	"github.com/fleetdb/fleetdb/internal/telemetry"
)

// TestMetrics scrapes the hub's metrics endpoint while a Database goes
// through its life on three members, one of which drops off the network:
// fleetdb's series exist and move.
func TestMetrics(t *testing.T) {
	addr := freeAddr(t)
	e := startEnvWith(t, envOptions{metricsAddr: addr}, "m1", "m2", "m3")
	members := []string{"m1", "m2", "m3"}
	for _, m := range members {
		e.sim.enable(m, true)
	}
	g := NewWithT(t)
	scrape := func(g Gomega) metricsSnapshot {
		resp, err := http.Get("http://" + addr + "/metrics")
		g.Expect(err).NotTo(HaveOccurred())
		defer resp.Body.Close()
		g.Expect(resp.StatusCode).To(Equal(http.StatusOK))
		parser := expfmt.NewTextParser(model.UTF8Validation)
		families, err := parser.TextToMetricFamilies(resp.Body)
		g.Expect(err).NotTo(HaveOccurred())
		return families
	}

	ns := e.namespace("metrics")
	db := newDB(ns, "orders", members...)
	db.Spec.Teardown.UnreachableTimeout = &metav1.Duration{Duration: time.Hour}
	g.Expect(e.hub.Create(e.ctx, db)).To(Succeed())
	g.Eventually(func(g Gomega) {
		g.Expect(e.getDB(ns, "orders").Status.Phase).To(Equal(fleetv1alpha1.PhaseReady))
	}).WithTimeout(eventually).WithPolling(poll).Should(Succeed())

	g.Eventually(func(g Gomega) {
		s := scrape(g)
		for _, m := range members {
			g.Expect(s.histogramCount(telemetry.MetricMemberSyncDuration, "cluster", m, "outcome", "synced")).To(BeNumerically(">", 0), m)
			g.Expect(s.value(g, telemetry.MetricMemberReachable, "cluster", m)).To(Equal(1.0), m)
		}
		g.Expect(s.value(g, telemetry.MetricDatabases, "phase", "Ready")).To(BeNumerically(">=", 1))
		for _, phase := range []string{"Pending", "Provisioning", "Degraded", "Deleting", "Failed"} {
			g.Expect(s.has(telemetry.MetricDatabases, "phase", phase)).To(BeTrue(), "every phase has a series: %s", phase)
		}
		g.Expect(s.value(g, telemetry.MetricTeardownWaitingUnreachable)).To(Equal(0.0))
	}).WithTimeout(eventually).WithPolling(poll).Should(Succeed())

	// Drift: a ConfigMap deleted in m1 is put back and counted.
	restoredBefore := scrape(g).valueOr0(telemetry.MetricDriftRestored, "cluster", "m1", "kind", "ConfigMap")
	g.Expect(e.member("m1").Delete(e.ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "orders-config"}})).To(Succeed())
	g.Eventually(func(g Gomega) {
		g.Expect(scrape(g).value(g, telemetry.MetricDriftRestored, "cluster", "m1", "kind", "ConfigMap")).To(BeNumerically(">", restoredBefore))
	}).WithTimeout(eventually).WithPolling(poll).Should(Succeed())

	// m3 drops off the network: it is unreachable, and its syncs fail for that reason.
	unreachableBefore := scrape(g).valueOr0(telemetry.MetricMemberSyncErrors, "cluster", "m3", "reason", "unreachable")
	e.proxies["m3"].Cut()
	g.Eventually(func(g Gomega) {
		s := scrape(g)
		g.Expect(s.value(g, telemetry.MetricMemberReachable, "cluster", "m3")).To(Equal(0.0))
		g.Expect(s.value(g, telemetry.MetricMemberReachable, "cluster", "m1")).To(Equal(1.0))
		g.Expect(s.value(g, telemetry.MetricMemberSyncErrors, "cluster", "m3", "reason", "unreachable")).To(BeNumerically(">", unreachableBefore))
		g.Expect(s.value(g, telemetry.MetricDatabases, "phase", "Degraded")).To(BeNumerically(">=", 1))
	}).WithTimeout(eventually).WithPolling(poll).Should(Succeed())

	// Deleting the Database now waits on m3 (timeout one hour) ...
	g.Expect(e.hub.Delete(e.ctx, e.getDB(ns, "orders"))).To(Succeed())
	g.Eventually(func(g Gomega) {
		s := scrape(g)
		g.Expect(s.value(g, telemetry.MetricTeardownWaitingUnreachable)).To(Equal(1.0))
		g.Expect(s.value(g, telemetry.MetricDatabases, "phase", "Deleting")).To(BeNumerically(">=", 1))
	}).WithTimeout(eventually).WithPolling(poll).Should(Succeed())

	// ... until m3 is back: the teardown finishes and nothing waits.
	g.Expect(e.proxies["m3"].Restore()).To(Succeed())
	g.Eventually(func(g Gomega) {
		g.Expect(apierrors.IsNotFound(e.hub.Get(e.ctx, client.ObjectKey{Namespace: ns, Name: "orders"}, &fleetv1alpha1.Database{}))).To(BeTrue())
		s := scrape(g)
		g.Expect(s.value(g, telemetry.MetricMemberReachable, "cluster", "m3")).To(Equal(1.0))
		g.Expect(s.value(g, telemetry.MetricTeardownWaitingUnreachable)).To(Equal(0.0))
		g.Expect(s.histogramCount(telemetry.MetricMemberSyncDuration, "cluster", "m3", "outcome", "torn_down")).To(BeNumerically(">", 0))
	}).WithTimeout(eventually).WithPolling(poll).Should(Succeed())
}

// freeAddr picks a loopback address nothing listens on (the metrics server
// does not tell which port it bound).
func freeAddr(t *testing.T) string {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	NewWithT(t).Expect(err).NotTo(HaveOccurred())
	addr := lis.Addr().String()
	NewWithT(t).Expect(lis.Close()).To(Succeed())
	return addr
}

// metricsSnapshot is one scrape, by metric family.
type metricsSnapshot map[string]*dto.MetricFamily

// find returns the series of name with exactly the given label pairs among its labels.
func (s metricsSnapshot) find(name string, labels ...string) *dto.Metric {
	f := s[name]
	if f == nil {
		return nil
	}
	for _, m := range f.GetMetric() {
		have := map[string]string{}
		for _, l := range m.GetLabel() {
			have[l.GetName()] = l.GetValue()
		}
		match := true
		for i := 0; i+1 < len(labels); i += 2 {
			match = match && have[labels[i]] == labels[i+1]
		}
		if match {
			return m
		}
	}
	return nil
}

func (s metricsSnapshot) has(name string, labels ...string) bool {
	return s.find(name, labels...) != nil
}

// value of a gauge or counter, which must exist.
func (s metricsSnapshot) value(g Gomega, name string, labels ...string) float64 {
	g.ExpectWithOffset(1, s.has(name, labels...)).To(BeTrue(), "series %s%v", name, labels)
	return s.valueOr0(name, labels...)
}

// valueOr0 of a gauge or counter; 0 when the series does not exist (yet).
func (s metricsSnapshot) valueOr0(name string, labels ...string) float64 {
	m := s.find(name, labels...)
	switch {
	case m == nil:
		return 0
	case m.GetGauge() != nil:
		return m.GetGauge().GetValue()
	case m.GetCounter() != nil:
		return m.GetCounter().GetValue()
	}
	return 0
}

func (s metricsSnapshot) histogramCount(name string, labels ...string) uint64 {
	return s.find(name, labels...).GetHistogram().GetSampleCount()
}
