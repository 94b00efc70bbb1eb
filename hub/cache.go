package hub

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// hubCacheOptions keep the manager's cache of Secrets to the hub's own
// namespace, where kubeconfig Secrets live (the hub's identity may read
// Secrets cluster-wide no more: issue 25, item 12): they are only ever
// watched as metadata (the provider wakes up on a change, then reads the one
// referenced Secret by name, uncached), and annotations are dropped before
// they are stored (a client-side apply leaves the whole Secret in one).
//
// The Secrets of a tenant namespace (a Database's credentials and topology
// PKI) are cached by the Database controller, one namespace at a time, only
// where a Database lives and the hub bound its Secret role
// (hub/internal/hubsecret/access.go): the metadata of the Secrets labelled
// fleetdb's (name and version), and the data of its Databases' Secrets, read
// by name. An unlabelled Secret in a tenant namespace is never listed,
// watched or read; a labelled one that is not a Database's brings the hub
// its name only.
func hubCacheOptions(hubNamespace string) cache.Options {
	return cache.Options{ByObject: map[client.Object]cache.ByObject{
		&corev1.Secret{}: {Namespaces: map[string]cache.Config{
			hubNamespace: {Transform: stripAnnotations},
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
