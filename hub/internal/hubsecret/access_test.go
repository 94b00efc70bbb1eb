package hubsecret

import (
	"context"
	"sync"
	"testing"

	. "github.com/onsi/gomega"
	authorizationv1 "k8s.io/api/authorization/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	fleetv1alpha1 "github.com/fleetdb/fleetdb/apis/v1alpha1"
)

// laggingAuthorizer answers the hub's access reviews as an API server's
// RBAC authorizer does: from its own watch of the RoleBindings, which learns
// of a deletion a few reviews after it happened.
type laggingAuthorizer struct {
	mu sync.Mutex
	// stale is how many more reviews still see a deleted binding.
	stale int
	lag   int
}

func (a *laggingAuthorizer) funcs() interceptor.Funcs {
	return interceptor.Funcs{
		Create: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
			review, ok := obj.(*authorizationv1.SelfSubjectAccessReview)
			if !ok {
				return c.Create(ctx, obj, opts...)
			}
			err := c.Get(ctx, client.ObjectKey{Namespace: review.Spec.ResourceAttributes.Namespace, Name: Role}, &rbacv1.RoleBinding{})
			a.mu.Lock()
			defer a.mu.Unlock()
			review.Status.Allowed = err == nil || a.stale > 0
			if a.stale > 0 {
				a.stale--
			}
			return nil
		},
		Delete: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.DeleteOption) error {
			if _, ok := obj.(*rbacv1.RoleBinding); ok {
				a.mu.Lock()
				a.stale = a.lag
				a.mu.Unlock()
			}
			return c.Delete(ctx, obj, opts...)
		},
	}
}

// Release returns only once the API server no longer grants the hub the
// namespace's Secrets: a Database created there the next moment is ensured
// on a review that tells the truth (the hub binds again), never on the
// authorizer's stale view of the binding just deleted (the hub would list
// Secrets the API server then refuses).
func TestReleaseAwaitsRevocation(t *testing.T) {
	g := NewWithT(t)
	scheme := runtime.NewScheme()
	g.Expect(clientgoscheme.AddToScheme(scheme)).To(Succeed())
	g.Expect(fleetv1alpha1.AddToScheme(scheme)).To(Succeed())
	binding := &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: Role, UID: "rb-1",
			Labels: map[string]string{fleetv1alpha1.LabelManagedBy: fleetv1alpha1.ManagedByValue}},
		RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: Role},
	}
	authz := &laggingAuthorizer{lag: 3}
	c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(binding).
		WithIndex(&rbacv1.RoleBinding{}, "metadata.name", func(o client.Object) []string { return []string{o.GetName()} }).
		WithInterceptorFuncs(authz.funcs()).Build()
	h := &Access{c: c, live: c, protected: func(string) bool { return false },
		locks: map[string]*sync.Mutex{}, caches: map[string]*namespaceSecrets{}, released: map[string]bool{}}
	ctx := context.Background()

	allowed, err := h.mayWatchSecrets(ctx, "team")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(allowed).To(BeTrue(), "bound")

	g.Expect(h.Release(ctx, "team", "")).To(Succeed())
	g.Expect(apierrors.IsNotFound(c.Get(ctx, client.ObjectKeyFromObject(binding), &rbacv1.RoleBinding{}))).To(BeTrue(), "the binding went with the last Database")
	allowed, err = h.mayWatchSecrets(ctx, "team")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(allowed).To(BeFalse(), "Release returned while the API server still granted the namespace's Secrets")
}
