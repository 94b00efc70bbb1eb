package sweep

import (
	"context"
	"slices"
	"sync"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/cluster"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	mcmanager "sigs.k8s.io/multicluster-runtime/pkg/manager"
	"sigs.k8s.io/multicluster-runtime/pkg/multicluster"

	fleetv1alpha1 "github.com/fleetdb/fleetdb/apis/v1alpha1"
	"github.com/fleetdb/fleetdb/clusters"
	"github.com/fleetdb/fleetdb/hub/internal/tombstones"
	"github.com/fleetdb/fleetdb/member"
)

const (
	// sweepRetry is how soon a sweep looks again at Databases the hub has not planned yet.
	sweepRetry = 5 * time.Second
	// sweepAttempts bounds those retries.
	sweepAttempts = 12
	// Workers is how many members are swept at once.
	Workers = 4
)

// Plans is what the sweep asks the Database controller's plans: whether the
// Database key has a plan (of the Database uid) and places it on cluster.
type Plans interface {
	PlannedOn(key types.NamespacedName, cluster string) (uid types.UID, placed, ok bool)
}

// Sweeper collects leftovers in a member that (re)connected: objects of
// Databases that are gone, or no longer placed there, whose teardown could
// not run while the member was unreachable (SPEC 4.5). It finds them by
// label, and touches only objects that carry this hub's identity and whose
// Database this hub knows to be gone or no longer placed there: a tombstone
// the hub recorded when it skipped the teardown names the Database's UID and
// the member, and the policy is the one recorded last for that member. Only
// objects labelled with that UID are deleted (member.Owner's ExactUID), and
// a tombstone stops applying to a member where a Database of the same name
// is placed again (a later one adopts the objects it finds). Nothing read back
// from a member decides what is deleted; objects of another hub, and objects
// written before hub identities, are never swept. It is the reconciler of the member-sweep controller: a request names a member
// (reconcile.Request.Name), put in its queue by the registry when the member
// turns Ready (Requests).
type Sweeper struct {
	mgr      mcmanager.Manager
	hub      client.Client
	plans    Plans
	provider *clusters.Provider
	memo     *member.Memo
	timeout  time.Duration
	// hubID is this hub's identity; tombstones its record of what to collect.
	HubID      string
	Tombstones *tombstones.Store
	// owns, when set (--sharding), says which members this replica owns:
	// only those are swept from here.
	Owns func(cluster string) bool
	// SecretAccess, when set, gives the hub Secret access in a member's
	// namespace before a teardown there lists its Secrets (the member
	// identity's Secret role is bound per managed namespace); it reports
	// false when the namespace is gone, which leaves nothing to collect.
	SecretAccess func(ctx context.Context, cluster string, cl cluster.Cluster, namespace string) (bool, error)
	// RemoveJobs, when set, removes the hub's own Jobs of o's Database in
	// a member before its teardown there (member.Teardown touches no Job:
	// only the hub can tell its own, by its job ledger); c is the member's
	// client, live reads the member's API server.
	RemoveJobs func(ctx context.Context, c client.Client, live client.Reader, cluster string, o member.Owner) error

	mu sync.Mutex
	// attempts counts the sweeps of a member since it turned Ready.
	attempts map[string]int
	// wasReady is the registry's last news per member; only sweepRequests,
	// on the source's goroutine, reads and writes it.
	wasReady map[string]bool
}

// leftover is one Database's objects found in a member.
type leftover struct {
	key types.NamespacedName
	uid types.UID
}

// New is the sweeper of the members of mgr, reading the hub through hub and
// the plans through plans; timeout bounds the calls of one sweep.
func New(mgr mcmanager.Manager, hub client.Client, plans Plans, provider *clusters.Provider, memo *member.Memo, timeout time.Duration) *Sweeper {
	return &Sweeper{
		mgr: mgr, hub: hub, plans: plans, provider: provider, memo: memo, timeout: timeout,
		attempts: map[string]int{}, wasReady: map[string]bool{},
	}
}

