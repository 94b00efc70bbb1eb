package telemetry

import (
	"context"
	"maps"
	"strings"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	fleetv1alpha1 "github.com/fleetdb/fleetdb/apis/v1alpha1"
)

// Metric names, served with controller-runtime's on the hub's metrics endpoint.
const (
	MetricMemberSyncDuration         = "fleetdb_member_sync_duration_seconds"
	MetricMemberSyncErrors           = "fleetdb_member_sync_errors_total"
	MetricMemberReachable            = "fleetdb_member_reachable"
	MetricDatabases                  = "fleetdb_databases"
	MetricDriftRestored              = "fleetdb_drift_restored_total"
	MetricTeardownWaitingUnreachable = "fleetdb_teardown_waiting_unreachable"
)

// fleetCollectTimeout bounds the reads of one scrape.
const fleetCollectTimeout = 5 * time.Second

var (
	// MemberSyncDuration is fleetdb_member_sync_duration_seconds; record with ObserveMemberSync.
	MemberSyncDuration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    MetricMemberSyncDuration,
		Help:    "Duration of one member sync (one Database in one member cluster), by cluster and outcome.",
		Buckets: []float64{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 15, 30},
	}, []string{"cluster", "outcome"})
	// MemberSyncErrors is fleetdb_member_sync_errors_total; record with CountMemberSyncError.
	MemberSyncErrors = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: MetricMemberSyncErrors,
		Help: "Member syncs that failed, by cluster and reason (conflict, unreachable, apply, observe, teardown, hub).",
	}, []string{"cluster", "reason"})
	// DriftRestored is fleetdb_drift_restored_total; record with CountRestored.
	DriftRestored = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: MetricDriftRestored,
		Help: "Member objects fleetdb put back after they were changed or deleted in the member, by cluster and kind.",
	}, []string{"cluster", "kind"})
	// FleetGauges computes the fleet gauges at scrape time from the FleetSource in use.
	FleetGauges = &FleetCollector{}
)

func init() {
	metrics.Registry.MustRegister(MemberSyncDuration, MemberSyncErrors, DriftRestored, FleetGauges)
}

// ObserveMemberSync records the duration of a member sync that ended with outcome.
func ObserveMemberSync(cluster, outcome string, d time.Duration) {
	MemberSyncDuration.WithLabelValues(cluster, outcome).Observe(d.Seconds())
}

// CountMemberSyncError counts a member sync that failed for reason.
func CountMemberSyncError(cluster, reason string) {
	MemberSyncErrors.WithLabelValues(cluster, reason).Inc()
}

// CountRestored counts restored objects, named "Kind/namespace/name" by member.Apply.
func CountRestored(cluster string, restored []string) {
	for _, ref := range restored {
		kind, _, _ := strings.Cut(ref, "/")
		DriftRestored.WithLabelValues(cluster, kind).Inc()
	}
}

// Fleet is what the fleet gauges report, read at scrape time.
type Fleet struct {
	// Databases counts Databases by status phase; nil when they could not
	// be read (a cache that has not started gives no series, not wrong zeros).
	Databases map[fleetv1alpha1.Phase]int
	// Reachable says, per member this hub instance manages, whether it is
	// engaged and passes its probes; nil when unknown.
	Reachable map[string]bool
	// TeardownWaiting counts Databases whose teardown waits on an unreachable member.
	TeardownWaiting int
}

// FleetSource reads the fleet for a scrape.
type FleetSource interface {
	Fleet(ctx context.Context) Fleet
}

// FleetCollector computes the fleet gauges when scraped, from the state at
// that moment: nothing to keep in step, no series left behind by a removed
// member or Database. The source set last is used (one hub per process, the
// last one set up in tests that start several).
type FleetCollector struct {
	src atomic.Pointer[FleetSource]
}

var (
	memberReachableDesc = prometheus.NewDesc(MetricMemberReachable,
		"1 when the member cluster is engaged and passes its probes, 0 otherwise; only members this hub instance manages.",
		[]string{"cluster"}, nil)
	databasesDesc = prometheus.NewDesc(MetricDatabases,
		"Databases on the hub by status phase (a Database without a phase yet counts as Pending).",
		[]string{"phase"}, nil)
	teardownWaitingDesc = prometheus.NewDesc(MetricTeardownWaitingUnreachable,
		"Databases whose teardown (deletion, or removal from a member dropped from placement) waits on an unreachable member.",
		nil, nil)
)

// Phases are always reported, so every phase has a series even at 0.
var Phases = []fleetv1alpha1.Phase{
	fleetv1alpha1.PhasePending, fleetv1alpha1.PhaseProvisioning, fleetv1alpha1.PhaseReady,
	fleetv1alpha1.PhaseDegraded, fleetv1alpha1.PhaseDeleting, fleetv1alpha1.PhaseFailed,
}

// Use makes src the source of the gauges.
func (c *FleetCollector) Use(src FleetSource) { c.src.Store(&src) }

// Describe implements prometheus.Collector.
func (c *FleetCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- memberReachableDesc
	ch <- databasesDesc
	ch <- teardownWaitingDesc
}

// Collect implements prometheus.Collector.
func (c *FleetCollector) Collect(ch chan<- prometheus.Metric) {
	src := c.src.Load()
	if src == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), fleetCollectTimeout)
	defer cancel()
	f := (*src).Fleet(ctx)
	if f.Databases != nil {
		counts := maps.Clone(f.Databases)
		for _, p := range Phases {
			counts[p] += 0
		}
		for p, n := range counts {
			ch <- prometheus.MustNewConstMetric(databasesDesc, prometheus.GaugeValue, float64(n), string(p))
		}
	}
	for name, ok := range f.Reachable {
		ch <- prometheus.MustNewConstMetric(memberReachableDesc, prometheus.GaugeValue, boolGauge(ok), name)
	}
	ch <- prometheus.MustNewConstMetric(teardownWaitingDesc, prometheus.GaugeValue, float64(f.TeardownWaiting))
}

func boolGauge(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
