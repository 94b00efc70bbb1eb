package member

import (
	"context"
	"fmt"
	"sort"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleetv1alpha1 "github.com/fleetdb/fleetdb/apis/v1alpha1"
)

// DataClaims names the data volume claims of the Database o left in the
// member, not being deleted, whatever runs them (or nothing does):
//
//   - the StatefulSet backend's claims (data-<name>-<n>), labelled for the
//     Database like every kind (see Owner): the ones a Delete teardown
//     deletes;
//   - CloudNativePG's claims of a Cluster of the Database's name
//     (<name>-<n>, labelled cnpg.io/cluster=<name>, CloudNativePG's labels
//     only, so listed live as releaseClaims does).
//
// The backup volume claim is not a data claim. A member that serves no
// Cluster API or whose identity may not list claims unlabelled by fleetdb
// simply has none of the second kind.
func DataClaims(ctx context.Context, c client.Reader, o Owner) ([]string, error) {
	objs, err := listManaged(ctx, c, pvcKind, o)
	if err != nil {
		return nil, err
	}
	names := map[string]bool{}
	for _, obj := range objs {
		if obj.GetDeletionTimestamp() == nil && obj.GetLabels()[fleetv1alpha1.LabelBackupVolume] != "true" {
			names[obj.GetName()] = true
		}
	}
	claims := &unstructured.UnstructuredList{}
	claims.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("PersistentVolumeClaimList"))
	if err := c.List(ctx, claims, client.InNamespace(o.Namespace), client.MatchingLabels{cnpgClusterLabel: o.Name}); err != nil {
		return nil, fmt.Errorf("listing volume claims: %w", err)
	}
	for i := range claims.Items {
		claim := &claims.Items[i]
		if claim.GetDeletionTimestamp() == nil && claim.GetLabels()[fleetv1alpha1.LabelBackupVolume] != "true" {
			names[claim.GetName()] = true
		}
	}
	out := make([]string, 0, len(names))
	for n := range names {
		out = append(out, n)
	}
	sort.Strings(out)
	return out, nil
}
