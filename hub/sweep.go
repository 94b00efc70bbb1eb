package hub

import (
	"context"
	"sync"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	mcmanager "sigs.k8s.io/multicluster-runtime/pkg/manager"
	"sigs.k8s.io/multicluster-runtime/pkg/multicluster"

	fleetv1alpha1 "github.com/fleetdb/fleetdb/apis/v1alpha1"
	"github.com/fleetdb/fleetdb/clusters"
	"github.com/fleetdb/fleetdb/member"
)

const (
	// sweepRetry is how soon a sweep looks again at Databases the hub has not planned yet.
	sweepRetry = 5 * time.Second
	// sweepAttempts bounds those retries.
	sweepAttempts = 12
	// sweepWorkers is how many members are swept at once.
	sweepWorkers = 4
)

// sweeper collects leftovers in a member that (re)connected: objects of
// Databases that are gone, or no longer placed there, whose teardown could
// not run while the member was unreachable (SPEC 4.5). It finds them by
// label, so it needs no memory of what happened before a hub restart. It is
// the reconciler of the member-sweep controller: a request names a member
// (reconcile.Request.Name), put in its queue by the registry when the member
// turns Ready (sweepRequests).
type sweeper struct {
	mgr      mcmanager.Manager
	hub      client.Client
	state    *state
	provider *clusters.Provider
	memo     *member.Memo
	timeout  time.Duration

	mu sync.Mutex
	// attempts counts the sweeps of a member since it turned Ready.
	attempts map[string]int
	// wasReady is the registry's last news per member; only sweepRequests,
	// on the source's goroutine, reads and writes it.
	wasReady map[string]bool
}

func newSweeper(mgr mcmanager.Manager, hub client.Client, st *state, provider *clusters.Provider, memo *member.Memo, timeout time.Duration) *sweeper {
	return &sweeper{
		mgr: mgr, hub: hub, state: st, provider: provider, memo: memo, timeout: timeout,
		attempts: map[string]int{}, wasReady: map[string]bool{},
	}
}

// sweepRequests maps registry news to a sweep of a member that turned Ready
// (connected, reconnected or passed its probes again).
func (s *sweeper) sweepRequests(name string, h clusters.Health) []reconcile.Request {
	ready := h.Engaged && h.Ready
	turnedReady := ready && !s.wasReady[name]
	s.wasReady[name] = ready
	if !turnedReady {
		return nil
	}
	s.setAttempts(name, 0)
	return []reconcile.Request{{NamespacedName: types.NamespacedName{Name: name}}}
}

// Reconcile sweeps one member. Databases the hub has not planned yet are
// looked at again after sweepRetry, at most sweepAttempts times; a member
// that is not Ready is swept again when it is back.
func (s *sweeper) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	cluster := req.Name
	log := ctrl.LoggerFrom(ctx).WithValues("cluster", cluster, "sweep", true)
	if h := s.provider.Health(cluster); !h.Engaged || !h.Ready {
		s.setAttempts(cluster, -1)
		return reconcile.Result{}, nil
	}
	unsure, err := s.sweepOnce(ctx, cluster)
	if err != nil {
		log.V(1).Info("sweep incomplete, retrying", "error", err.Error())
	}
	if (err == nil && unsure == 0) || s.countAttempt(cluster) >= sweepAttempts {
		s.setAttempts(cluster, -1)
		return reconcile.Result{}, nil
	}
	return reconcile.Result{RequeueAfter: sweepRetry}, nil
}

// countAttempt counts a sweep of cluster that has to look again and returns the count.
func (s *sweeper) countAttempt(cluster string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.attempts[cluster]++
	return s.attempts[cluster]
}

// setAttempts sets the count (n < 0: forgets it).
func (s *sweeper) setAttempts(cluster string, n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if n < 0 {
		delete(s.attempts, cluster)
		return
	}
	s.attempts[cluster] = n
}

// sweepOnce removes leftovers; unsure counts Databases it could not decide on yet.
func (s *sweeper) sweepOnce(ctx context.Context, cluster string) (unsure int, err error) {
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	cl, err := s.mgr.GetCluster(ctx, multicluster.ClusterName(cluster))
	if err != nil {
		return 0, err
	}
	found := map[types.NamespacedName]fleetv1alpha1.DeletionPolicy{}
	var sts appsv1.StatefulSetList
	if err := cl.GetClient().List(ctx, &sts); err != nil {
		return 0, err
	}
	for i := range sts.Items {
		collect(found, sts.Items[i].Labels, sts.Items[i].Annotations)
	}
	var cms corev1.ConfigMapList
	if err := cl.GetClient().List(ctx, &cms); err != nil {
		return 0, err
	}
	for i := range cms.Items {
		collect(found, cms.Items[i].Labels, cms.Items[i].Annotations)
	}
	if err := collectServices(ctx, cl.GetClient(), found); err != nil {
		return 0, err
	}

	log := ctrl.LoggerFrom(ctx).WithValues("cluster", cluster)
	for key, policy := range found {
		var db fleetv1alpha1.Database
		err := s.hub.Get(ctx, key, &db)
		switch {
		case apierrors.IsNotFound(err):
			// Gone from the hub: collect with the policy recorded on the objects.
		case err != nil:
			return unsure, err
		default:
			p := s.state.plan(key)
			if p == nil || p.uid != db.UID {
				unsure++
				continue
			}
			if p.role(cluster) != roleNone {
				continue // a member sync owns it
			}
			policy = db.Spec.DeletionPolicy
		}
		done, err := member.Teardown(ctx, cl.GetClient(), key.Namespace, key.Name, policy, s.memo)
		if err != nil {
			return unsure, err
		}
		if !done {
			unsure++
		}
		s.memo.ForgetDatabase(cluster, key.Namespace, key.Name)
		log.Info("collected leftovers of a Database no longer placed here", "database", key.String(), "policy", policy, "done", done)
	}
	return unsure, nil
}

func collect(found map[types.NamespacedName]fleetv1alpha1.DeletionPolicy, l, a map[string]string) {
	if l[fleetv1alpha1.LabelManagedBy] != fleetv1alpha1.ManagedByValue {
		return
	}
	key := types.NamespacedName{Namespace: l[fleetv1alpha1.LabelDatabaseNamespace], Name: l[fleetv1alpha1.LabelDatabaseName]}
	if key.Namespace == "" || key.Name == "" {
		return
	}
	policy := fleetv1alpha1.DeletionPolicy(a[fleetv1alpha1.AnnotationDeletionPolicy])
	switch policy {
	case fleetv1alpha1.DeletionPolicyDelete, fleetv1alpha1.DeletionPolicyRetain, fleetv1alpha1.DeletionPolicyOrphan:
	default:
		// Objects written before the annotation existed: keep the data.
		policy = fleetv1alpha1.DeletionPolicyRetain
	}
	if prev, ok := found[key]; !ok || prev == fleetv1alpha1.DeletionPolicyDelete {
		found[key] = policy
	}
}
