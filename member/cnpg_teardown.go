package member

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/hashicorp/go-multierror"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleetv1alpha1 "github.com/fleetdb/fleetdb/apis/v1alpha1"
)

// teardownCNPG removes or releases the CloudNativePG Clusters of the Owner
// o (labelled for the hub Database namespace/name and o's, see Owner: never
// another hub's, never an earlier Database's of the same name written before
// hub identities); done once none is left (or, for Orphan, once they are
// released). A member that serves no Cluster API has none.
//
//   - Delete deletes the Cluster; CloudNativePG's owner references take its
//     pods, Services and volume claims with it (the garbage collector's work:
//     a control plane without one keeps the claims).
//   - Retain keeps the data: it hibernates the Cluster (CloudNativePG stops
//     every instance, keeping the claims), removes the owner references from
//     its volume claims, then deletes the Cluster. A Cluster created later
//     under the same name in the namespace finds those claims (labelled
//     cnpg.io/cluster=<name>, with no owner) and restarts from them: that is
//     CloudNativePG's restore of a deleted Cluster from orphan volume claims.
//   - Orphan strips fleetdb's labels from the Cluster: it keeps running,
//     no longer fleetdb's.
func teardownCNPG(ctx context.Context, c client.Client, o Owner, policy fleetv1alpha1.DeletionPolicy, memo *Memo) (bool, error) {
	clusters, err := listManagedClusters(ctx, c, o)
	if err != nil {
		return false, err
	}
	var errs *multierror.Error
	done := true
	for _, u := range clusters {
		gone, err := teardownOneCNPG(ctx, c, u, policy, memo)
		if err != nil {
			errs = multierror.Append(errs, fmt.Errorf("the Cluster %s/%s: %w", u.GetNamespace(), u.GetName(), err))
		}
		done = done && gone && err == nil
	}
	return done, errs.ErrorOrNil()
}

// listManagedClusters lists the CloudNativePG Clusters labelled for the
// Database o names that are o's (see Owner), as listManaged does for the
// other kinds: the teardown and the final backup's "is there a workload"
// (HasWorkload) see the same Clusters. A member that serves no Cluster API,
// or an identity that may not see Clusters (a member joined before the
// backend existed), has none: fleetdb cannot have made any.
func listManagedClusters(ctx context.Context, c client.Reader, o Owner) ([]*unstructured.Unstructured, error) {
	list := NewCNPGClusterList()
	err := c.List(ctx, list, client.InNamespace(o.Namespace), client.MatchingLabelsSelector{Selector: SelectorFor(o.Namespace, o.Name)})
	if noKindServed(err) || apierrors.IsForbidden(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("listing Clusters: %w", err)
	}
	var out []*unstructured.Unstructured
	for i := range list.Items {
		if o.owns(&list.Items[i]) {
			out = append(out, &list.Items[i])
		}
	}
	return out, nil
}

// teardownOneCNPG takes one step of the policy for one Cluster; gone reports
// that nothing is left to do for it.
func teardownOneCNPG(ctx context.Context, c client.Client, u *unstructured.Unstructured, policy fleetv1alpha1.DeletionPolicy, memo *Memo) (gone bool, err error) {
	switch policy {
	case fleetv1alpha1.DeletionPolicyOrphan:
		return true, patchLabelsAway(ctx, c, u)
	case fleetv1alpha1.DeletionPolicyRetain:
		if u.GetDeletionTimestamp() != nil {
			return false, nil
		}
		if ok, err := hibernate(ctx, c, u); err != nil || !ok {
			return false, err
		}
		if err := releaseClaims(ctx, c, u); err != nil {
			return false, err
		}
	}
	if u.GetDeletionTimestamp() != nil || memo.deleteSent(u.GetUID()) {
		return false, nil
	}
	// Background, never Orphan: the pods and Services go with the Cluster.
	err = c.Delete(ctx, u, client.PropagationPolicy(metav1.DeletePropagationBackground))
	if err != nil && !apierrors.IsNotFound(err) {
		return false, fmt.Errorf("deleting: %w", err)
	}
	memo.markDeleted(u.GetUID())
	return false, nil
}

// hibernate asks CloudNativePG to stop the Cluster's instances; ok once they
// have stopped. CloudNativePG only hibernates a healthy Cluster: one that is
// not (and has not started hibernating) is deleted as it is, its pods
// stopped by the garbage collector, the claims kept all the same.
func hibernate(ctx context.Context, c client.Client, u *unstructured.Unstructured) (ok bool, err error) {
	if u.GetAnnotations()[cnpgHibernationAnnotation] != "on" {
		patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]any{cnpgHibernationAnnotation: "on"}}})
		if err := c.Patch(ctx, u, client.RawPatch(types.MergePatchType, patch), client.FieldOwner(fleetv1alpha1.FieldManager)); err != nil {
			return false, fmt.Errorf("hibernating: %w", err)
		}
		return false, nil
	}
	s := readCNPGStatus(u)
	if s.hibernated {
		return true, nil
	}
	return s.phase != cnpgHealthyPhase && !hibernationStarted(s.hibernationReason), nil
}

