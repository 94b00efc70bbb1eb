package clusters

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/cluster"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/multicluster-runtime/pkg/multicluster"

	fleetv1alpha1 "github.com/fleetdb/fleetdb/apis/v1alpha1"
)

// Defaults for Options.
const (
	// DefaultProbeInterval is how often every member is probed.
	DefaultProbeInterval = 10 * time.Second
	// DefaultProbeTimeout bounds one probe (/readyz plus /version).
	DefaultProbeTimeout = 5 * time.Second
	// DefaultFailureGracePeriod is how long an engaged member may fail its
	// probes before it becomes Ready=False; a single blip does not flap.
	DefaultFailureGracePeriod = 20 * time.Second
	// DefaultConnectTimeout bounds one connect: preflight, cluster creation,
	// field indexes and the cache-sync wait.
	DefaultConnectTimeout = 30 * time.Second
	// DefaultQPS is the client-side QPS limit of each member's rest config.
	DefaultQPS = 100
	// DefaultBurst is the client-side burst of each member's rest config.
	DefaultBurst = 200
	// DefaultKubeconfigSecretKey is the Secret key read when
	// spec.kubeconfigSecretRef.key is empty.
	DefaultKubeconfigSecretKey = "kubeconfig"
)

// KubeconfigSecretIndex is the hub field index on MemberCluster that maps
// "<namespace>/<name>" of the kubeconfig Secret to the MemberClusters using it.
// SetupWithManager registers it on the hub's local manager.
const KubeconfigSecretIndex = "spec.kubeconfigSecretRef"

const (
	// hubCallTimeout bounds every call the provider makes to the hub API server.
	hubCallTimeout = 10 * time.Second
	// connectBackoffBase and connectBackoffMax bound the retry delay after a
	// failed connect: base, 2*base, 4*base, ... up to max.
	connectBackoffBase = time.Second
	connectBackoffMax  = 5 * time.Minute
	// notStartedRetry is how soon a MemberCluster is retried when it is
	// reconciled before the manager started the provider.
	notStartedRetry = 500 * time.Millisecond
)

// Options configure a Provider. Zero values take the Default* constants.
type Options struct {
	// Scheme is the scheme of every member cluster (built-in types plus what
	// the hub needs in members). Default: client-go's scheme.
	Scheme *runtime.Scheme

	// ProbeInterval is how often every member is probed.
	ProbeInterval time.Duration
	// ProbeTimeout bounds one probe.
	ProbeTimeout time.Duration
	// FailureGracePeriod is how long an engaged member may fail its probes
	// before it becomes Ready=False.
	FailureGracePeriod time.Duration
	// ConnectTimeout bounds one connect attempt, cache sync included.
	ConnectTimeout time.Duration

	// QPS and Burst are set on every member's rest config.
	QPS   float32
	Burst int

	// ClusterOptions are applied to every member cluster after the provider's
	// own (scheme, logger); the hub uses them to restrict member caches.
	ClusterOptions []cluster.Option

	// SecretNamespace is the hub's namespace: kubeconfig Secrets are read
	// from it and from nowhere else. Default: DefaultSecretNamespace.
	SecretNamespace string

	// UserAgent, when set, is the user agent of every member client
	// (clusters, probes and ConfigFor): members' audit logs then tell which
	// hub replica wrote. Default: client-go's, from the binary's name.
	UserAgent string

	// WrapTransport, when set, wraps the transport of every member rest config
	// (clusters, probes and ConfigFor), e.g. for tracing or counting requests.
	WrapTransport func(cluster string, rt http.RoundTripper) http.RoundTripper

	// EveryReplica runs the MemberCluster controller on every hub replica,
	// not only on the elected leader (a sharded hub: every replica connects
	// to every member); see SetStatusWriter.
	EveryReplica bool
}

// Health is the provider's in-memory view of one member.
type Health struct {
	// Engaged is true while the member's cluster is engaged with the manager.
	Engaged bool
	// Ready is the member's Ready condition: engaged and passing its probes
	// (within the failure grace period).
	Ready bool
	// Reason is the Ready condition's reason. Message is a fixed text for
	// that reason, safe to show tenants: never an address or a member's
	// answer (the MemberCluster's conditions keep those details).
	Reason, Message string
	// Since is when Ready last changed (or the member was first seen).
	Since time.Time
	// LastProbe is when the member was last probed.
	LastProbe time.Time
	// Backends the member offers (sorted), as its probes discovered them;
	// nil until a probe has told. Subscribers hear of changes.
	Backends []fleetv1alpha1.Backend
}