// Requests maps registry news to a sweep of a member that turned Ready
// (connected, reconnected or passed its probes again).
func (s *Sweeper) Requests(name string, h clusters.Health) []reconcile.Request {
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
func (s *Sweeper) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	cluster := req.Name
	log := ctrl.LoggerFrom(ctx).WithValues("cluster", cluster, "sweep", true)
	if h := s.provider.Health(cluster); !h.Engaged || !h.Ready || (s.Owns != nil && !s.Owns(cluster)) {
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
func (s *Sweeper) countAttempt(cluster string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.attempts[cluster]++
	return s.attempts[cluster]
}

// setAttempts sets the count (n < 0: forgets it).
func (s *Sweeper) setAttempts(cluster string, n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if n < 0 {
		delete(s.attempts, cluster)
		return
	}
	s.attempts[cluster] = n
}

// findLeftovers lists the Databases whose labelled StatefulSets or Services
// (the CloudNativePG backend has no StatefulSet) the member holds. ConfigMaps
// and Secrets are not listed: the hub may read them only in the namespaces
// where it bound its role (issue 42, item 3); a teardown removes them after
// the Services, and a leftover of those alone is found by its tombstone.
func (s *Sweeper) findLeftovers(ctx context.Context, c client.Reader) (map[leftover]bool, error) {
	found := map[leftover]bool{}
	lists := []client.ObjectList{&appsv1.StatefulSetList{}, &corev1.ServiceList{}}
	for _, list := range lists {
		if err := c.List(ctx, list); err != nil {
			return nil, err
		}
		if err := meta.EachListItem(list, func(o runtime.Object) error {
			if obj, ok := o.(client.Object); ok {
				s.collect(found, obj.GetLabels())
			}
			return nil
		}); err != nil {
			return nil, err
		}
	}
	return found, nil
}

// sweepOnce removes leftovers; unsure counts Databases it could not decide on yet.
func (s *Sweeper) sweepOnce(ctx context.Context, cluster string) (unsure int, err error) {
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	cl, err := s.mgr.GetCluster(ctx, multicluster.ClusterName(cluster))
	if err != nil {
		return 0, err
	}
	found, err := s.findLeftovers(ctx, cl.GetClient())
	if err != nil {
		return 0, err
	}
	stones, err := s.Tombstones.All(ctx)
	if err != nil {
		return 0, err
	}
	// Tombstones naming this member count even when nothing of them is
	// found any more (an earlier pass removed the workload; what is left may
	// be claims or Secrets): the teardown finishes, and the tombstone goes.
	for uid, ts := range stones {
		if slices.Contains(ts.Members, cluster) {
			found[leftover{key: types.NamespacedName{Namespace: ts.Namespace, Name: ts.Name}, uid: uid}] = true
		}
	}

	log := ctrl.LoggerFrom(ctx).WithValues("cluster", cluster)
	for lo := range found {
		policy, tomb, decided, err := s.decide(ctx, cluster, lo, stones)
		if err != nil {
			return unsure, err
		}
		if !decided {
			unsure++
			continue
		}
		if policy == "" {
			if tomb { // placed here again, or adopted by a later Database: nothing to collect
				if err := s.Tombstones.Swept(ctx, lo.uid, cluster); err != nil {
					return unsure, err
				}
			}
			continue // placed here, or not known to be gone: kept
		}
		// Only the objects that carry the tombstone's UID are deleted: a later
		// Database of the same name relabels what it adopts, and what it
		// wrote is its own.
		owner := member.Owner{Namespace: lo.key.Namespace, Name: lo.key.Name, UID: lo.uid, HubID: s.HubID, ExactUID: true}
		present := true
		if s.SecretAccess != nil {
			if present, err = s.SecretAccess(ctx, cluster, cl, lo.key.Namespace); err != nil {
				return unsure, err
			}
		}
		done := !present
		if present && s.RemoveJobs != nil {
			if err := s.RemoveJobs(ctx, cl.GetClient(), cl.GetAPIReader(), cluster, owner); err != nil {
				return unsure, err
			}
		}
		if present {
			if done, err = member.Teardown(ctx, cl.GetClient(), owner, policy, s.memo); err != nil {
				return unsure, err
			}
		}
		if !done {
			unsure++
			continue
		}
		s.memo.ForgetDatabase(cluster, lo.key.Namespace, lo.key.Name)
		if tomb {
			if err := s.Tombstones.Swept(ctx, lo.uid, cluster); err != nil {
				return unsure, err
			}
		}
		log.Info("collected leftovers of a Database no longer placed here", "database", lo.key.String(), "policy", policy)
	}
	return unsure, nil
}

// decide returns the policy to collect a leftover with, "" to keep it;
// tomb tells that a tombstone of this hub names the leftover's Database and
// this member (without one nothing is collected: the hub does not know the
// Database to be gone or dropped from here); decided is false while the
// Database controller has not planned an existing Database yet.
func (s *Sweeper) decide(ctx context.Context, cluster string, lo leftover, stones map[types.UID]tombstones.Tombstone) (
	policy fleetv1alpha1.DeletionPolicy, tomb, decided bool, err error) {
	ts, ok := stones[lo.uid]
	tomb = ok && ts.Namespace == lo.key.Namespace && ts.Name == lo.key.Name && slices.Contains(ts.Members, cluster)
	if !tomb {
		return "", false, true, nil
	}
	var db fleetv1alpha1.Database
	err = s.hub.Get(ctx, lo.key, &db)
	switch {
	case apierrors.IsNotFound(err):
		return ts.PolicyFor(cluster), true, true, nil
	case err != nil:
		return "", true, false, err
	}
	uid, placed, ok := s.plans.PlannedOn(lo.key, cluster)
	if !ok || uid != db.UID {
		return "", true, false, nil
	}
	if placed {
		// Placed here again (same UID), or a later Database of the same name
		// runs here now and adopts what it finds (a Retain re-use): its member
		// sync owns the objects, and the tombstone no longer applies here: it
		// goes, so that it never collects what the later Database keeps.
		return "", true, true, nil
	}
	return ts.PolicyFor(cluster), true, true, nil
}

// collect notes the Database of a member object this hub wrote.
func (s *Sweeper) collect(found map[leftover]bool, l map[string]string) {
	if l[fleetv1alpha1.LabelManagedBy] != fleetv1alpha1.ManagedByValue || l[fleetv1alpha1.LabelHubID] != s.HubID || s.HubID == "" {
		return
	}
	lo := leftover{
		key: types.NamespacedName{Namespace: l[fleetv1alpha1.LabelDatabaseNamespace], Name: l[fleetv1alpha1.LabelDatabaseName]},
		uid: types.UID(l[fleetv1alpha1.LabelDatabaseUID]),
	}
	if lo.key.Namespace == "" || lo.key.Name == "" || lo.uid == "" {
		return
	}
	found[lo] = true
}
