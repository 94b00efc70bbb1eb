package database

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"

	fleetv1alpha1 "github.com/fleetdb/fleetdb/apis/v1alpha1"
	"github.com/fleetdb/fleetdb/hub/internal/hubsecret"
	"github.com/fleetdb/fleetdb/internal/statusmsg"
	"github.com/fleetdb/fleetdb/member"
)

// Credential rotation, the hub's half (the members' half is in
// rotation_member.go and member/rotation.go). The hub credentials Secret is the one record of a
// rotation, so that a hub restart resumes it and never loses a password a
// member's database accepts:
//
//  1. start: a new password goes into the pending-password key and the
//     token into rotation-token; password stays what every database accepts;
//  2. every member sync hands the pending password to its member (the
//     member Secret carries every key), runs a Job there that ALTERs the
//     user on each instance, and once it succeeded gives that member's
//     Secret the new password: clients there re-read it;
//  3. once every placed member switched, password becomes the pending one,
//     the pending keys go and rotated-token records the token; member syncs
//     then write the final Secrets and remove the Jobs.

// maxRotationToken bounds the annotation's value (it is kept in the status).
const maxRotationToken = 253

// rotationOutcome is what reconcileRotation reports for the status.
type rotationOutcome struct {
	condition *metav1.Condition
	status    *fleetv1alpha1.CredentialsStatus
}

// reconcileRotation starts, follows and completes the rotation the
// Database's annotation requests. It runs before reconcileRollout: the
// credentials it changes (a rotation started or completed) are the ones the
// plan publishes to the member syncs; reconcileStatus reports its outcome.
func (r *databaseReconciler) reconcileRotation(ctx context.Context, s *databaseScope) (ctrl.Result, error) {
	creds, outcome, err := r.rotate(ctx, s.db, s.credentials, s.placement.Targets, s.results)
	if err != nil {
		return ctrl.Result{}, err
	}
	s.credentials, s.rotation = creds, outcome
	return ctrl.Result{}, nil
}

// rotate returns the credentials to plan with (changed when it started or
// completed a rotation) and the outcome for the status.
func (r *databaseReconciler) rotate(ctx context.Context, db *fleetv1alpha1.Database, creds map[string][]byte,
	targets []string, results map[string]*memberResult) (map[string][]byte, rotationOutcome, error) {
	requested := db.Annotations[fleetv1alpha1.AnnotationRotateCredentials]
	token := string(creds[member.CredentialsRotationTokenKey])
	rotated := string(creds[member.CredentialsRotatedTokenKey])
	pending := len(creds[member.CredentialsPendingPasswordKey]) > 0

	switch {
	case !pending && (requested == "" || requested == rotated):
		return creds, r.rotationSettled(db, rotated, targets, results), nil
	case !pending && len(requested) > maxRotationToken:
		return creds, rotationCondition(db, metav1.ConditionFalse, fleetv1alpha1.ReasonInvalidRotationToken,
			fmt.Sprintf("the %s annotation is longer than %d characters", fleetv1alpha1.AnnotationRotateCredentials, maxRotationToken), rotated, ""), nil
	case !pending:
		next, err := r.startRotation(ctx, db, requested)
		if err != nil {
			return creds, rotationOutcome{}, err
		}
		r.recorder.Eventf(db, nil, corev1.EventTypeNormal, "RotationStarted", "Rotate",
			"rotating the database password in %d member(s) (token %q)", len(targets), requested)
		return next, rotationCondition(db, metav1.ConditionFalse, fleetv1alpha1.ReasonRotating,
			fmt.Sprintf("rotation %q started", requested), rotated, requested), nil
	}

	var switched, failed, waiting []string
	for _, name := range targets {
		rep := rotationReport{Waiting: "not synced yet"}
		if res := results[name]; res != nil && res.Rotation.Token == token {
			rep = res.Rotation
		}
		switch {
		case rep.Switched:
			switched = append(switched, name)
		case rep.Failed != "":
			failed = append(failed, name+" ("+rep.Failed+")")
		default:
			waiting = append(waiting, name+" ("+rep.Waiting+")")
		}
	}
	if len(switched) < len(targets) {
		msg := fmt.Sprintf("rotation %q: %d of %d member(s) switched", token, len(switched), len(targets))
		reason := fleetv1alpha1.ReasonRotating
		if len(failed) > 0 {
			reason = fleetv1alpha1.ReasonRotationFailed
			msg += "; failed, retrying: " + statusmsg.Names(failed)
		}
		if len(waiting) > 0 {
			msg += "; in progress: " + statusmsg.Names(waiting)
		}
		return creds, rotationCondition(db, metav1.ConditionFalse, reason, msg, rotated, token), nil
	}
	next, err := r.completeRotation(ctx, db, token)
	if err != nil {
		return creds, rotationOutcome{}, err
	}
	return next, rotationCondition(db, metav1.ConditionFalse, fleetv1alpha1.ReasonRotating,
		fmt.Sprintf("rotation %q: every member switched; updating the member Secrets", token), reportedRotated(db), token), nil
}