// Usable reports a member the hub can act in now: engaged and Ready.
func (h Health) Usable() bool { return h.Engaged && h.Ready }

// Unreachable reports a member whose health is not Ready, with why.
func (h Health) Unreachable() (bool, string) {
	if h.Ready {
		return false, ""
	}
	why := h.Message
	if why == "" {
		why = h.Reason
	}
	if why == "" {
		why = "not connected"
	}
	return true, why
}

// StatusUnreachable is Unreachable but for a member this hub process has
// not finished connecting to yet (the registry has no health for it, or it
// is Connecting: right after a hub restart, or with a new kubeconfig): that
// one is not known to be down, so its status entry keeps what was last
// reported (dbstatus.Compute) instead of turning Unreachable. Without it every
// restart of the hub flipped Ready Databases to Degraded for the seconds
// the connects take (found by the restart chaos run, docs/reports/chaos.md; the
// member sync records nothing for such a member either). A
// failed connect or failing probes still show at once; the teardown still
// treats a member it cannot reach yet as unreachable (the Database controller's teardownSettled).
func (h Health) StatusUnreachable() (bool, string) {
	if h.NotKnownYet() {
		return false, ""
	}
	return h.Unreachable()
}

// NotKnownYet reports a member this hub process has not finished
// connecting to: never engaged, no failure recorded (the registry has no
// health for it yet, or it is Connecting).
func (h Health) NotKnownYet() bool {
	return !h.Engaged && !h.Ready && (h.Reason == "" || h.Reason == fleetv1alpha1.ReasonConnecting)
}

var (
	_ multicluster.Provider         = &Provider{}
	_ multicluster.ProviderRunnable = &Provider{}
)

// Provider engages member clusters from MemberCluster objects and their
// kubeconfig Secrets on the hub. Create it with New, register it with
// SetupWithManager; the multicluster manager calls Start.
type Provider struct {
	opts Options

	mu sync.RWMutex
	// statusWriter, when set, says whether this replica writes
	// MemberCluster status now (SetStatusWriter).
	statusWriter func() bool
	members      map[string]*member
	indexers     []index
	subs         []*subscriber
	// Set by SetupWithManager.
	hub       client.Client
	hubReader client.Reader
	log       logr.Logger
	// Set when the controller starts (queue) and the provider starts (ctx, aware).
	queue workqueue.TypedRateLimitingInterface[reconcile.Request]
	ctx   context.Context
	aware multicluster.Aware
	// done is closed when Start returns; it ends subscriptions.
	done chan struct{}
}

type index struct {
	obj     client.Object
	field   string
	extract client.IndexerFunc
}

// New returns a Provider with opts, defaulted.
func New(opts Options) *Provider {
	if opts.Scheme == nil {
		opts.Scheme = clientgoscheme.Scheme
	}
	if opts.ProbeInterval <= 0 {
		opts.ProbeInterval = DefaultProbeInterval
	}
	if opts.ProbeTimeout <= 0 {
		opts.ProbeTimeout = DefaultProbeTimeout
	}
	if opts.FailureGracePeriod <= 0 {
		opts.FailureGracePeriod = DefaultFailureGracePeriod
	}
	if opts.ConnectTimeout <= 0 {
		opts.ConnectTimeout = DefaultConnectTimeout
	}
	if opts.QPS == 0 {
		opts.QPS = DefaultQPS
	}
	if opts.Burst == 0 {
		opts.Burst = DefaultBurst
	}
	if opts.SecretNamespace == "" {
		opts.SecretNamespace = DefaultSecretNamespace
	}
	return &Provider{
		opts:    opts,
		members: map[string]*member{},
		log:     logr.Discard(),
		done:    make(chan struct{}),
	}
}

// Get returns the engaged cluster with the given name, or an error wrapping
// multicluster.ErrClusterNotFound.
func (p *Provider) Get(_ context.Context, name multicluster.ClusterName) (cluster.Cluster, error) {
	p.mu.RLock()
	defer p.mu.RUnlock()
	if m := p.members[string(name)]; m != nil && m.run != nil && m.run.cl != nil {
		return m.run.cl, nil
	}
	return nil, fmt.Errorf("member cluster %q: %w", name, multicluster.ErrClusterNotFound)
}