// CloudNativePG's reasons of the cnpg.io/hibernation condition
// (pkg/reconciler/hibernation/status.go, v1.30.0). Since v1.28.2 an
// unhealthy Cluster asked to hibernate gets the condition with reason
// WaitingForHealthy (status False): hibernation has not started, and will
// not until the Cluster is healthy.
const (
	cnpgHibernationHibernated          = "Hibernated"
	cnpgHibernationDeletingPods        = "DeletingPods"
	cnpgHibernationWaitingPodsDeletion = "WaitingPodsDeletion"
)

// hibernationStarted: the condition's reason says CloudNativePG is stopping
// the instances or has stopped them (its isHibernationOngoing, same file).
// WaitingForHealthy, WrongAnnotationValue or no condition: it has not.
func hibernationStarted(reason string) bool {
	switch reason {
	case cnpgHibernationHibernated, cnpgHibernationDeletingPods, cnpgHibernationWaitingPodsDeletion:
		return true
	}
	return false
}

// releaseClaims removes every owner reference from the volume claims the
// Cluster controls (CloudNativePG restores a Cluster only from claims with
// none) and records on them the Database UID they were released from
// (AnnotationReleasedUID, as patchLabelsAway does for fleetdb's objects). They are listed live: they carry CloudNativePG's labels, not
// fleetdb's, so the hub's member cache does not hold them (an unstructured
// list is never served from the cache).
func releaseClaims(ctx context.Context, c client.Client, u *unstructured.Unstructured) error {
	claims := &unstructured.UnstructuredList{}
	claims.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("PersistentVolumeClaimList"))
	if err := c.List(ctx, claims, client.InNamespace(u.GetNamespace()), client.MatchingLabels{cnpgClusterLabel: u.GetName()}); err != nil {
		return fmt.Errorf("listing volume claims: %w", err)
	}
	meta := map[string]any{"ownerReferences": nil}
	if uid := u.GetLabels()[fleetv1alpha1.LabelDatabaseUID]; uid != "" {
		// The Database the claims held the data of: a later Database of the
		// name starts on them only when the hub's record of that UID, or
		// AnnotationAdoptCredentials, says so (see ClaimsGuard).
		meta["annotations"] = map[string]any{fleetv1alpha1.AnnotationReleasedUID: uid}
	}
	patch, err := json.Marshal(map[string]any{"metadata": meta})
	if err != nil {
		return err
	}
	var errs *multierror.Error
	for i := range claims.Items {
		claim := &claims.Items[i]
		owner := metav1.GetControllerOfNoCopy(claim)
		if owner == nil || owner.UID != u.GetUID() {
			continue
		}
		err := c.Patch(ctx, claim, client.RawPatch(types.MergePatchType, patch), client.FieldOwner(fleetv1alpha1.FieldManager))
		if err != nil && !apierrors.IsNotFound(err) {
			errs = multierror.Append(errs, fmt.Errorf("releasing volume claim %s: %w", claim.GetName(), err))
		}
	}
	return errs.ErrorOrNil()
}

// patchLabelsAway strips fleetdb's labels from obj, recording the Database
// UID it carried in AnnotationReleasedUID.
func patchLabelsAway(ctx context.Context, c client.Client, obj client.Object) error {
	strip := map[string]any{}
	for _, l := range releasedLabels {
		strip[l] = nil
	}
	meta := map[string]any{"labels": strip}
	if uid := obj.GetLabels()[fleetv1alpha1.LabelDatabaseUID]; uid != "" {
		// The UID it was released from: a Database told to adopt it
		// (AnnotationAdoptCredentials) is matched against it.
		meta["annotations"] = map[string]any{fleetv1alpha1.AnnotationReleasedUID: uid}
	}
	patch, err := json.Marshal(map[string]any{"metadata": meta})
	if err != nil {
		return err
	}
	if err := c.Patch(ctx, obj, client.RawPatch(types.MergePatchType, patch), client.FieldOwner(fleetv1alpha1.FieldManager)); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("releasing: %w", err)
	}
	return nil
}

// retainedCredentials reports whether cur, found where the CloudNativePG
// backend's credentials Secret goes, is the one an earlier Database of the
// same name released on teardown (fleetdb's labels stripped, its
// deletion-policy annotation kept; the annotation may predate a policy
// change that had not reached this member yet): a re-created Database takes
// it over, so that it can start from the retained volumes. CloudNativePG sets
// the owner's password from the Secret again at every start, so the new
// credentials work on the old data. (After an Orphan teardown the Cluster
// itself is still there, unlabelled, and conflicts: nothing is taken over.)
func retainedCredentials(cur, desired client.Object) bool {
	s, ok := cur.(*corev1.Secret)
	d, dok := desired.(*corev1.Secret)
	if !ok || !dok {
		return false
	}
	_, marked := s.Annotations[fleetv1alpha1.AnnotationDeletionPolicy]
	return s.Type == corev1.SecretTypeBasicAuth && d.Type == corev1.SecretTypeBasicAuth &&
		s.Labels[fleetv1alpha1.LabelManagedBy] == "" && marked
}
