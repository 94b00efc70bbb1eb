package database

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	mccluster "sigs.k8s.io/controller-runtime/pkg/cluster"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	mcmanager "sigs.k8s.io/multicluster-runtime/pkg/manager"
	"sigs.k8s.io/multicluster-runtime/pkg/multicluster"
	mcreconcile "sigs.k8s.io/multicluster-runtime/pkg/reconcile"

	fleetv1alpha1 "github.com/fleetdb/fleetdb/apis/v1alpha1"
	"github.com/fleetdb/fleetdb/clusters"
	"github.com/fleetdb/fleetdb/hub/internal/hubsecret"
	"github.com/fleetdb/fleetdb/hub/internal/queue"
	"github.com/fleetdb/fleetdb/hub/internal/sharding"
	"github.com/fleetdb/fleetdb/internal/telemetry"
	"github.com/fleetdb/fleetdb/member"
)

// +kubebuilder:rbac:groups=fleetdb.io,resources=databaseplacements,verbs=get;list;watch;create;update;patch;delete;deletecollection,namespace=fleetdb-system
// +kubebuilder:rbac:groups=fleetdb.io,resources=databaseplacements/status,verbs=get;update;patch,namespace=fleetdb-system
// +kubebuilder:rbac:groups=coordination.k8s.io,resources=leases,verbs=get;list;watch;create;update;delete,namespace=fleetdb-system

// placementController runs on every replica: it keeps the placements'
// specs for the member syncs, wakes an owned member's sync when its spec
// changed, and records the reports of members owned elsewhere.
func (w *wiring) placementController() error {
	local := w.mgr.GetLocalManager()
	return ctrl.NewControllerManagedBy(local).
		Named("placements").
		For(&fleetv1alpha1.DatabasePlacement{}).
		WithOptions(controller.Options{
			MaxConcurrentReconciles: 2, SkipNameValidation: w.skipNames, NeedLeaderElection: ptr.To(false),
			LogConstructor: telemetry.ReconcileLogs(local.GetLogger(), "placements", func(req *reconcile.Request) []any {
				return []any{"placement", req.Name}
			}),
		}).
		Complete(w.shard)
}

// Reconcile folds one placement into this replica's view.
func (s *shardRuntime) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	pl := &fleetv1alpha1.DatabasePlacement{}
	if err := s.hub.Get(ctx, req.NamespacedName, pl); err != nil {
		if client.IgnoreNotFound(err) != nil {
			return reconcile.Result{}, err
		}
		s.mu.Lock()
		e, ok := s.byName[req.Name]
		delete(s.byName, req.Name)
		s.mu.Unlock()
		if ok && !s.coord.Owns(e.cluster) {
			s.state.dropResult(e.key, e.cluster)
		}
		return reconcile.Result{}, nil
	}
	e := placementEntry{key: keyOf(pl.Spec.Database), cluster: pl.Spec.Cluster, spec: pl.Spec}
	if gone, err := s.orphan(ctx, pl, e.key); gone || err != nil {
		return reconcile.Result{}, err
	}
	s.mu.Lock()
	prev, had := s.byName[req.Name]
	s.byName[req.Name] = e
	s.mu.Unlock()
	owned := s.coord.Owns(e.cluster)
	if owned && (!had || prev.spec != e.spec) {
		s.members.AddWith(e.cluster, e.key, queue.PriorityChange, 0)
	}
	// The owner's own results are fresher in memory than the report it
	// wrote; everyone else takes the report.
	if res := resultOf(pl); res != nil && !owned {
		switch s.state.record(e.key, e.cluster, res) {
		case resultPhase:
			s.databases.AddWith("", e.key, queue.PriorityStatus, statusCoalesceDelay)
		case resultProgress:
			s.databases.AddWith("", e.key, queue.PriorityStatus, progressCoalesceDelay)
		}
	}
	return reconcile.Result{}, nil
}

func keyOf(ref fleetv1alpha1.DatabaseRef) client.ObjectKey {
	return client.ObjectKey{Namespace: ref.Namespace, Name: ref.Name}
}

// shardHold is the result of a member whose teardown needs a final backup
// that only the leader's in-memory plan can take: the teardown holds (data
// safety) until the leader owns the member or the backup is skipped.
func shardHold(cluster string) *memberResult {
	return &memberResult{Status: deletingStatus(cluster,
		"holding the teardown: the final backup is taken by the hub's leader replica, which does not own this member (--sharding)"),
		At: time.Now()}
}

// setupSharding builds the shard runtime (before the controllers that use
// it) and its placement controller.
func (w *wiring) setupSharding() error {
	if w.opts.shards == nil {
		return errors.New("--sharding needs the hub's manager (NewManager) to run the sharded coordinator")
	}
	local := w.mgr.GetLocalManager()
	w.shard = &shardRuntime{
		coord: w.opts.shards, hub: local.GetClient(), store: &sharding.Placements{Hub: local.GetClient(), Namespace: w.opts.HubNamespace},
		state: w.state, databases: w.dbQueue, members: w.memberQueue, byName: map[string]placementEntry{},
		elected: func() bool {
			select {
			case <-local.Elected():
				return true
			default:
				return false
			}
		},
	}
	w.opts.shards.OnOwned(w.shard.owned)
	w.opts.shards.OnEngaged(warmMemberCaches(w.provider))
	return w.placementController()
}

