package hub

import (
	"context"
	"fmt"
	"net/http"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	mcmanager "sigs.k8s.io/multicluster-runtime/pkg/manager"

	fleetv1alpha1 "github.com/fleetdb/fleetdb/apis/v1alpha1"
	"github.com/fleetdb/fleetdb/clusters"
	"github.com/fleetdb/fleetdb/hub/internal/database"
	"github.com/fleetdb/fleetdb/internal/telemetry"
)

// NewScheme returns the scheme of the hub and its members.
func NewScheme() (*runtime.Scheme, error) {
	s := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(s); err != nil {
		return nil, err
	}
	if err := fleetv1alpha1.AddToScheme(s); err != nil {
		return nil, err
	}
	return s, nil
}

// Config is everything needed to run a hub.
type Config struct {
	// Hub is the hub cluster's rest config.
	Hub *rest.Config
	// Options tune the controllers.
	Options database.Options
	// Registry tunes the cluster registry; Scheme and ClusterOptions are set by NewManager.
	Registry clusters.Options
	// MetricsAddr and HealthAddr are the listen addresses ("0" disables).
	MetricsAddr, HealthAddr string
	// MetricsSecure serves metrics over HTTPS to authenticated and
	// authorized scrapers only (metricsOptions); false: plain HTTP, open.
	MetricsSecure bool
	// MetricsCertDir holds the metrics endpoint's tls.crt and tls.key
	// (empty or without them: a self-signed certificate made at start).
	MetricsCertDir string
	// PprofAddr serves net/http/pprof when set (empty or "0": off).
	PprofAddr string
	// LeaderElection elects the one replica that acts (Lease
	// LeaderElectionID in the hub namespace).
	LeaderElection LeaderElection
	// ReplicaID is this replica's identity in the Lease and in its user
	// agents (NewReplicaID); empty: NewReplicaID("").
	ReplicaID string
	// Version is the hub's version in its user agents (empty: "dev").
	Version string
	// Logger is the manager's logger, and so the controllers'; the zero
	// value is controller-runtime's global one (ctrl.SetLogger).
	Logger logr.Logger
	// SkipControllerNameValidation lets several hubs run in one process
	// (tests): controller names are otherwise unique per process, for metrics.
	SkipControllerNameValidation bool
}

// NewManager builds a multicluster manager with the registry provider and
// fleetdb's controllers; the caller runs mgr.Start.
func NewManager(ctx context.Context, cfg Config) (mcmanager.Manager, *clusters.Provider, error) {
	scheme, err := NewScheme()
	if err != nil {
		return nil, nil, err
	}
	opts := cfg.Options.WithDefaults()
	reg := cfg.Registry
	reg.Scheme = scheme
	reg.ClusterOptions = append(database.MemberClusterOptions(), reg.ClusterOptions...)
	reg.SecretNamespace = opts.HubNamespace
	// API calls made inside traced reconciles are client spans of their
	// trace, in the members and on the hub.
	wrap := reg.WrapTransport
	reg.WrapTransport = func(cluster string, rt http.RoundTripper) http.RoundTripper {
		if wrap != nil {
			rt = wrap(cluster, rt)
		}
		return telemetry.Transport(cluster, rt)
	}
	if cfg.ReplicaID == "" {
		if cfg.ReplicaID, err = NewReplicaID(""); err != nil {
			return nil, nil, err
		}
	}
	// Every request of this replica, to the hub and to members, names it.
	reg.UserAgent = UserAgent(cfg.Version, cfg.ReplicaID)
	if opts.Sharding || cfg.LeaderElection.Enabled {
		// Every replica connects to every member (and probes it): a
		// standby is warm. The MemberCluster status is written by the
		// elected leader only.
		reg.EveryReplica = true
	}
	provider := clusters.New(reg)

	hubCfg := rest.CopyConfig(cfg.Hub)
	hubCfg.UserAgent = reg.UserAgent
	hubCfg.Wrap(func(rt http.RoundTripper) http.RoundTripper { return telemetry.Transport("", rt) })
	if hubCfg.QPS == 0 {
		hubCfg.QPS, hubCfg.Burst = 100, 200
	}
	// No rest.Config.Timeout: client-go turns it into http.Client.Timeout,
	// which would cut every watch. Calls are bounded by their contexts.
	mopts := manager.Options{
		Scheme:                 scheme,
		Cache:                  hubCacheOptions(opts.HubNamespace),
		Logger:                 cfg.Logger,
		Controller:             config.Controller{SkipNameValidation: ptr.To(cfg.SkipControllerNameValidation)},
		Metrics:                metricsOptions(cfg),
		HealthProbeBindAddress: orDisabled(cfg.HealthAddr),
		PprofBindAddress:       orDisabled(cfg.PprofAddr),
	}
	if err := leaderElectionOptions(ctx, &mopts, cfg, opts.HubNamespace); err != nil {
		return nil, nil, err
	}
	mgr, err := database.NewMCManager(hubCfg, provider, mopts, cfg.Logger, cfg.ReplicaID, &opts)
	if err != nil {
		return nil, nil, fmt.Errorf("creating manager: %w", err)
	}
	if err := provider.SetupWithManager(ctx, mgr); err != nil {
		return nil, nil, fmt.Errorf("setting up the cluster registry: %w", err)
	}
	if opts.HubID == "" {
		direct, err := client.New(hubCfg, client.Options{Scheme: scheme})
		if err != nil {
			return nil, nil, fmt.Errorf("hub client: %w", err)
		}
		if opts.HubID, err = ensureHubIdentity(ctx, direct, opts.HubNamespace); err != nil {
			return nil, nil, err
		}
	}
	if err := database.Setup(ctx, mgr, provider, opts); err != nil {
		return nil, nil, err
	}
	return mgr, provider, nil
}

// leaderElectionOptions sets the manager's leader election from cfg: the
// Lease LeaderElectionID in the hub namespace held under cfg.ReplicaID,
// released on a clean stop (the process exits right after mgr.Start returns).
func leaderElectionOptions(ctx context.Context, mopts *manager.Options, cfg Config, namespace string) error {
	if !cfg.LeaderElection.Enabled {
		return nil
	}
	le := cfg.LeaderElection.withDefaults()
	if err := le.validate(); err != nil {
		return err
	}
	lockCfg := rest.CopyConfig(cfg.Hub)
	lockCfg.UserAgent = UserAgent(cfg.Version, cfg.ReplicaID)
	lock, err := newLeaseLock(ctx, lockCfg, namespace, cfg.ReplicaID, le)
	if err != nil {
		return err
	}
	mopts.LeaderElection = true
	mopts.LeaderElectionID = LeaderElectionID
	mopts.LeaderElectionNamespace = namespace
	mopts.LeaderElectionResourceLockInterface = lock
	mopts.LeaderElectionReleaseOnCancel = true
	mopts.LeaseDuration, mopts.RenewDeadline, mopts.RetryPeriod = &le.LeaseDuration, &le.RenewDeadline, &le.RetryPeriod
	return nil
}

func orDisabled(addr string) string {
	if addr == "" {
		return "0"
	}
	return addr
}
