package hub

import (
	"context"
	"slices"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
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
)

// sweeper collects leftovers in a member that (re)connected: objects of
// Databases that are gone, or no longer placed there, whose teardown could
// not run while the member was unreachable (SPEC 4.5). It finds them by
// label, and touches only objects that carry this hub's identity and whose
// Database this hub knows to be gone or no longer placed there: a tombstone
// the hub recorded when it skipped the teardown (Database deleted, or member
// dropped, while the member was away) names the Database's UID and the
// member, and the policy is the one recorded then. Nothing read back from a member (a policy
// annotation, an owner) decides what is deleted; objects of another hub, and
// objects written before hub identities, are never swept.
type sweeper struct {
	mgr        mcmanager.Manager
	hub        client.Client
	state      *state
	provider   *clusters.Provider
	memo       *member.Memo
	timeout    time.Duration
	hubID      string
	tombstones *tombstones
}

// leftover is one Database's objects found in a member.
type leftover struct {
	key types.NamespacedName
	uid types.UID
}

func (s *sweeper) sweep(ctx context.Context, cluster string) {
	log := ctrl.LoggerFrom(ctx).WithValues("cluster", cluster, "sweep", true)
	for attempt := 0; attempt < sweepAttempts; attempt++ {
		unsure, err := s.sweepOnce(ctx, cluster)
		if err != nil {
			log.V(1).Info("sweep incomplete, retrying", "error", err.Error())
		} else if unsure == 0 {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(sweepRetry):
		}
		if h := s.provider.Health(cluster); !h.Engaged || !h.Ready {
			return // it sweeps again when the member is back
		}
	}
}

// sweepOnce removes leftovers; unsure counts Databases it could not decide on yet.
func (s *sweeper) sweepOnce(ctx context.Context, cluster string) (unsure int, err error) {
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	cl, err := s.mgr.GetCluster(ctx, multicluster.ClusterName(cluster))
	if err != nil {
		return 0, err
	}
	found := map[leftover]bool{}
	var sts appsv1.StatefulSetList
	if err := cl.GetClient().List(ctx, &sts); err != nil {
		return 0, err
	}
	for i := range sts.Items {
		s.collect(found, sts.Items[i].Labels)
	}
	var cms corev1.ConfigMapList
	if err := cl.GetClient().List(ctx, &cms); err != nil {
		return 0, err
	}
	for i := range cms.Items {
		s.collect(found, cms.Items[i].Labels)
	}
	stones, err := s.tombstones.all(ctx)
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
			if tomb { // placed here again: nothing to collect
				if err := s.tombstones.swept(ctx, lo.uid, cluster); err != nil {
					return unsure, err
				}
			}
			continue // placed here, or not known to be gone: kept
		}
		owner := member.Owner{Namespace: lo.key.Namespace, Name: lo.key.Name, UID: lo.uid, HubID: s.hubID}
		done, err := member.Teardown(ctx, cl.GetClient(), owner, policy, s.memo)
		if err != nil {
			return unsure, err
		}
		if !done {
			unsure++
			continue
		}
		s.memo.ForgetDatabase(cluster, lo.key.Namespace, lo.key.Name)
		if tomb {
			if err := s.tombstones.swept(ctx, lo.uid, cluster); err != nil {
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
func (s *sweeper) decide(ctx context.Context, cluster string, lo leftover, stones map[types.UID]tombstone) (
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
		return ts.Policy, true, true, nil
	case err != nil:
		return "", true, false, err
	}
	p := s.state.plan(lo.key)
	if p == nil || p.uid != db.UID {
		return "", true, false, nil
	}
	if db.UID == lo.uid && p.role(cluster) != roleNone {
		return "", true, true, nil // placed here again: a member sync owns it; the tombstone is stale
	}
	if p.role(cluster) != roleNone {
		return "", false, true, nil // a Database of the same name runs here now: leave it to its sync
	}
	return ts.Policy, true, true, nil
}

// collect notes the Database of a member object this hub wrote.
func (s *sweeper) collect(found map[leftover]bool, l map[string]string) {
	if l[fleetv1alpha1.LabelManagedBy] != fleetv1alpha1.ManagedByValue || l[fleetv1alpha1.LabelHubID] != s.hubID || s.hubID == "" {
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