// warmCacheTimeout bounds the wait for a warmed member informer's first
// list (the informer itself runs as long as the member's cache).
const warmCacheTimeout = 2 * time.Minute

// warmMemberCaches starts, on every replica of a sharded hub and for every
// member, owned or not, the member informers the member sync watches: reads
// only (list and watch, fleetdb's objects by their managed-by label), so a
// replica that takes a member over finds them synced and its first sync
// does not wait for them (docs/sharding.md, "Warm standby"). The member
// sync's watches, engaged on the owner only, share these informers. The
// CloudNativePG Cluster informer (backendWatches starts it on a member's
// first CloudNativePG sync, with its event handler) is warmed too where the
// member serves the Cluster API (its last probe) and lets the hub list
// Clusters: a member that does not, or refuses the list, gets no informer
// that would retry and log forever.
func warmMemberCaches(provider *clusters.Provider) func(ctx context.Context, cluster string, cl mccluster.Cluster) {
	return func(ctx context.Context, cluster string, cl mccluster.Cluster) {
		ctx, cancel := context.WithTimeout(ctx, warmCacheTimeout)
		defer cancel()
		log := ctrl.LoggerFrom(ctx).WithValues("cluster", cluster)
		kinds := append(memberKinds(), &corev1.PersistentVolumeClaim{})
		if warmCNPG(ctx, provider, cluster, cl) {
			kinds = append(kinds, member.NewCNPGCluster())
		}
		for _, obj := range kinds {
			if _, err := cl.GetCache().GetInformer(ctx, obj); err != nil {
				log.Info("Warming a member cache did not finish; the member's owner starts it when it takes the member", "error", err.Error())
				return
			}
		}
	}
}

// warmCNPG reports whether the member's CloudNativePG Cluster informer can
// be warmed: the member served the Cluster API at its last probe, and a
// live list of one Cluster is not refused (an identity joined before the
// backend existed may not see Clusters: listManagedClusters). The list asks
// for fleetdb's Clusters only, as the informer does: no other Cluster is read.
func warmCNPG(ctx context.Context, provider *clusters.Provider, cluster string, cl mccluster.Cluster) bool {
	if offered, known := provider.Offers(cluster, fleetv1alpha1.BackendCloudNativePG); !offered || !known {
		return false
	}
	return cl.GetAPIReader().List(ctx, member.NewCNPGClusterList(), client.Limit(1),
		client.MatchingLabels{fleetv1alpha1.LabelManagedBy: fleetv1alpha1.ManagedByValue}) == nil
}

// memberCacheWarmer warms the member caches (warmMemberCaches) of every
// member the provider engages, on every replica of an unsharded hub with
// leader election: a standby that takes the Lease finds them synced.
type memberCacheWarmer struct {
	provider *clusters.Provider
}

func (memberCacheWarmer) Start(ctx context.Context) error {
	<-ctx.Done()
	return nil
}

func (memberCacheWarmer) NeedLeaderElection() bool { return false }

func (w memberCacheWarmer) Engage(ctx context.Context, name multicluster.ClusterName, cl mccluster.Cluster) error {
	go warmMemberCaches(w.provider)(ctx, string(name), cl)
	return nil
}

// publishPlacements writes the plan's placements (the leader, --sharding);
// a failed write is retried by reconciling the Database again.
func (r *databaseReconciler) publishPlacements(ctx context.Context, key client.ObjectKey, p *plan) {
	if err := r.shard.publish(ctx, key, p); err != nil {
		ctrl.LoggerFrom(ctx).Info("Writing the Database's placements failed; retrying", "error", err.Error())
		r.shard.databases.AddWith("", key, queue.PriorityStatus, placementRetry)
	}
}

// forgetPlacements deletes the placements of a Database that is gone.
func (r *databaseReconciler) forgetPlacements(ctx context.Context, key client.ObjectKey) {
	if r.shard == nil {
		return
	}
	if err := r.shard.store.Forget(ctx, key); err != nil {
		ctrl.LoggerFrom(ctx).Info("Deleting the placements of a Database that is gone failed", "error", err.Error())
	}
}

// placementRetry is how soon a Database whose placements could not be written is reconciled again.
const placementRetry = 2 * time.Second

