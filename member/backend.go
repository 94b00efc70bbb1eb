package member

import (
	"context"
	"errors"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleetv1alpha1 "github.com/fleetdb/fleetdb/apis/v1alpha1"
)

// CNPGClusterGVK is CloudNativePG's Cluster kind. fleetdb writes it as an
// unstructured object holding only the fields it sets (the typed API would
// drag CloudNativePG's internals into the build and serialise zero values
// that server-side apply would then own).
var CNPGClusterGVK = schema.GroupVersionKind{Group: "postgresql.cnpg.io", Version: "v1", Kind: "Cluster"}

// CNPGGroupVersion is the API group version a member must serve to offer the
// CloudNativePG backend.
var CNPGGroupVersion = CNPGClusterGVK.GroupVersion()

// NewCNPGCluster returns an empty unstructured CloudNativePG Cluster (for
// reads, lists of its kind and informers).
func NewCNPGCluster() *unstructured.Unstructured {
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(CNPGClusterGVK)
	return u
}

// NewCNPGClusterList is an empty list of CloudNativePG Clusters, to list into.
func NewCNPGClusterList() *unstructured.UnstructuredList {
	l := &unstructured.UnstructuredList{}
	l.SetGroupVersionKind(CNPGClusterGVK.GroupVersion().WithKind("ClusterList"))
	return l
}

// BackendMissingError says that the member does not serve the API of the
// Database's backend (CloudNativePG's CRDs are not installed). It is terminal
// for that member until the member changes.
type BackendMissingError struct {
	Backend fleetv1alpha1.Backend
}

// Error names the backend and what is missing.
func (e *BackendMissingError) Error() string {
	return "the member does not offer the " + string(e.Backend) + " backend: it serves no " +
		CNPGGroupVersion.String() + " Cluster API (install CloudNativePG there, or place the Database elsewhere)"
}

// IsBackendMissing reports whether err says that the member lacks the API of
// a backend: a *BackendMissingError, or the API server's or REST mapper's
// answer for a kind it does not serve.
func IsBackendMissing(err error) bool {
	var bm *BackendMissingError
	return errors.As(err, &bm) || meta.IsNoMatchError(err)
}

// noKindServed reports whether err means that the member serves no such kind
// (no CRD): a list of it then has nothing to find.
func noKindServed(err error) bool {
	return meta.IsNoMatchError(err) || (apierrors.IsNotFound(err) && isStatusForMissingResource(err))
}

// isStatusForMissingResource tells a 404 for the resource type itself (the
// group or kind is not served) from one for a named object: a list answers
// 404 only in the first case.
func isStatusForMissingResource(err error) bool {
	var status apierrors.APIStatus
	if !errors.As(err, &status) {
		return false
	}
	d := status.Status().Details
	return d == nil || d.Name == ""
}

// RunningBackends says which backends the Owner's Database runs on in this
// member, from the workload objects there (never from what the hub
// recorded): CloudNativePG for a Cluster of the Owner's, StatefulSet for a
// StatefulSet of the Owner's (see Owner); none when neither is there. The
// hub reads it for a Database whose backend it no longer knows.
func RunningBackends(ctx context.Context, c client.Reader, o Owner) ([]fleetv1alpha1.Backend, error) {
	var out []fleetv1alpha1.Backend
	clusters, err := listManagedClusters(ctx, c, o)
	if err != nil {
		return nil, err
	}
	if len(clusters) > 0 {
		out = append(out, fleetv1alpha1.BackendCloudNativePG)
	}
	sts, err := listManaged(ctx, c, workloadKinds[0], o)
	if err != nil {
		return nil, err
	}
	if len(sts) > 0 {
		out = append(out, fleetv1alpha1.BackendStatefulSet)
	}
	return out, nil
}