// rotationHeldMembers are the standby members of a PrimaryStandby Database
// (CloudNativePG backend) that may not switch to the pending password of
// the rotation under way yet. A standby member's database is a replica: it
// gets the new password only by replication of the primary member's ALTER
// ROLE, which CloudNativePG runs on the primary when that member's Secret
// changes. So a standby member's Secret gets the new password, and the
// member counts as switched, only once the primary member switched (its
// Cluster reports the new Secret version), while no switchover runs, and
// while the standby is a healthy standby of that primary. With the primary
// member unreachable the standbys keep the password their database accepts.
// Between the primary's ALTER ROLE and the standby's replay of it there is
// the replication delay, which the hub cannot see (CloudNativePG's status
// carries no WAL positions; see docs/credentials.md, "A PrimaryStandby Database").
func rotationHeldMembers(db *fleetv1alpha1.Database, creds map[string][]byte, targets []string, results map[string]*memberResult) map[string]bool {
	if db.TopologyMode() != fleetv1alpha1.TopologyPrimaryStandby || db.EffectiveBackend() != fleetv1alpha1.BackendCloudNativePG ||
		len(creds[member.CredentialsPendingPasswordKey]) == 0 {
		return nil
	}
	token := string(creds[member.CredentialsRotationTokenKey])
	var primary string
	var switchover bool
	if st := db.Status.Topology; st != nil {
		primary, switchover = st.PrimaryCluster, st.Switchover != nil
	}
	res := results[primary]
	primaryDone := !switchover && res != nil && res.Rotation.Token == token && res.Rotation.Switched
	out := map[string]bool{}
	for _, m := range targets {
		if m == primary {
			continue
		}
		r := results[m]
		follows := r != nil && r.Replication != nil && r.Replication.Primary == primary && r.Replication.Healthy
		if !primaryDone || !follows {
			out[m] = true
		}
	}
	return out
}

// reportedRotated is the status' rotatedToken so far: it names a token only
// once every member Secret holds its password.
func reportedRotated(db *fleetv1alpha1.Database) string {
	if db.Status.Credentials == nil {
		return ""
	}
	return db.Status.Credentials.RotatedToken
}

// rotationSettled reports a Database with no rotation under way: the last
// one is done once every member Secret holds the hub credentials.
func (r *databaseReconciler) rotationSettled(db *fleetv1alpha1.Database, rotated string, targets []string, results map[string]*memberResult) rotationOutcome {
	if rotated == "" {
		return rotationOutcome{}
	}
	var behind []string
	for _, name := range targets {
		if res := results[name]; res == nil || !res.Rotation.Current {
			behind = append(behind, name)
		}
	}
	cur := meta.FindStatusCondition(db.Status.Conditions, fleetv1alpha1.ConditionCredentialsRotated)
	done := db.Status.Credentials != nil && db.Status.Credentials.RotatedToken == rotated &&
		cur != nil && cur.Status == metav1.ConditionTrue
	if len(behind) == 0 || done {
		// Results are in memory: after a hub restart a finished rotation
		// stays reported as finished until members report again.
		return rotationCondition(db, metav1.ConditionTrue, fleetv1alpha1.ReasonRotated,
			fmt.Sprintf("rotation %q completed on every member", rotated), rotated, "")
	}
	return rotationCondition(db, metav1.ConditionFalse, fleetv1alpha1.ReasonRotating,
		fmt.Sprintf("rotation %q: every member switched; updating the member Secrets of: %s", rotated, statusmsg.Names(behind)), reportedRotated(db), rotated)
}

