package database

import (
	"context"
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	mcreconcile "sigs.k8s.io/multicluster-runtime/pkg/reconcile"

	fleetv1alpha1 "github.com/fleetdb/fleetdb/apis/v1alpha1"
	"github.com/fleetdb/fleetdb/internal/placement"
)

// +kubebuilder:rbac:groups="",resources=namespaces,verbs=get;list;watch

// admitMembers applies the members' tenancy rules to a Database: allowed
// are the members whose spec.namespaceSelector admits the Database's
// namespace (by its labels; an unset selector admits none, {} all); denied
// are the members its spec.placement.clusterNames names but may not use.
// A clusterSelector only ever sees allowed members.
func (r *databaseReconciler) admitMembers(ctx context.Context, db *fleetv1alpha1.Database, members []fleetv1alpha1.MemberCluster) (
	allowed []fleetv1alpha1.MemberCluster, denied []string, err error) {
	var ns corev1.Namespace
	if err := r.hub.Get(ctx, client.ObjectKey{Name: db.Namespace}, &ns); err != nil {
		return nil, nil, fmt.Errorf("reading namespace %s: %w", db.Namespace, err)
	}
	for i := range members {
		m := &members[i]
		ok, err := placement.NamespaceAllowed(m, ns.Labels)
		if err != nil {
			ctrl.LoggerFrom(ctx).Error(err, "invalid spec.namespaceSelector: the member admits no namespace", "member", m.Name)
		}
		if ok {
			allowed = append(allowed, *m)
		} else if slices.Contains(db.Spec.Placement.ClusterNames, m.Name) {
			denied = append(denied, m.Name)
		}
	}
	return allowed, denied, nil
}

// databasesIn maps a hub Namespace (its labels changed) to its Databases:
// the members they may use may have changed.
func databasesIn(c client.Client) func(context.Context, client.Object) []mcreconcile.Request {
	return func(ctx context.Context, obj client.Object) []mcreconcile.Request {
		return listDatabases(ctx, c, "a namespace change", client.InNamespace(obj.GetName()))
	}
}
