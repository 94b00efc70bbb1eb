package hub

import (
	"context"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	mcreconcile "sigs.k8s.io/multicluster-runtime/pkg/reconcile"

	fleetv1alpha1 "github.com/fleetdb/fleetdb/apis/v1alpha1"
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
		if namespaceAllowed(ctx, m, ns.Labels) {
			allowed = append(allowed, *m)
		} else if slices.Contains(db.Spec.Placement.ClusterNames, m.Name) {
			denied = append(denied, m.Name)
		}
	}
	return allowed, denied, nil
}

// namespaceAllowed reports whether m admits Databases of a namespace with nsLabels.
func namespaceAllowed(ctx context.Context, m *fleetv1alpha1.MemberCluster, nsLabels map[string]string) bool {
	if m.Spec.NamespaceSelector == nil {
		return false
	}
	sel, err := metav1.LabelSelectorAsSelector(m.Spec.NamespaceSelector)
	if err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "invalid spec.namespaceSelector: the member admits no namespace", "member", m.Name)
		return false
	}
	return sel.Matches(labels.Set(nsLabels))
}

// notAllowedMessage is the Stalled message of a Database naming members its namespace may not use.
func notAllowedMessage(db *fleetv1alpha1.Database, denied []string) string {
	return fmt.Sprintf("namespace %s may not place Databases on member(s) %s (their spec.namespaceSelector does not admit it); "+
		"ask the platform team, or remove them from spec.placement.clusterNames", db.Namespace, strings.Join(denied, ", "))
}

// databasesIn maps a hub Namespace (its labels changed) to its Databases:
// the members they may use may have changed.
func databasesIn(c client.Client) func(context.Context, client.Object) []mcreconcile.Request {
	return func(ctx context.Context, obj client.Object) []mcreconcile.Request {
		return listDatabases(ctx, c, "a namespace change", client.InNamespace(obj.GetName()))
	}
}
