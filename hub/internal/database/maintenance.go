package database

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleetv1alpha1 "github.com/fleetdb/fleetdb/apis/v1alpha1"
)

// nodeMaintenance are the targets whose MemberCluster has
// spec.nodeMaintenance.inProgress, for a Database on the CloudNativePG
// backend (the StatefulSet backend renders a PodDisruptionBudget only for
// more than one replica, which lets one pod go: drains pass); nil when none.
func (r *databaseReconciler) nodeMaintenance(ctx context.Context, db *fleetv1alpha1.Database, targets []string) (map[string]bool, error) {
	if db.EffectiveBackend() != fleetv1alpha1.BackendCloudNativePG {
		return nil, nil
	}
	var out map[string]bool
	for _, name := range targets {
		var mc fleetv1alpha1.MemberCluster
		if err := r.hub.Get(ctx, client.ObjectKey{Name: name}, &mc); err != nil {
			if apierrors.IsNotFound(err) {
				continue
			}
			return nil, fmt.Errorf("reading member cluster %s: %w", name, err)
		}
		if mc.NodeMaintenanceInProgress() {
			if out == nil {
				out = map[string]bool{}
			}
			out[name] = true
		}
	}
	return out, nil
}