// IndexField indexes obj by field on every member cluster, current and future.
func (p *Provider) IndexField(ctx context.Context, obj client.Object, field string, extract client.IndexerFunc) error {
	p.mu.Lock()
	p.indexers = append(p.indexers, index{obj: obj, field: field, extract: extract})
	// Clusters still connecting took their snapshot of indexers under this
	// lock before they were recorded as pending, so each (cluster, index)
	// pair is applied exactly once: here or in connect.
	targets := map[string]cluster.Cluster{}
	for name, m := range p.members {
		if r := m.run; r != nil {
			if r.cl != nil {
				targets[name] = r.cl
			} else if r.pending != nil {
				targets[name] = r.pending
			}
		}
	}
	p.mu.Unlock()

	var errs []error
	for name, cl := range targets {
		if err := cl.GetFieldIndexer().IndexField(ctx, obj, field, extract); err != nil {
			errs = append(errs, fmt.Errorf("indexing field %q in member cluster %q: %w", field, name, err))
		}
	}
	return errors.Join(errs...)
}

// Start runs the provider until ctx ends: members are engaged with aware, their
// clusters and probes live in contexts derived from ctx. Start is called by the
// multicluster manager; it needs SetupWithManager first.
func (p *Provider) Start(ctx context.Context, aware multicluster.Aware) error {
	p.mu.Lock()
	switch {
	case p.hub == nil:
		p.mu.Unlock()
		return errors.New("clusters provider: Start called before SetupWithManager")
	case p.ctx != nil:
		p.mu.Unlock()
		return errors.New("clusters provider: already started")
	}
	p.ctx, p.aware = ctx, aware
	p.mu.Unlock()
	p.log.Info("Starting member cluster provider")

	<-ctx.Done()

	p.mu.Lock()
	members := p.members
	p.members = map[string]*member{}
	p.mu.Unlock()
	for _, m := range members {
		if m.run != nil {
			m.run.cancel()
		}
	}
	close(p.done)
	p.log.Info("Stopped member cluster provider")
	return nil
}

// Health returns the latest in-memory view of the member; the zero value when
// the provider does not know it.
func (p *Provider) Health(name string) Health {
	p.mu.RLock()
	defer p.mu.RUnlock()
	if m := p.members[name]; m != nil {
		return m.health
	}
	return Health{}
}

// ConfigFor returns a copy of the member's rest config (QPS, Burst and
// WrapTransport applied) while the member has a valid kubeconfig, engaged or
// still connecting. Callers bound their calls with context deadlines.
func (p *Provider) ConfigFor(name string) (*rest.Config, bool) {
	p.mu.RLock()
	defer p.mu.RUnlock()
	if m := p.members[name]; m != nil && m.run != nil {
		return rest.CopyConfig(m.run.cfg), true
	}
	return nil, false
}

// started reports whether Start has run.
func (p *Provider) started() bool {
	p.mu.RLock()
	defer p.mu.RUnlock()
	return p.ctx != nil
}

// enqueue asks the MemberCluster controller to reconcile the member (and so
// write its status). It never blocks; before the controller starts it is a
// no-op, the controller's initial list covers every member then.
func (p *Provider) enqueue(name string) {
	p.mu.RLock()
	q := p.queue
	p.mu.RUnlock()
	if q != nil {
		q.Add(reconcile.Request{NamespacedName: types.NamespacedName{Name: name}})
	}
}

// ResyncStatus runs a status pass for every member the provider knows: a
// replica that starts writing MemberCluster status (the elected leader of
// replicas that all run the provider) writes what changed while it did not;
// a member whose view did not change is written nothing.
func (p *Provider) ResyncStatus() {
	p.mu.RLock()
	names := p.knownLocked()
	p.mu.RUnlock()
	for _, name := range names {
		p.enqueue(name)
	}
}

// knownLocked returns the members the provider knows, sorted; p.mu held.
func (p *Provider) knownLocked() []string {
	return slices.Sorted(maps.Keys(p.members))
}

// SetStatusWriter makes the provider write MemberCluster status only while
// writer returns true (a sharded hub: the elected leader); call it before
// Start. Without it the provider always writes.
func (p *Provider) SetStatusWriter(writer func() bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.statusWriter = writer
}

// writesStatus reports whether this replica writes MemberCluster status now.
func (p *Provider) writesStatus() bool {
	p.mu.RLock()
	defer p.mu.RUnlock()
	return p.statusWriter == nil || p.statusWriter()
}