func rotationCondition(db *fleetv1alpha1.Database, status metav1.ConditionStatus, reason, msg, rotated, rotating string) rotationOutcome {
	return rotationOutcome{
		condition: &metav1.Condition{
			Type: fleetv1alpha1.ConditionCredentialsRotated, Status: status, Reason: reason,
			Message: statusmsg.Bound(msg), ObservedGeneration: db.Generation,
		},
		status: &fleetv1alpha1.CredentialsStatus{RotatedToken: rotated, RotatingToken: rotating},
	}
}

// apply puts the outcome into a computed status.
func (o rotationOutcome) apply(st *fleetv1alpha1.DatabaseStatus) {
	if o.condition == nil {
		return
	}
	meta.SetStatusCondition(&st.Conditions, *o.condition)
	st.Credentials = o.status
}

// startRotation writes a new pending password and the token into the hub
// Secret. A mysql Database created before root had a password of its own
// records root's, the current password, in the same write.
func (r *databaseReconciler) startRotation(ctx context.Context, db *fleetv1alpha1.Database, token string) (map[string][]byte, error) {
	password, err := hubsecret.RandomBytes()
	if err != nil {
		return nil, err
	}
	return hubsecret.PatchCredentials(ctx, r.hub, r.live, db, func(data map[string][]byte) (bool, error) {
		switch {
		case string(data[member.CredentialsRotationTokenKey]) == token && len(data[member.CredentialsPendingPasswordKey]) > 0:
			return false, nil // started by an earlier pass (the cache lags)
		case len(data[member.CredentialsPendingPasswordKey]) > 0:
			return false, fmt.Errorf("another rotation is under way")
		}
		if db.Spec.Engine == fleetv1alpha1.EngineMySQL && len(data[member.CredentialsRootPasswordKey]) == 0 {
			data[member.CredentialsRootPasswordKey] = data[member.CredentialsPasswordKey]
		}
		data[member.CredentialsPendingPasswordKey] = password
		data[member.CredentialsRotationTokenKey] = []byte(token)
		return true, nil
	})
}

// completeRotation makes the pending password the password of the hub Secret.
func (r *databaseReconciler) completeRotation(ctx context.Context, db *fleetv1alpha1.Database, token string) (map[string][]byte, error) {
	next, err := hubsecret.PatchCredentials(ctx, r.hub, r.live, db, func(data map[string][]byte) (bool, error) {
		switch {
		case string(data[member.CredentialsRotatedTokenKey]) == token && len(data[member.CredentialsPendingPasswordKey]) == 0:
			return false, nil // completed by an earlier pass (the cache lags)
		case string(data[member.CredentialsRotationTokenKey]) != token || len(data[member.CredentialsPendingPasswordKey]) == 0:
			return false, fmt.Errorf("the rotation %q is no longer under way", token)
		}
		data[member.CredentialsPasswordKey] = data[member.CredentialsPendingPasswordKey]
		data[member.CredentialsRotatedTokenKey] = []byte(token)
		delete(data, member.CredentialsPendingPasswordKey)
		delete(data, member.CredentialsRotationTokenKey)
		return true, nil
	})
	if err == nil {
		r.recorder.Eventf(db, nil, corev1.EventTypeNormal, "RotationCompleted", "Rotate",
			"every member switched to the new password (token %q)", token)
	}
	return next, err
}
