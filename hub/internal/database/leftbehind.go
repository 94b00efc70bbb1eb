package database

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleetv1alpha1 "github.com/fleetdb/fleetdb/apis/v1alpha1"
	"github.com/fleetdb/fleetdb/hub/internal/dbstatus"
)

// membersLeftRegistry takes out of teardown the members whose MemberCluster
// is gone (or going): the hub cannot reach them any more and removes
// nothing there. Each gets an Event saying what stays where; the caller
// records them in status.leftBehind.
func (r *databaseReconciler) membersLeftRegistry(ctx context.Context, db *fleetv1alpha1.Database,
	teardown map[string]bool, results map[string]*memberResult) []string {
	var left []string
	for _, name := range sortedKeys(teardown) {
		if r.registeredLive(ctx, name) {
			continue
		}
		delete(teardown, name)
		delete(results, name)
		r.state.dropResult(client.ObjectKeyFromObject(db), name)
		left = append(left, name)
		r.recorder.Eventf(db, nil, corev1.EventTypeWarning, fleetv1alpha1.ReasonMemberRemoved, "Teardown", "%s", dbstatus.LeftBehindMessage(db, name))
	}
	return left
}

// registeredLive reports a member whose MemberCluster exists and is not being deleted.
func (r *databaseReconciler) registeredLive(ctx context.Context, name string) bool {
	var mc fleetv1alpha1.MemberCluster
	err := r.hub.Get(ctx, client.ObjectKey{Name: name}, &mc)
	if err != nil {
		return client.IgnoreNotFound(err) != nil // unsure: keep treating it as registered
	}
	return mc.DeletionTimestamp.IsZero()
}
