package member

import (
	"context"
	"fmt"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// managedKind is a kind of member object fleetdb finds by label.
type managedKind struct {
	gvk     schema.GroupVersionKind
	newList func() client.ObjectList
}

// workloadKinds are the kinds Render produces in the Database's namespace, in
// the order they are removed: the workload first, then what it used.
var workloadKinds = []managedKind{
	{appsv1.SchemeGroupVersion.WithKind("StatefulSet"), func() client.ObjectList { return &appsv1.StatefulSetList{} }},
	{policyv1.SchemeGroupVersion.WithKind("PodDisruptionBudget"), func() client.ObjectList { return &policyv1.PodDisruptionBudgetList{} }},
	{corev1.SchemeGroupVersion.WithKind("Service"), func() client.ObjectList { return &corev1.ServiceList{} }},
	{corev1.SchemeGroupVersion.WithKind("ConfigMap"), func() client.ObjectList { return &corev1.ConfigMapList{} }},
	{corev1.SchemeGroupVersion.WithKind("Secret"), func() client.ObjectList { return &corev1.SecretList{} }},
}

// secretKind is the Secret entry of workloadKinds.
var secretKind = workloadKinds[len(workloadKinds)-1]

// pvcKind is the kind the StatefulSet controller creates from the
// volumeClaimTemplates, labelled like the rest.
var pvcKind = managedKind{
	corev1.SchemeGroupVersion.WithKind("PersistentVolumeClaim"),
	func() client.ObjectList { return &corev1.PersistentVolumeClaimList{} },
}

// listManaged lists the objects of kind k labelled for the Database o
// names that are o's (see Owner).
func listManaged(ctx context.Context, c client.Reader, k managedKind, o Owner) ([]client.Object, error) {
	list := k.newList()
	if err := c.List(ctx, list, client.InNamespace(o.Namespace), client.MatchingLabelsSelector{Selector: SelectorFor(o.Namespace, o.Name)}); err != nil {
		return nil, fmt.Errorf("listing %ss: %w", k.gvk.Kind, err)
	}
	items, err := meta.ExtractList(list)
	if err != nil {
		return nil, fmt.Errorf("listing %ss: %w", k.gvk.Kind, err)
	}
	objs := make([]client.Object, 0, len(items))
	for _, item := range items {
		if obj, ok := item.(client.Object); ok && o.owns(obj) {
			objs = append(objs, obj)
		}
	}
	return objs, nil
}

// describe names an object of kind k as ref does.
func (k managedKind) describe(obj client.Object) string {
	return k.gvk.Kind + "/" + obj.GetNamespace() + "/" + obj.GetName()
}
