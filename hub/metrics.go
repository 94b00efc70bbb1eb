package hub

import (
	"context"
	"strings"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	fleetv1alpha1 "github.com/fleetdb/fleetdb/apis/v1alpha1"
	"github.com/fleetdb/fleetdb/clusters"
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

// Reasons of fleetdb_member_sync_errors_total.
const (
	errReasonConflict    = "conflict"
	errReasonUnreachable = "unreachable"
	errReasonApply       = "apply"
	errReasonObserve     = "observe"
	errReasonTeardown    = "teardown"
	// errReasonHub: the hub's own read of the Database failed.
	errReasonHub = "hub"
)

// fleetCollectTimeout bounds the cache reads of one scrape.
const fleetCollectTimeout = 5 * time.Second

var (
	memberSyncDuration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    MetricMemberSyncDuration,
		Help:    "Duration of one member sync (one Database in one member cluster), by cluster and outcome.",
		Buckets: []float64{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 15, 30},
	}, []string{"cluster", "outcome"})
	memberSyncErrors = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: MetricMemberSyncErrors,
		Help: "Member syncs that failed, by cluster and reason (conflict, unreachable, apply, observe, teardown, hub).",
	}, []string{"cluster", "reason"})
	driftRestored = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: MetricDriftRestored,
		Help: "Member objects fleetdb put back after they were changed or deleted in the member, by cluster and kind.",
	}, []string{"cluster", "kind"})
	fleetGauges = &fleetCollector{}
)

func init() {
	metrics.Registry.MustRegister(memberSyncDuration, memberSyncErrors, driftRestored, fleetGauges)
}

// countRestored counts restored objects, named "Kind/namespace/name" by member.Apply.
func countRestored(cluster string, restored []string) {
	for _, ref := range restored {
		kind, _, _ := strings.Cut(ref, "/")
		driftRestored.WithLabelValues(cluster, kind).Inc()
	}
}

// fleetSource is what the fleet gauges are computed from: the hub cache, the
// controllers' in-memory state and the registry.
type fleetSource struct {
	hub      client.Reader
	state    *state
	provider *clusters.Provider
}

// fleetCollector computes the fleet gauges when scraped, from the state at
// that moment: nothing to keep in step, no series left behind by a removed
// member or Database. The hub Setup in use is its source (one per process,
// the last one set up in tests that start several).
type fleetCollector struct {
	src atomic.Pointer[fleetSource]
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

// phases are always reported, so every phase has a series even at 0.
var phases = []fleetv1alpha1.Phase{
	fleetv1alpha1.PhasePending, fleetv1alpha1.PhaseProvisioning, fleetv1alpha1.PhaseReady,
	fleetv1alpha1.PhaseDegraded, fleetv1alpha1.PhaseDeleting, fleetv1alpha1.PhaseFailed,
}

func (c *fleetCollector) use(src *fleetSource) { c.src.Store(src) }

// Describe implements prometheus.Collector.
func (c *fleetCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- memberReachableDesc
	ch <- databasesDesc
	ch <- teardownWaitingDesc
}

// Collect implements prometheus.Collector. Reads come from the hub cache; a
// cache that has not started yet gives no series rather than wrong zeros.
func (c *fleetCollector) Collect(ch chan<- prometheus.Metric) {
	src := c.src.Load()
	if src == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), fleetCollectTimeout)
	defer cancel()

	var dbs fleetv1alpha1.DatabaseList
	if err := src.hub.List(ctx, &dbs, client.UnsafeDisableDeepCopy); err == nil {
		counts := make(map[fleetv1alpha1.Phase]int, len(phases))
		for _, p := range phases {
			counts[p] = 0
		}
		for i := range dbs.Items {
			p := dbs.Items[i].Status.Phase
			if p == "" {
				p = fleetv1alpha1.PhasePending
			}
			counts[p]++
		}
		for p, n := range counts {
			ch <- prometheus.MustNewConstMetric(databasesDesc, prometheus.GaugeValue, float64(n), string(p))
		}
	}

	var members fleetv1alpha1.MemberClusterList
	if err := src.hub.List(ctx, &members, client.UnsafeDisableDeepCopy); err == nil {
		for i := range members.Items {
			name := members.Items[i].Name
			h := src.provider.Health(name)
			if !h.Engaged && h.Since.IsZero() {
				// Not (yet) known to this instance's registry, e.g. a standby replica.
				continue
			}
			ch <- prometheus.MustNewConstMetric(memberReachableDesc, prometheus.GaugeValue, boolGauge(h.Engaged && h.Ready), name)
		}
	}

	waiting := src.state.teardownWaitingOn(func(cluster string) bool { return !src.provider.Health(cluster).Ready })
	ch <- prometheus.MustNewConstMetric(teardownWaitingDesc, prometheus.GaugeValue, float64(waiting))
}

// teardownWaitingOn counts the Databases whose plan tears down at least one
// member that down reports unreachable. Plans only hold members that still
// block: one unreachable past spec.teardown.unreachableTimeout has left them.
func (s *state) teardownWaitingOn(down func(cluster string) bool) int {
	s.mu.RLock()
	teardowns := make([][]string, 0, len(s.plans))
	for _, p := range s.plans {
		if len(p.teardown) > 0 {
			teardowns = append(teardowns, sortedKeys(p.teardown))
		}
	}
	s.mu.RUnlock()
	n := 0
	for _, members := range teardowns {
		for _, m := range members {
			if down(m) {
				n++
				break
			}
		}
	}
	return n
}

func boolGauge(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
