package clusters

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"slices"
	"time"

	"k8s.io/client-go/discovery"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/transport"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cluster"
	"sigs.k8s.io/multicluster-runtime/pkg/multicluster"

	fleetv1alpha1 "github.com/fleetdb/fleetdb/apis/v1alpha1"
)

// newRun parses the kubeconfig and builds the run for it, or returns why the
// kubeconfig is unusable (InvalidKubeconfig). Nothing is contacted yet. The
// caller holds p.mu and has seen the provider started.
func (p *Provider) newRun(name string, data []byte, policy fleetv1alpha1.ConnectionPolicy) (*run, *failure) {
	if bad := checkKubeconfig(data, policy); bad != nil {
		return nil, bad
	}
	cfg, err := p.restConfig(name, data)
	if err != nil {
		return nil, &failure{reason: fleetv1alpha1.ReasonInvalidKubeconfig, message: truncate(err.Error())}
	}
	prober, err := newProber(cfg, p.opts.ProbeTimeout)
	if err != nil {
		return nil, &failure{reason: fleetv1alpha1.ReasonInvalidKubeconfig, message: truncate(err.Error())}
	}
	ctx, cancel := context.WithCancel(ctrl.LoggerInto(p.ctx, p.log.WithValues("cluster", name)))
	return &run{ctx: ctx, cancel: cancel, cfg: cfg, prober: prober, lastProbeOK: true}, nil
}

// quoted matches what YAML and JSON decoding errors quote of their input; it
// is cut from messages so that no part of a Secret reaches a status or a log.
var quoted = regexp.MustCompile("`[^`]*`|'[^']*'")

// restConfig turns kubeconfig bytes into the member's rest config.
//
// Kubeconfigs that make the hub run commands (exec plugins, auth providers) or
// read its local files (token, certificate and key files) are refused: whoever
// may write the Secret must not get to run code or read credentials on the hub.
//
// The config gets QPS, Burst and WrapTransport; its Timeout stays 0 because an
// http.Client timeout also ends every watch of the member's informers after
// that long. Calls are bounded by their contexts instead, connects by
// ConnectTimeout, probes by ProbeTimeout (on the prober's own config).
func (p *Provider) restConfig(name string, data []byte) (*rest.Config, error) {
	raw, err := clientcmd.Load(data)
	if err != nil {
		return nil, fmt.Errorf("kubeconfig cannot be parsed: %s", quoted.ReplaceAllString(err.Error(), "<redacted>"))
	}
	// Checked on the raw config: building the rest config already reads files.
	for _, u := range raw.AuthInfos {
		switch {
		case u.Exec != nil || u.AuthProvider != nil:
			return nil, errors.New("kubeconfig uses an exec or auth-provider plugin, which the hub does not run")
		case u.TokenFile != "" || u.ClientCertificate != "" || u.ClientKey != "":
			return nil, errors.New("kubeconfig refers to files; embed token, certificate and key data instead")
		}
	}
	for _, c := range raw.Clusters {
		if c.CertificateAuthority != "" {
			return nil, errors.New("kubeconfig refers to files; embed certificate-authority-data instead")
		}
	}
	cfg, err := clientcmd.NewDefaultClientConfig(*raw, &clientcmd.ConfigOverrides{}).ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("kubeconfig is not usable: %s", quoted.ReplaceAllString(err.Error(), "<redacted>"))
	}
	cfg.QPS, cfg.Burst = p.opts.QPS, p.opts.Burst
	if p.opts.UserAgent != "" {
		cfg.UserAgent = p.opts.UserAgent
	}
	cfg.Wrap(limitErrorBodies)
	if wrap := p.opts.WrapTransport; wrap != nil {
		cfg.WrapTransport = transport.Wrappers(cfg.WrapTransport, func(rt http.RoundTripper) http.RoundTripper {
			return wrap(name, rt)
		})
	}
	return cfg, nil
}

// newProber returns the unversioned REST client that probes use, with its own
// rate limiter (probes never queue behind the member's informers and
// reconcilers) and every request bounded by timeout: it never watches, so a
// client timeout is safe here.
func newProber(cfg *rest.Config, timeout time.Duration) (rest.Interface, error) {
	pc := rest.CopyConfig(cfg)
	pc.Timeout = timeout
	pc.Wrap(limitAllBodies)
	dc, err := discovery.NewDiscoveryClientForConfig(pc)
	if err != nil {
		return nil, fmt.Errorf("building a client from the kubeconfig: %w", err)
	}
	return dc.RESTClient(), nil
}

// connectResult is the outcome of one connect attempt.
type connectResult struct {
	cl       cluster.Cluster
	version  string
	backends []fleetv1alpha1.Backend
	err      *failure
	// unreachable is true when the preflight failed: the member did not
	// answer as it should, so a passing probe is worth an early retry.
	unreachable bool
	// clusterID is the member cluster's identity, when the preflight read it.
	clusterID string
}

