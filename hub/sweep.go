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
// Database this hub knows to be gone or no longer placed there: gone means a
// tombstone the hub recorded when it skipped the teardown, and the policy is
// the one recorded then. Nothing read back from a member (a policy
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
	if len(found) == 0 {
		return 0, nil
	}
	stones, err := s.tombstones.all(ctx)
	if err != nil {
		return 0, err
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
// tomb tells that it came from a tombstone; decided is false while the
// Database controller has not planned an existing Database yet.
func (s *sweeper) decide(ctx context.Context, cluster string, lo leftover, stones map[types.UID]tombstone) (
	policy fleetv1alpha1.DeletionPolicy, tomb, decided bool, err error) {
	ts, ok := stones[lo.uid]
	tomb = ok && ts.Namespace == lo.key.Namespace && ts.Name == lo.key.Name && slices.Contains(ts.Members, cluster)
	var db fleetv1alpha1.Database
	err = s.hub.Get(ctx, lo.key, &db)
	switch {
	case apierrors.IsNotFound(err):
		if tomb {
			return ts.Policy, true, true, nil
		}
		return "", false, true, nil // not known to be gone (a hub restored from backup): keep
	case err != nil:
		return "", false, false, err
	}
	p := s.state.plan(lo.key)
	if p == nil || p.uid != db.UID {
		return "", false, false, nil
	}
	switch {
	case p.role(cluster) != roleNone:
		return "", false, true, nil // a member sync owns it
	case db.UID == lo.uid:
		return db.PlacementRemovalDeletionPolicy(), tomb, true, nil // dropped while the member was away
	case tomb:
		return ts.Policy, true, true, nil
	}
	return "", false, true, nil
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
