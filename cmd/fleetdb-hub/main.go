// Command fleetdb-hub runs fleetdb's hub controllers against a hub cluster.
package main

import (
	"context"
	"flag"
	"os"
	"runtime/debug"
	"time"

	"go.uber.org/zap/zapcore"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/fleetdb/fleetdb/clusters"
	"github.com/fleetdb/fleetdb/hub"
	"github.com/fleetdb/fleetdb/internal/telemetry"
)

// version is the hub's version on its traces; set it with
// -ldflags "-X main.version=v1.2.3", else it comes from the build info.
var version string

// tracingShutdownTimeout bounds the flush of the last spans on exit.
const tracingShutdownTimeout = 5 * time.Second

func main() {
	var (
		cfg     hub.Config
		devLogs bool
	)
	flag.StringVar(&cfg.MetricsAddr, "metrics-bind-address", ":8080", "address of the Prometheus metrics endpoint (0 disables)")
	flag.BoolVar(&cfg.MetricsSecure, "metrics-secure", true,
		"serve metrics over HTTPS to scrapers the hub's API server authenticates and authorizes (get on /metrics); false: plain HTTP open to anyone who reaches it (local runs)")
	flag.StringVar(&cfg.MetricsCertDir, "metrics-cert-dir", "", "directory of the metrics endpoint's tls.crt and tls.key (default: a self-signed certificate made at start)")
	flag.StringVar(&cfg.HealthAddr, "health-probe-bind-address", ":8081", "address of the /healthz and /readyz endpoints (0 disables)")
	flag.StringVar(&cfg.PprofAddr, "pprof-bind-address", "", "address of the net/http/pprof endpoint, e.g. 127.0.0.1:6060 (empty: off)")
	flag.BoolVar(&cfg.LeaderElection.Enabled, "leader-elect", false, "elect a leader so that only one hub replica acts")
	flag.DurationVar(&cfg.LeaderElection.LeaseDuration, "leader-elect-lease-duration", hub.DefaultLeaseDuration,
		"how long a standby waits after the leader's last renewal before it takes over")
	flag.DurationVar(&cfg.LeaderElection.RenewDeadline, "leader-elect-renew-deadline", hub.DefaultRenewDeadline,
		"how long the leader tries to renew its lease before it gives up and exits (less than the lease duration)")
	flag.DurationVar(&cfg.LeaderElection.RetryPeriod, "leader-elect-retry-period", hub.DefaultRetryPeriod,
		"how often the leader renews and a standby tries to take over")
	flag.BoolVar(&cfg.Options.Sharding, "sharding", false,
		"spread the members over the hub replicas (experimental; docs/sharding.md): each member is synced by the replica holding its fence Lease, the elected leader writes Database status")
	var replicaName string
	flag.StringVar(&replicaName, "replica-name", "", "this replica's name in the leader election Lease and in its user agents, before a random suffix (default: the host name)")
	flag.StringVar(&cfg.Options.HubNamespace, "hub-namespace", hub.DefaultHubNamespace, "the hub's own namespace (protected; leader election lease)")
	flag.IntVar(&cfg.Options.DatabaseWorkers, "database-workers", hub.DefaultDatabaseWorkers, "concurrent Database reconciles")
	flag.IntVar(&cfg.Options.MemberWorkers, "member-workers", hub.DefaultMemberWorkers, "concurrent member syncs")
	flag.DurationVar(&cfg.Options.MemberCallTimeout, "member-call-timeout", hub.DefaultMemberCallTimeout, "deadline of one member sync")
	flag.StringVar(&cfg.Options.ImageRepository, "image-repository", "", "repository prefix for engine images (air-gapped fleets), e.g. registry.local/library: <prefix>/postgres|mysql:<version> on the StatefulSet backend, <prefix>/postgresql:<major> on CloudNativePG")
	flag.DurationVar(&cfg.Registry.ProbeInterval, "probe-interval", clusters.DefaultProbeInterval, "how often members are probed")
	flag.DurationVar(&cfg.Registry.FailureGracePeriod, "probe-grace-period", clusters.DefaultFailureGracePeriod, "how long a member may fail probes before it is not Ready")
	flag.DurationVar(&cfg.Registry.ConnectTimeout, "connect-timeout", clusters.DefaultConnectTimeout, "deadline of connecting to a member (cache sync included)")
	var qps float64
	flag.Float64Var(&qps, "member-qps", clusters.DefaultQPS, "client QPS per member")
	flag.IntVar(&cfg.Registry.Burst, "member-burst", clusters.DefaultBurst, "client burst per member")
	flag.BoolVar(&devLogs, "dev-logs", false, "human-readable logs instead of JSON (same as --zap-devel)")
	// controller-runtime's logging flags: --zap-log-level (info by default;
	// debug or 1 turns the hub's V(1) lines on), --zap-encoder, --zap-devel,
	// --zap-stacktrace-level, --zap-time-encoding.
	logOpts := zap.Options{Level: zapcore.InfoLevel, StacktraceLevel: zapcore.PanicLevel}
	logOpts.BindFlags(flag.CommandLine)
	flag.Parse()
	cfg.Registry.QPS = float32(qps)
	if devLogs {
		logOpts.Development = true
	}

	ctrl.SetLogger(zap.New(zap.UseFlagOptions(&logOpts)))
	log := ctrl.Log.WithName("fleetdb-hub")

	restCfg, err := ctrl.GetConfig()
	if err != nil {
		log.Error(err, "no hub kubeconfig")
		os.Exit(1)
	}
	cfg.Hub = restCfg
	if cfg.ReplicaID, err = hub.NewReplicaID(replicaName); err != nil {
		log.Error(err, "no replica identity")
		os.Exit(1)
	}
	cfg.Version = buildVersion()
	ctx := ctrl.SetupSignalHandler()

	// Tracing is configured by the OTEL_* environment variables and off
	// without an endpoint; a bad configuration leaves it off rather than
	// keeping the hub down.
	stopTracing, err := telemetry.SetupTracing(ctx, cfg.Version)
	if err != nil {
		log.Error(err, "tracing is off: bad OpenTelemetry configuration")
	}
	mgr, _, err := hub.NewManager(ctx, cfg)
	if err != nil {
		log.Error(err, "setting up the hub")
		os.Exit(1)
	}
	_ = mgr.GetLocalManager().AddHealthzCheck("ping", healthz.Ping)
	_ = mgr.GetLocalManager().AddReadyzCheck("ping", healthz.Ping)
	start := time.Now()
	log.Info("starting fleetdb hub", "hubNamespace", cfg.Options.HubNamespace, "replica", cfg.ReplicaID,
		"leaderElection", cfg.LeaderElection.Enabled, "sharding", cfg.Options.Sharding)
	err = mgr.Start(ctx)
	// The last spans go out before the process does.
	sctx, cancel := context.WithTimeout(context.Background(), tracingShutdownTimeout)
	if serr := stopTracing(sctx); serr != nil {
		log.Error(serr, "flushing the last spans")
	}
	cancel()
	if err != nil {
		log.Error(err, "hub stopped with an error", "uptime", time.Since(start).String())
		os.Exit(1)
	}
}

func buildVersion() string {
	if version != "" {
		return version
	}
	if info, ok := debug.ReadBuildInfo(); ok {
		if v := info.Main.Version; v != "" && v != "(devel)" {
			return v
		}
		for _, s := range info.Settings {
			if s.Key == "vcs.revision" {
				return s.Value
			}
		}
	}
	return "dev"
}
