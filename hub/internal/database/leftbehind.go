package database

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleetv1alpha1 "github.com/fleetdb/fleetdb/apis/v1alpha1"
	"github.com/fleetdb/fleetdb/internal/statusmsg"
)

// maxLeftBehind bounds status.leftBehind (the CRD's MaxItems).
const maxLeftBehind = 64

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
		r.recorder.Eventf(db, nil, corev1.EventTypeWarning, fleetv1alpha1.ReasonMemberRemoved, "Teardown", "%s", leftBehindMessage(db, name))
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

func leftBehindMessage(db *fleetv1alpha1.Database, member string) string {
	return fmt.Sprintf("member %s left the registry while the Database was placed on it: nothing was removed there; "+
		"its StatefulSet, Services, ConfigMap, credentials Secret and PersistentVolumeClaims of %s remain in namespace %s of that cluster",
		member, db.Name, db.Namespace)
}

// leftBehindStatus is status.leftBehind: the earlier entries, less members
// placed again, plus the members that just left.
func leftBehindStatus(db *fleetv1alpha1.Database, left []string, targets map[string]bool, now time.Time) []fleetv1alpha1.LeftBehind {
	var out []fleetv1alpha1.LeftBehind
	for _, e := range db.Status.LeftBehind {
		if !targets[e.Cluster] && !slices.Contains(left, e.Cluster) {
			out = append(out, e)
		}
	}
	for _, name := range left {
		if targets[name] {
			continue
		}
		out = append(out, fleetv1alpha1.LeftBehind{Cluster: name, Message: statusmsg.Bound(leftBehindMessage(db, name)), Since: metav1.NewTime(now)})
	}
	slices.SortFunc(out, func(a, b fleetv1alpha1.LeftBehind) int { return strings.Compare(a.Cluster, b.Cluster) })
	if len(out) > maxLeftBehind {
		out = out[:maxLeftBehind]
	}
	return out
}

// teardownPolicy is the policy a member's teardown uses now: the deletion
// policy for a Database being deleted, else spec.teardown.onPlacementRemoval.
func teardownPolicy(db *fleetv1alpha1.Database) fleetv1alpha1.DeletionPolicy {
	if db.DeletionTimestamp.IsZero() {
		return db.PlacementRemovalDeletionPolicy()
	}
	if db.Spec.DeletionPolicy == "" {
		return fleetv1alpha1.DeletionPolicyDelete
	}
	return db.Spec.DeletionPolicy
}
