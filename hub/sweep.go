package hub

import (
	"context"
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
// label, so it needs no memory of what happened before a hub restart.
type sweeper struct {
	mgr      mcmanager.Manager
	hub      client.Client
	state    *state
	provider *clusters.Provider
	memo     *member.Memo
	timeout  time.Duration
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
