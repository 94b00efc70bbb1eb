package database

import (
	"context"
	"slices"
	"time"

	"k8s.io/apimachinery/pkg/types"

	fleetv1alpha1 "github.com/fleetdb/fleetdb/apis/v1alpha1"
	"github.com/fleetdb/fleetdb/internal/statusmsg"
	"github.com/fleetdb/fleetdb/member"
)

// retainedDataRetry is how soon a member whose new workload was refused for
// retained volume claims is looked at again: deleting those claims by hand
// (they carry no fleetdb label, so no watch sees it) lets it go on. The
// adopt annotation wakes it at once (a plan change, see changedMembers).
const retainedDataRetry = time.Minute

// claimsGuard is the member.ClaimsGuard of db's apply in member cluster:
// before the workload is created there, the volume claims it would start on
// that are another Database's (or name none) are adopted only when the
// hub's own records vouch for them, as for the credentials Secret
// (recoverySources): the Retain record of an earlier Database of this
// namespace/name, written by this hub in this very hub namespace and naming
// this member; a tombstone of a teardown skipped in this member; or
// AnnotationAdoptCredentials naming their UID. The hub's records are read
// only when such claims were found (a new placement on retained data).
func (r *memberSyncReconciler) claimsGuard(db *fleetv1alpha1.Database, cluster string) member.ClaimsGuard {
	return func(ctx context.Context, claims []member.RetainedClaim) ([]member.RetainedClaim, error) {
		src := recoverySources{told: types.UID(db.Annotations[fleetv1alpha1.AnnotationAdoptCredentials])}
		var err error
		if src.retained, src.skipped, src.skippedUIDs, err = hubRecordsOf(ctx, r.hub, r.tombstones, r.opts.HubID, db); err != nil {
			return nil, err
		}
		var refused []member.RetainedClaim
		for _, c := range claims {
			if !src.vouchesForClaim(c.From, cluster) {
				refused = append(refused, c)
			}
		}
		return refused, nil
	}
}

// vouchesForClaim says whether a volume claim of the Database UID from
// (empty: the claim names none), found in member, may be adopted: the UID
// the annotation names, the retained record's for this member (a claim
// naming no UID there too: released before teardowns recorded it, as
// accepts takes such a Secret), or a tombstone's of a teardown skipped there.
func (src recoverySources) vouchesForClaim(from types.UID, member string) bool {
	switch {
	case from != "" && from == src.told:
		return true
	case src.retained != nil && slices.Contains(src.retained.Members, member) && (from == src.retained.UID || from == ""):
		return true
	}
	return src.skippedIn(from, member)
}

// retainedDataOutcome: the member holds another Database's data where the
// new workload would start; nothing was written. Conflict with reason
// RetainedDataFound, looked at again after retainedDataRetry.
func retainedDataOutcome(cluster string, e *member.RetainedDataError) syncOutcome {
	return syncOutcome{
		outcome: outcomeConflict, reason: errReasonConflict, message: e.Error(), requeue: retainedDataRetry,
		result: &memberResult{Status: fleetv1alpha1.ClusterStatus{
			Name: cluster, Phase: fleetv1alpha1.ClusterPhaseConflict, Reason: fleetv1alpha1.ReasonRetainedDataFound,
			Message: statusmsg.Bound(e.Error()),
		}},
	}
}