// attempt runs one bounded dial of the member of r in attemptCtx and returns
// its result; attemptCancel is called when the attempt failed or the run
// ended (the cluster lives on in attemptCtx only when it won).
func (p *Provider) attempt(attemptCtx context.Context, attemptCancel context.CancelFunc, name string, r *run) connectResult {
	results := make(chan connectResult, 1)
	go func() { results <- p.dial(attemptCtx, attemptCancel, name, r) }()

	timer := time.NewTimer(p.opts.ConnectTimeout)
	defer timer.Stop()
	var res connectResult
	select {
	case res = <-results:
	case <-timer.C:
		res = connectResult{err: &failure{
			reason:  fleetv1alpha1.ReasonUnreachable,
			message: fmt.Sprintf("connecting did not finish within %s", p.opts.ConnectTimeout),
		}, unreachable: true}
	case <-r.ctx.Done():
	}
	if res.err == nil && attemptCtx.Err() != nil && r.ctx.Err() == nil {
		res = connectResult{err: &failure{
			reason:  fleetv1alpha1.ReasonUnreachable,
			message: "the member cluster stopped while connecting",
		}}
	}
	if res.err != nil || r.ctx.Err() != nil {
		attemptCancel()
	}
	return res
}

// settleIdentity records the cluster identity an attempt read for member m
// of run r, and checks, under p.mu (the lock engaging is decided under, so two
// registrations connecting at once cannot both engage), that m is the first
// registration of that cluster: a later one's attempt fails (res.err) and is
// cancelled. It returns the identity m had before when it changed (movedFrom)
// and the later registrations to evict when m is the first.
func (p *Provider) settleIdentity(m *member, r *run, res *connectResult, attemptCancel context.CancelFunc) (movedFrom string, evict []*member) {
	if res.clusterID != "" {
		if old := m.identity(); old != "" && old != res.clusterID {
			movedFrom = old
		}
		r.clusterID, m.recordedID = res.clusterID, res.clusterID
	}
	if res.err != nil {
		return movedFrom, nil
	}
	first, losers := p.sameCluster(m, res.clusterID)
	if first != m {
		f := duplicateFailure(res.clusterID, first.name)
		res.err = &f
		attemptCancel()
		return movedFrom, nil
	}
	return movedFrom, losers
}

// connect makes one bounded attempt to connect to the member of r and engage
// it, then records the outcome and asks for a status pass. It runs in its own
// goroutine so that no member waits for another.
func (p *Provider) connect(name string, r *run) {
	log := ctrl.LoggerFrom(r.ctx)
	// The cluster lives in attemptCtx if this attempt wins; r.cancel ends it
	// with the run, clCancel alone when the cluster dies under us.
	attemptCtx, attemptCancel := context.WithCancel(r.ctx)
	res := p.attempt(attemptCtx, attemptCancel, name, r)

	now := time.Now()
	p.mu.Lock()
	r.connecting, r.pending = false, nil
	m := p.members[name]
	if m == nil || m.run != r || r.ctx.Err() != nil {
		// Superseded (kubeconfig changed, member removed, provider stopped).
		p.mu.Unlock()
		attemptCancel()
		return
	}
	movedFrom, evict := p.settleIdentity(m, r, &res, attemptCancel)
	if res.err != nil {
		r.connectErr = res.err
		r.attempts++
		r.nextAttempt = now.Add(backoff(r.attempts))
		if res.unreachable {
			r.lastProbeOK = false
		}
	} else {
		r.cl, r.clCancel = res.cl, attemptCancel
		r.connectErr, r.attempts, r.nextAttempt = nil, 0, time.Time{}
		// The preflight was a passing probe.
		r.version, r.lastProbe, r.lastProbeOK = res.version, now, true
		if res.backends != nil {
			r.backends = res.backends
		}
		r.failingSince, r.probeErr = time.Time{}, nil
	}
	_, notify := m.refresh(now, p.opts.FailureGracePeriod)
	aware := p.aware
	retryIn := r.nextAttempt.Sub(now)
	evicted := make([]evictee, 0, len(evict))
	for _, l := range evict {
		evicted = append(evicted, evictee{name: l.name, run: l.run, cl: l.run.cl})
	}
	p.mu.Unlock()
	// The kubeconfig now reaches another cluster: registrations refused
	// for the one it reached before may be first now.
	p.retryDuplicatesOf(movedFrom)
	for _, l := range evicted {
		p.disengage(l.name, l.run, l.cl, duplicateFailure(res.clusterID, name),
			"Member cluster is registered already under an older MemberCluster; disengaged it")
	}

	if res.err != nil {
		log.Info("Connecting to member cluster failed", "reason", res.err.reason, "message", res.err.message, "retryIn", retryIn)
	} else {
		log.Info("Connected to member cluster", "kubernetesVersion", res.version)
		if err := aware.Engage(attemptCtx, multicluster.ClusterName(name), res.cl); err != nil {
			p.lost(name, r, res.cl, fmt.Errorf("engaging the member cluster: %w", err))
			return
		}
		log.Info("Engaged member cluster")
	}
	p.enqueue(name)
	if notify {
		p.notify(name)
	}
}

