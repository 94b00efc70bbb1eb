package member

import (
	"context"
	"fmt"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleetv1alpha1 "github.com/fleetdb/fleetdb/apis/v1alpha1"
)

// cnpgSerialAnnotation is CloudNativePG's node serial annotation on its
// volume claims: CloudNativePG restores a new Cluster only from claims of
// its name (cnpgClusterLabel) that carry it and have no owner reference
// (getOrphanPVCs, internal/controller/cluster_restore.go; the names in
// pkg/utils/labels_annotations.go: ClusterLabelName "cnpg.io/cluster",
// ClusterSerialAnnotationName "cnpg.io/nodeSerial"; v1.30.0).
const cnpgSerialAnnotation = "cnpg.io/nodeSerial"

// RetainedClaim is a volume claim in the member that a workload Apply is
// about to create would start on, and that is not the applied Database's:
// an earlier Database's of the name (kept by a Retain teardown, or by a
// placement removal), or anyone's.
type RetainedClaim struct {
	Name string
	// From is the Database UID the claim is labelled with or was released
	// from (AnnotationReleasedUID); empty when it carries neither.
	From types.UID
}

// ClaimsGuard is asked, before Apply creates a workload, about the retained
// claims it would start on (never empty); it returns those that may not be
// adopted. Apply then writes nothing and returns a *RetainedDataError.
type ClaimsGuard func(ctx context.Context, claims []RetainedClaim) (refused []RetainedClaim, err error)

// RetainedDataError says that Apply did not create a workload because it
// would have started on volume claims of another Database than the applied
// one, which the ClaimsGuard refused. The claims are untouched.
type RetainedDataError struct {
	Kind, Namespace, Name string
	Claims                []RetainedClaim
}

// Error names the claims, where they came from and the two ways out.
func (e *RetainedDataError) Error() string {
	var named, bare []string
	for _, c := range e.Claims {
		if c.From == "" {
			bare = append(bare, c.Name)
		} else {
			named = append(named, fmt.Sprintf("%s (Database uid %s)", c.Name, c.From))
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s/%s not created: it would start on volume claims that hold another Database's data, "+
		"which no Retain record of this hub ties to this Database:", e.Kind, e.Namespace, e.Name)
	if len(named) > 0 {
		fmt.Fprintf(&b, " %s;", strings.Join(named, ", "))
	}
	if len(bare) > 0 {
		fmt.Fprintf(&b, " %s (no fleetdb Database uid: annotate them %s=<uid> to name one);",
			strings.Join(bare, ", "), fleetv1alpha1.AnnotationReleasedUID)
	}
	fmt.Fprintf(&b, " to run on that data, set the Database's annotation %s=<that uid>; "+
		"to start afresh, delete those claims from the member by hand", fleetv1alpha1.AnnotationAdoptCredentials)
	return b.String()
}

// guardClaims asks guard about the claims each workload of the plan that is
// to be created (not in the member) would start on, when any is not the
// applied Database's. They are read live: claims a teardown released carry
// no fleetdb label (the member caches select fleetdb's), and CloudNativePG's
// never do. A workload that exists costs no read: a steady member makes no
// call here.
func (p *plan) guardClaims(ctx context.Context, live client.Reader, guard ClaimsGuard) error {
	if guard == nil || p.owner.UID == "" {
		return nil
	}
	for _, it := range p.items {
		if it.live != nil || !isWorkloadKind(it.gvk) {
			continue
		}
		claims, err := claimsToBind(ctx, live, it.desired)
		if err != nil {
			return err
		}
		var foreign []RetainedClaim
		for _, c := range claims {
			if c.From != p.owner.UID {
				foreign = append(foreign, c)
			}
		}
		if len(foreign) == 0 {
			continue
		}
		refused, err := guard(ctx, foreign)
		if err != nil {
			return err
		}
		if len(refused) > 0 {
			return &RetainedDataError{Kind: it.gvk.Kind, Namespace: it.desired.GetNamespace(), Name: it.desired.GetName(), Claims: refused}
		}
	}
	return nil
}

// claimsToBind reads the volume claims the workload w would start on:
//
//   - a StatefulSet binds the claims named <template>-<name>-<ordinal> for
//     each of its volumeClaimTemplates and ordinals (the StatefulSet
//     controller's getPersistentVolumeClaimName), whoever made them;
//   - a new CloudNativePG Cluster restarts from the orphan claims of its
//     name (see cnpgSerialAnnotation).
//
// Claims being deleted, and the backup volume claim, are left out.
func claimsToBind(ctx context.Context, live client.Reader, w client.Object) ([]RetainedClaim, error) {
	var objs []*unstructured.Unstructured
	switch obj := w.(type) {
	case *appsv1.StatefulSet:
		replicas := int32(1)
		if obj.Spec.Replicas != nil {
			replicas = *obj.Spec.Replicas
		}
		var names []string
		for _, t := range obj.Spec.VolumeClaimTemplates {
			for i := range replicas {
				names = append(names, fmt.Sprintf("%s-%s-%d", t.Name, obj.Name, i))
			}
		}
		found := make([]*unstructured.Unstructured, len(names))
		reads := make([]func() error, len(names))
		for i, name := range names {
			reads[i] = func() error {
				u := newClaim()
				err := live.Get(ctx, client.ObjectKey{Namespace: obj.Namespace, Name: name}, u)
				switch {
				case apierrors.IsNotFound(err):
					return nil
				case err != nil:
					return fmt.Errorf("reading volume claim %s/%s: %w", obj.Namespace, name, err)
				}
				found[i] = u
				return nil
			}
		}
		if err := parallel(reads); err != nil {
			return nil, err
		}
		for _, u := range found {
			if u != nil {
				objs = append(objs, u)
			}
		}
	default:
		if w.GetObjectKind().GroupVersionKind() != CNPGClusterGVK {
			return nil, nil
		}
		list := &unstructured.UnstructuredList{}
		list.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("PersistentVolumeClaimList"))
		if err := live.List(ctx, list, client.InNamespace(w.GetNamespace()), client.MatchingLabels{cnpgClusterLabel: w.GetName()}); err != nil {
			return nil, fmt.Errorf("listing volume claims: %w", err)
		}
		for i := range list.Items {
			u := &list.Items[i]
			if _, serial := u.GetAnnotations()[cnpgSerialAnnotation]; serial && len(u.GetOwnerReferences()) == 0 {
				objs = append(objs, u)
			}
		}
	}
	var out []RetainedClaim
	for _, u := range objs {
		if u.GetDeletionTimestamp() != nil || u.GetLabels()[fleetv1alpha1.LabelBackupVolume] == "true" {
			continue
		}
		out = append(out, RetainedClaim{Name: u.GetName(), From: claimFrom(u)})
	}
	return out, nil
}

// claimFrom is the Database UID a claim is labelled with (fleetdb's) or
// was released from by a teardown; empty when it carries neither.
func claimFrom(u *unstructured.Unstructured) types.UID {
	if l := u.GetLabels(); l[fleetv1alpha1.LabelManagedBy] != "" && l[fleetv1alpha1.LabelDatabaseUID] != "" {
		return types.UID(l[fleetv1alpha1.LabelDatabaseUID])
	}
	return types.UID(u.GetAnnotations()[fleetv1alpha1.AnnotationReleasedUID])
}

// newClaim is an empty unstructured volume claim: read live, never from a cache.
func newClaim() *unstructured.Unstructured {
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("PersistentVolumeClaim"))
	return u
}
