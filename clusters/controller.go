package clusters

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"
	mcmanager "sigs.k8s.io/multicluster-runtime/pkg/manager"

	fleetv1alpha1 "github.com/fleetdb/fleetdb/apis/v1alpha1"
)

// controllerName names the hub controller that watches MemberClusters.
const controllerName = "membercluster-provider"

// What the provider needs on the hub (generate with paths=./clusters/...).
// +kubebuilder:rbac:groups=fleetdb.io,resources=memberclusters,verbs=get;list;watch
// +kubebuilder:rbac:groups=fleetdb.io,resources=memberclusters/status,verbs=get;update;patch
// +kubebuilder:rbac:groups="",resources=secrets,verbs=get;list;watch,namespace=fleetdb-system

// SetupWithManager registers, on the hub (mgr's local manager), the field index
// KubeconfigSecretIndex and the controller that watches MemberClusters and the
// Secrets they reference. Call it before mgr.Start.
//
// Secrets are watched as metadata only (no Secret data is cached on the hub);
// the referenced Secret is read with the uncached API reader when needed.
func (p *Provider) SetupWithManager(ctx context.Context, mgr mcmanager.Manager) error {
	if mgr == nil {
		return errors.New("clusters provider: manager is nil")
	}
	local := mgr.GetLocalManager()
	if local == nil {
		return errors.New("clusters provider: local manager is nil")
	}
	if err := local.GetFieldIndexer().IndexField(ctx, &fleetv1alpha1.MemberCluster{}, KubeconfigSecretIndex, p.secretRefKey); err != nil {
		return fmt.Errorf("indexing MemberClusters by kubeconfig Secret: %w", err)
	}

	p.mu.Lock()
	p.hub, p.hubReader = local.GetClient(), local.GetAPIReader()
	p.log = local.GetLogger().WithName("clusters")
	p.mu.Unlock()

	err := ctrl.NewControllerManagedBy(local).
		Named(controllerName).
		// Status updates come back too: a status pass that read a cache not
		// yet showing our previous write skips a needed write; the event of
		// that write arriving runs the pass again against the fresh cache.
		For(&fleetv1alpha1.MemberCluster{}).
		WatchesMetadata(&corev1.Secret{}, handler.EnqueueRequestsFromMapFunc(p.membersForSecret)).
		// Connects and probes ask for a status pass through this source.
		WatchesRawSource(source.Func(func(_ context.Context, q workqueue.TypedRateLimitingInterface[reconcile.Request]) error {
			p.mu.Lock()
			p.queue = q
			p.mu.Unlock()
			return nil
		})).
		WithOptions(controller.Options{MaxConcurrentReconciles: 4, NeedLeaderElection: ptr.To(!p.opts.EveryReplica)}).
		Complete(p)
	if err != nil {
		return fmt.Errorf("building the %s controller: %w", controllerName, err)
	}
	return nil
}

// secretRefKey is the KubeconfigSecretIndex extractor; an omitted namespace
// is the hub's.
func (p *Provider) secretRefKey(obj client.Object) []string {
	mc, ok := obj.(*fleetv1alpha1.MemberCluster)
	if !ok {
		return nil
	}
	ref := mc.Spec.KubeconfigSecretRef
	ns := ref.Namespace
	if ns == "" {
		ns = p.opts.SecretNamespace
	}
	return []string{ns + "/" + ref.Name}
}

// membersForSecret maps a Secret event to the MemberClusters referencing it.
func (p *Provider) membersForSecret(ctx context.Context, obj client.Object) []reconcile.Request {
	var list fleetv1alpha1.MemberClusterList
	if err := p.hub.List(ctx, &list, client.MatchingFields{KubeconfigSecretIndex: obj.GetNamespace() + "/" + obj.GetName()}); err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "Listing MemberClusters for a kubeconfig Secret", "secret", client.ObjectKeyFromObject(obj))
		return nil
	}
	reqs := make([]reconcile.Request, 0, len(list.Items))
	for _, mc := range list.Items {
		reqs = append(reqs, reconcile.Request{NamespacedName: types.NamespacedName{Name: mc.Name}})
	}
	return reqs
}

// Reconcile brings the member's engagement in line with its MemberCluster and
// Secret, and writes the member's status when it changed.
func (p *Provider) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	name := req.Name
	log := ctrl.LoggerFrom(ctx).WithValues("cluster", name)
	ctx = ctrl.LoggerInto(ctx, log)

	mc := &fleetv1alpha1.MemberCluster{}
	if err := p.hub.Get(ctx, req.NamespacedName, mc); err != nil {
		if apierrors.IsNotFound(err) {
			p.remove(ctx, name)
			return reconcile.Result{}, nil
		}
		return reconcile.Result{}, fmt.Errorf("getting MemberCluster: %w", err)
	}
	if !mc.DeletionTimestamp.IsZero() {
		p.remove(ctx, name)
		return reconcile.Result{}, nil
	}
	if !p.started() {
		return reconcile.Result{RequeueAfter: notStartedRetry}, nil
	}
	p.registered(mc)

	data, problem, err := p.readKubeconfig(ctx, mc)
	if err != nil {
		if v, recorded := p.kubeconfigUnreadable(ctx, mc.Name, err, mc.Spec.Connection); recorded {
			if werr := p.writeStatus(ctx, mc, v); werr != nil {
				log.Error(werr, "Recording that the kubeconfig Secret cannot be read")
			}
		}
		return reconcile.Result{}, err
	}
	v, retryIn := p.observe(ctx, name, data, problem, mc.Spec.Connection)
	if err := p.writeStatus(ctx, mc, v); err != nil {
		return reconcile.Result{}, err
	}
	return reconcile.Result{RequeueAfter: retryIn}, nil
}