// dial connects to the member: a preflight (the probe plus an authenticated
// GET /api), cluster.New, the field indexes, cluster.Start and the cache sync,
// all within ConnectTimeout. The cluster runs in clusterCtx, which stop
// cancels when the cluster fails. dial does not engage.
func (p *Provider) dial(clusterCtx context.Context, stop context.CancelFunc, name string, r *run) connectResult {
	ctx, cancel := context.WithTimeout(clusterCtx, p.opts.ConnectTimeout)
	defer cancel()

	pr := probe(ctx, r.prober, p.opts.ProbeTimeout)
	if pr.err == nil {
		pr.err = preflightAPI(ctx, r.prober, p.opts.ProbeTimeout)
	}
	if pr.err != nil {
		return connectResult{err: pr.err, unreachable: true}
	}
	id, bad := readClusterID(ctx, r.prober, p.opts.ProbeTimeout)
	if bad != nil {
		return connectResult{err: bad}
	}
	// A later registration of a cluster the hub uses already is refused
	// before anything is built for it (connect checks again, under lock).
	p.mu.Lock()
	var dup *failure
	if m := p.members[name]; m != nil {
		if first, _ := p.sameCluster(m, id); first != m {
			f := duplicateFailure(id, first.name)
			dup = &f
		}
	}
	p.mu.Unlock()
	if dup != nil {
		return connectResult{err: dup, clusterID: id}
	}

	opts := append([]cluster.Option{func(o *cluster.Options) {
		o.Scheme = p.opts.Scheme
		o.Logger = p.log.WithValues("cluster", name)
	}}, p.opts.ClusterOptions...)
	cl, err := cluster.New(r.cfg, opts...)
	if err != nil {
		return connectResult{err: &failure{reason: fleetv1alpha1.ReasonInvalidKubeconfig, message: truncate("creating the cluster client: " + err.Error())}}
	}

	// Recording the cluster as pending and taking the indexers happen under one
	// lock, so IndexField applies later indexes to it and earlier ones are here.
	p.mu.Lock()
	r.pending = cl
	indexers := slices.Clone(p.indexers)
	p.mu.Unlock()
	for _, idx := range indexers {
		if err := cl.GetFieldIndexer().IndexField(ctx, idx.obj, idx.field, idx.extract); err != nil {
			f := classify(err, 0)
			f.message = truncate(fmt.Sprintf("indexing field %q: %s", idx.field, f.message))
			return connectResult{err: &f}
		}
	}

	failed := make(chan error, 1)
	go func() {
		if err := cl.Start(clusterCtx); err != nil {
			failed <- err
			stop()
			p.lost(name, r, cl, err)
		}
	}()
	if !cl.GetCache().WaitForCacheSync(ctx) {
		select {
		case err := <-failed:
			f := classify(err, 0)
			f.message = truncate("starting the cluster: " + f.message)
			return connectResult{err: &f}
		default:
		}
		return connectResult{err: &failure{
			reason:  fleetv1alpha1.ReasonUnreachable,
			message: fmt.Sprintf("the member's caches did not sync within %s", p.opts.ConnectTimeout),
		}, unreachable: true}
	}
	return connectResult{cl: cl, version: pr.version, backends: pr.backends, clusterID: id}
}

// Lost disengages the member's engaged cluster cl after err (what was
// engaged with it later failed) and reconnects with backoff; nothing when cl
// is no longer the member's cluster.
func (p *Provider) Lost(name string, cl cluster.Cluster, err error) {
	p.mu.RLock()
	var r *run
	if m := p.members[name]; m != nil {
		r = m.run
	}
	p.mu.RUnlock()
	if r != nil {
		p.lost(name, r, cl, err)
	}
}

// lost records that the member's engaged (or pending) cluster died under us
// (its Start failed, or engaging it did): the cluster is disengaged and a new
// connect is scheduled with backoff.
func (p *Provider) lost(name string, r *run, cl cluster.Cluster, err error) {
	p.disengage(name, r, cl, classify(err, 0), "Member cluster stopped, disengaged it; reconnecting with backoff")
}

// disengage disengages the member's engaged (or pending) cluster cl of run
// r for reason f and schedules a new connect with backoff.
func (p *Provider) disengage(name string, r *run, cl cluster.Cluster, f failure, why string) {
	now := time.Now()
	p.mu.Lock()
	m := p.members[name]
	if m == nil || m.run != r || r.cl != cl || r.ctx.Err() != nil {
		p.mu.Unlock()
		return
	}
	cancel := r.clCancel
	r.cl, r.clCancel = nil, nil
	r.connectErr = &f
	r.attempts++
	r.nextAttempt = now.Add(backoff(r.attempts))
	_, notify := m.refresh(now, p.opts.FailureGracePeriod)
	p.mu.Unlock()

	if cancel != nil {
		cancel()
	}
	ctrl.LoggerFrom(r.ctx).Info(why, "reason", f.reason, "message", f.message)
	p.enqueue(name)
	if notify {
		p.notify(name)
	}
}
