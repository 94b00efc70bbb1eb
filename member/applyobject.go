package member

import (
	"context"
	"fmt"
	"maps"
	"slices"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// ApplyBody turns a rendered typed object into the body of the server-side
// apply request Apply sends for it; live is the object in the member (nil
// when there is none). A typed object serialises fields it never set
// (status, null timestamps); those are dropped so that fleetdb owns only what
// it renders.
func ApplyBody(desired, live client.Object) (*unstructured.Unstructured, error) {
	obj, ok := desired.DeepCopyObject().(client.Object)
	if !ok {
		return nil, fmt.Errorf("%T is not a client.Object", desired)
	}
	obj.SetManagedFields(nil)
	obj.SetResourceVersion("")
	if sts, ok := obj.(*appsv1.StatefulSet); ok {
		if cur, ok := live.(*appsv1.StatefulSet); ok && !claimTemplatesMatch(sts.Spec.VolumeClaimTemplates, cur.Spec.VolumeClaimTemplates) {
			// Immutable: asking for other templates would only be refused.
			sts.Spec.VolumeClaimTemplates = cur.DeepCopy().Spec.VolumeClaimTemplates
		}
	}
	content, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
	if err != nil {
		return nil, err
	}
	delete(content, "status")
	keepLiveBootstrap(content, live)
	if templates, ok, _ := unstructured.NestedSlice(content, "spec", "volumeClaimTemplates"); ok {
		for _, t := range templates {
			if m, ok := t.(map[string]any); ok {
				delete(m, "status")
			}
		}
		if err := unstructured.SetNestedSlice(content, templates, "spec", "volumeClaimTemplates"); err != nil {
			return nil, err
		}
	}
	dropNulls(content)
	return &unstructured.Unstructured{Object: content}, nil
}

// ServerSideApply sends body as Apply does: a server-side apply under
// fieldManager that forces ownership. On success body holds the object the
// member returned.
func ServerSideApply(ctx context.Context, c client.Client, body *unstructured.Unstructured, fieldManager string) error {
	return c.Apply(ctx, client.ApplyConfigurationFromUnstructured(body), client.FieldOwner(fieldManager), client.ForceOwnership)
}

// dropNulls removes null values (e.g. creationTimestamp) from nested maps.
func dropNulls(m map[string]any) {
	for k, v := range m {
		switch v := v.(type) {
		case nil:
			delete(m, k)
		case map[string]any:
			dropNulls(v)
		case []any:
			for _, e := range v {
				if em, ok := e.(map[string]any); ok {
					dropNulls(em)
				}
			}
		}
	}
}

// claimTemplatesMatch compares what fleetdb renders in volumeClaimTemplates.
func claimTemplatesMatch(desired, live []corev1.PersistentVolumeClaim) bool {
	if len(desired) != len(live) {
		return false
	}
	for i := range desired {
		d, l := desired[i], live[i]
		if d.Name != l.Name ||
			!maps.Equal(d.Labels, l.Labels) ||
			!slices.Equal(d.Spec.AccessModes, l.Spec.AccessModes) ||
			deref(d.Spec.StorageClassName) != deref(l.Spec.StorageClassName) {
			return false
		}
		ds, ls := d.Spec.Resources.Requests[corev1.ResourceStorage], l.Spec.Resources.Requests[corev1.ResourceStorage]
		if ds.Cmp(ls) != 0 {
			return false
		}
	}
	return true
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}