// readKubeconfig returns the kubeconfig bytes of the member, or the problem
// that there are none. Errors are transient hub errors, worth a retry.
func (p *Provider) readKubeconfig(ctx context.Context, mc *fleetv1alpha1.MemberCluster) ([]byte, *failure, error) {
	ref := mc.Spec.KubeconfigSecretRef
	key := ref.Key
	if key == "" {
		key = DefaultKubeconfigSecretKey
	}
	ns, refused := p.secretKey(ref)
	if refused != nil {
		return nil, refused, nil
	}
	ctx, cancel := context.WithTimeout(ctx, hubCallTimeout)
	defer cancel()
	secret := &corev1.Secret{}
	if err := p.hubReader.Get(ctx, types.NamespacedName{Namespace: ns, Name: ref.Name}, secret); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, &failure{
				reason:  fleetv1alpha1.ReasonSecretNotFound,
				message: fmt.Sprintf("Secret %s/%s not found", ns, ref.Name),
			}, nil
		}
		return nil, nil, fmt.Errorf("getting kubeconfig Secret %s/%s: %w", ns, ref.Name, err)
	}
	data := secret.Data[key]
	if len(data) == 0 {
		return nil, &failure{
			reason:  fleetv1alpha1.ReasonSecretNotFound,
			message: fmt.Sprintf("Secret %s/%s has no key %q", ns, ref.Name, key),
		}, nil
	}
	return data, nil, nil
}

// observe records the member's kubeconfig (or its problem): the same bytes as
// last time change nothing, other bytes replace the run (disengage, then
// connect anew), a problem stops the run. It starts a connect when one is due
// and returns the member's view and when to retry a failed connect.
func (p *Provider) observe(ctx context.Context, name string, data []byte, problem *failure, policy fleetv1alpha1.ConnectionPolicy) (view, time.Duration) {
	log := ctrl.LoggerFrom(ctx)
	now := time.Now()
	var hash string
	if data != nil {
		sum := sha256.Sum256(append(slices.Clone(data), policyKey(policy)...))
		hash = hex.EncodeToString(sum[:])
	}

	p.mu.Lock()
	m := p.members[name]
	if m == nil {
		m = &member{name: name}
		p.members[name] = m
	}
	var (
		stopped, connect *run
		newProblem       *failure // a problem not logged yet
	)
	switch {
	case problem != nil:
		if m.problem == nil || *m.problem != *problem {
			newProblem = problem
		}
		stopped, m.run = m.run, nil
		m.hash, m.problem = "", problem
	case hash == m.hash && (m.run != nil || m.problem != nil):
		// Unchanged kubeconfig: keep the cluster, its probes and its backoff.
	default:
		stopped, m.run = m.run, nil
		m.hash, m.problem = hash, nil
		r, bad := p.newRun(name, data, policy)
		if bad != nil {
			m.problem, newProblem = bad, bad
		} else {
			m.run = r
			go p.probeLoop(name, r)
		}
	}
	var retryIn time.Duration
	if r := m.run; r != nil && r.cl == nil && !r.connecting {
		if wait := r.nextAttempt.Sub(now); wait > 0 {
			retryIn = wait
		} else {
			r.connecting = true
			connect = r
		}
	}
	_, notify := m.refresh(now, p.opts.FailureGracePeriod)
	v := m.view
	p.mu.Unlock()

	if stopped != nil {
		stopped.cancel()
		log.Info("Kubeconfig changed or gone, disengaged member cluster")
	}
	if newProblem != nil {
		log.Info("Member cluster has no usable kubeconfig", "reason", newProblem.reason, "message", newProblem.message)
	}
	if connect != nil {
		go p.connect(name, connect)
	}
	if notify {
		p.notify(name)
	}
	return v, retryIn
}

// kubeconfigUnreadable records a hub error reading the kubeconfig Secret of
// a member this process knows nothing of yet (no run, no problem: right after
// a hub start) as the member's problem. Without it the member had no health
// at all, which the hub reads as "not connected yet": the Databases' and the
// MemberCluster's statuses kept its last report (Ready) for as long as the
// Secret could not be read. A member with a run or a problem keeps it: a hub
// error does not disengage a working member. The caller retries the read
// (the next successful one connects) and writes the view when recorded.
func (p *Provider) kubeconfigUnreadable(ctx context.Context, name string, err error, policy fleetv1alpha1.ConnectionPolicy) (v view, recorded bool) {
	p.mu.RLock()
	m := p.members[name]
	known := m != nil && (m.run != nil || m.problem != nil)
	p.mu.RUnlock()
	if known {
		return view{}, false
	}
	v, _ = p.observe(ctx, name, nil, &failure{
		reason:  fleetv1alpha1.ReasonSecretUnreadable,
		message: truncate("the hub could not read the kubeconfig Secret: " + err.Error()),
	}, policy)
	return v, true
}

// remove forgets a member whose MemberCluster is gone: its cluster is
// disengaged (its context cancelled) and subscribers hear of it.
func (p *Provider) remove(ctx context.Context, name string) {
	p.mu.Lock()
	m := p.members[name]
	delete(p.members, name)
	p.mu.Unlock()
	if m == nil {
		return
	}
	if m.run != nil {
		m.run.cancel()
	}
	ctrl.LoggerFrom(ctx).Info("MemberCluster is gone, disengaged member cluster")
	p.notify(name)
	p.retryDuplicatesOf(m.identity())
}