// shardedSync is a member sync on a sharded hub: only the member's owner
// syncs it, on the leader's in-memory plan where this replica is the
// leader, else on the plan the leader persisted; the result is reported on
// the placement when it changed.
func (r *memberSyncReconciler) shardedSync(ctx context.Context, req mcreconcile.Request) (ctrl.Result, error) {
	cluster, key := string(req.ClusterName), req.NamespacedName
	owner, ok := r.shard.coord.Ownership(cluster)
	if !ok {
		return ctrl.Result{}, nil
	}
	// Losing the member cancels the sync's calls in flight.
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer context.AfterFunc(owner, cancel)()
	p := r.state.plan(key)
	if p == nil {
		var finalBackup bool
		if p, finalBackup = r.shard.plan(key, cluster); p == nil {
			r.lineage.forgetDatabase(key)
			return ctrl.Result{}, nil
		}
		if finalBackup && p.role(cluster) == roleTeardown {
			// Data safety: no teardown without the final backup it asks for.
			r.record(key, cluster, shardHold(cluster))
			return ctrl.Result{}, r.shard.report(ctx, key, cluster, shardHold(cluster))
		}
		if p.role(cluster) != roleTeardown {
			// As the leader's plan: the credentials of the hub Secret the
			// Database controls (rendering and rotation read them).
			creds, err := r.remoteCredentials(ctx, key, p.uid)
			if err != nil {
				return ctrl.Result{}, err
			}
			p.credentials = creds
			if p.instanceTLS, err = r.remoteInstanceTLS(ctx, key, p); err != nil {
				return ctrl.Result{}, err
			}
		}
	}
	out := r.syncPlan(ctx, cluster, key, p)
	if out.result != nil {
		if err := r.shard.report(ctx, key, cluster, out.result); err != nil && out.err == nil {
			return ctrl.Result{}, err
		}
	}
	return ctrl.Result{RequeueAfter: out.requeue}, out.err
}

// orphan deletes, on the leader, a placement whose Database is gone (a
// deletion the leader did not see through: it was down, or another replica
// led then).
func (s *shardRuntime) orphan(ctx context.Context, pl *fleetv1alpha1.DatabasePlacement, key client.ObjectKey) (bool, error) {
	if !s.elected() {
		return false, nil
	}
	err := s.hub.Get(ctx, key, &fleetv1alpha1.Database{})
	if !apierrors.IsNotFound(err) {
		return false, err
	}
	return true, client.IgnoreNotFound(s.hub.Delete(ctx, pl))
}

// remoteCredentials reads the Database's hub credentials Secret for a plan
// read from a placement: only one the Database (uid) controls.
func (r *memberSyncReconciler) remoteCredentials(ctx context.Context, key client.ObjectKey, uid types.UID) (map[string][]byte, error) {
	var s corev1.Secret
	name := client.ObjectKey{Namespace: key.Namespace, Name: member.CredentialsSecretName(key.Name)}
	err := r.hub.Get(ctx, name, &s)
	if apierrors.IsNotFound(err) {
		// The leader created it a moment ago; the cache may lag.
		err = r.hubLive.Get(ctx, name, &s)
	}
	if err != nil {
		return nil, fmt.Errorf("reading credentials: %w", err)
	}
	if owner := metav1.GetControllerOf(&s); owner == nil || owner.UID != uid {
		return nil, fmt.Errorf("credentials secret %s is not controlled by the Database yet", name.Name)
	}
	return s.Data, nil
}

// remoteInstanceTLS reads the instance certificates a placement names from
// the Database's hub Secret (nil when it names none: no StatefulSet-backend
// postgres, or the leader has not issued them yet, which the render refuses).
func (r *memberSyncReconciler) remoteInstanceTLS(ctx context.Context, key client.ObjectKey, p *plan) (*member.InstanceCertificates, error) {
	if p.instanceCertificate == "" {
		return nil, nil
	}
	certs, err := hubsecret.InstanceCertificates(ctx, r.hub, r.hubLive, key, p.uid, p.instanceCertificate)
	if err != nil {
		return nil, err
	}
	return &certs, nil
}

// NewMCManager is the multicluster manager: as before without sharding;
// with it, the sharded coordinator's (sharding.NewMCManager), which
// Setup finds in opts.
func NewMCManager(hubCfg *rest.Config, provider *clusters.Provider, mopts manager.Options, log logr.Logger, replicaID string, opts *Options) (mcmanager.Manager, error) {
	if !opts.Sharding {
		if !mopts.LeaderElection {
			return mcmanager.New(hubCfg, provider, mopts)
		}
		// A warm standby (docs/hub-replicas.md): every replica connects to
		// the members and keeps the member informers the member sync reads
		// synced; the controllers, which write, start on the leader only
		// and are engaged with the members there.
		coord := sharding.NewElectedCoordinator()
		coord.Lost = provider.Lost
		mgr, err := sharding.NewEveryReplicaManager(hubCfg, provider, mopts, mcmanager.WithCoordinator(coord))
		if err != nil {
			return nil, err
		}
		if err := mgr.Add(memberCacheWarmer{provider: provider}); err != nil {
			return nil, err
		}
		return mgr, nil
	}
	mgr, coord, err := sharding.NewMCManager(hubCfg, provider, mopts, log, replicaID, opts.HubNamespace)
	if err != nil {
		return nil, err
	}
	opts.shards = coord
	return mgr, nil
}
