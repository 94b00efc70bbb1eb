package hub

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleetv1alpha1 "github.com/fleetdb/fleetdb/apis/v1alpha1"
)

// hubCacheOptions keep the hub's cache of Secrets to the ones it has business
// with (there is no cluster-wide Secret cache, with data or without):
//
//   - in its own namespace, where kubeconfig Secrets live, Secrets are only
//     ever watched as metadata (the provider wakes up on a change, then reads
//     the one referenced Secret by name, uncached), and annotations are
//     dropped before they are stored (a client-side apply leaves the whole
//     Secret in one);
//   - everywhere else, only the Secrets fleetdb owns (its managed-by label:
//     the credentials Secrets of Databases) are listed and watched.
//
// A Secret in a tenant namespace that fleetdb does not own is never listed,
// watched or read.
func hubCacheOptions(hubNamespace string) cache.Options {
	owned := labels.SelectorFromSet(labels.Set{fleetv1alpha1.LabelManagedBy: fleetv1alpha1.ManagedByValue})
	return cache.Options{ByObject: map[client.Object]cache.ByObject{
		&corev1.Secret{}: {Namespaces: map[string]cache.Config{
			hubNamespace:        {Transform: stripAnnotations},
			cache.AllNamespaces: {LabelSelector: owned},
		}},
	}}
}

// stripAnnotations drops an object's annotations and managed fields before it
// is cached.
func stripAnnotations(in any) (any, error) {
	if obj, err := meta.Accessor(in); err == nil {
		obj.SetAnnotations(nil)
		obj.SetManagedFields(nil)
	}
	return in, nil
}
