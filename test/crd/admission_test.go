package crd

import (
	"context"
	"slices"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleetv1alpha1 "github.com/fleetdb/fleetdb/apis/v1alpha1"
	"github.com/fleetdb/fleetdb/test/fleet"
)

// teardownPolicy is the MutatingAdmissionPolicy that puts the teardown
// finalizer and the backend decision on a new Database.
const teardownPolicy = "deploy/hub/teardown_finalizer.yaml"

// TestTeardownFinalizerAtAdmission: with deploy/hub/teardown_finalizer.yaml
// installed, the API server stores every new Database with the teardown
// finalizer (once, beside any finalizer of the user's) and the
// fleetdb.io/backend annotation the hub would record (Database.DesiredBackend,
// the Go function, is the reference: the policy's CEL must agree with it for
// every engine and backend), keeps an annotation the creator set, and never
// touches a Database that exists (a finalizer removed on update stays removed).
// Without the policy the API server adds nothing (the hub does it then).
func TestTeardownFinalizerAtAdmission(t *testing.T) {
	f := fleet.Start(t, fleet.Options{Members: []string{}})
	hub := f.Hub.Client
	g := NewWithT(t)
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()

	before := database(t, "no-policy", `{}`)
	g.Expect(hub.Create(ctx, before)).To(Succeed())
	g.Expect(before.GetFinalizers()).To(BeEmpty(), "without the policy the API server adds no finalizer")
	g.Expect(before.GetAnnotations()).NotTo(HaveKey(fleetv1alpha1.AnnotationBackend))

	g.Expect(fleet.ApplyManifests(ctx, hub, teardownPolicy)).To(Succeed())
	// The API server loads admission policies through an informer: wait until
	// a dry-run create shows the policy at work.
	g.Eventually(func(g Gomega) {
		probe := database(t, "probe", `{}`)
		g.Expect(hub.Create(ctx, probe, client.DryRunAll)).To(Succeed())
		g.Expect(probe.GetFinalizers()).To(ContainElement(fleetv1alpha1.TeardownFinalizer))
	}).WithContext(ctx).WithTimeout(30 * time.Second).WithPolling(200 * time.Millisecond).Should(Succeed())

	cases := []struct {
		name, spec  string
		annotations map[string]string
		finalizers  []string
		// wantBackend is the annotation's value when the creator set one.
		wantBackend string
	}{
		{name: "postgres-default", spec: `{}`},
		{name: "postgres-statefulset", spec: `{backend: StatefulSet}`},
		{name: "postgres-cnpg", spec: `{backend: CloudNativePG}`},
		{name: "mysql-default", spec: `{engine: mysql}`},
		{name: "mysql-statefulset", spec: `{engine: mysql, backend: StatefulSet}`},
		{name: "other-annotations", spec: `{}`, annotations: map[string]string{"team": "orders"}},
		{name: "annotated-by-creator", spec: `{}`, annotations: map[string]string{fleetv1alpha1.AnnotationBackend: "StatefulSet"},
			wantBackend: "StatefulSet"},
		{name: "empty-annotation", spec: `{engine: mysql}`, annotations: map[string]string{fleetv1alpha1.AnnotationBackend: ""}},
		{name: "users-finalizer", spec: `{}`, finalizers: []string{"example.com/keep"}},
		{name: "finalizer-already", spec: `{}`, finalizers: []string{fleetv1alpha1.TeardownFinalizer}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			g := NewWithT(t)
			obj := database(t, c.name, c.spec)
			obj.SetAnnotations(c.annotations)
			obj.SetFinalizers(c.finalizers)
			g.Expect(hub.Create(ctx, obj)).To(Succeed())

			stored := &fleetv1alpha1.Database{}
			g.Expect(hub.Get(ctx, client.ObjectKeyFromObject(obj), stored)).To(Succeed())
			g.Expect(stored.Finalizers).To(ContainElement(fleetv1alpha1.TeardownFinalizer))
			g.Expect(countOf(stored.Finalizers, fleetv1alpha1.TeardownFinalizer)).To(Equal(1), "the finalizer once: %v", stored.Finalizers)
			for _, fin := range c.finalizers {
				g.Expect(stored.Finalizers).To(ContainElement(fin), "the creator's finalizers stay")
			}
			for k, v := range c.annotations {
				if k != fleetv1alpha1.AnnotationBackend {
					g.Expect(stored.Annotations).To(HaveKeyWithValue(k, v), "the creator's annotations stay")
				}
			}
			want := c.wantBackend
			if want == "" {
				// The Go decision on what was created, before the policy touched it.
				var created fleetv1alpha1.Database
				g.Expect(runtime.DefaultUnstructuredConverter.FromUnstructured(database(t, c.name, c.spec).Object, &created)).To(Succeed())
				want = string(created.DesiredBackend())
			}
			g.Expect(stored.Annotations).To(HaveKeyWithValue(fleetv1alpha1.AnnotationBackend, want))
			// The stored Database tells its backend: the hub needs neither a
			// patch nor a look at the members.
			b, ok := stored.KnownBackend()
			g.Expect(ok).To(BeTrue())
			g.Expect(string(b)).To(Equal(want))
		})
	}

	t.Run("updates are not touched", func(t *testing.T) {
		g := NewWithT(t)
		obj := &unstructured.Unstructured{}
		obj.SetGroupVersionKind(fleetv1alpha1.GroupVersion.WithKind("Database"))
		g.Expect(hub.Get(ctx, client.ObjectKey{Namespace: "default", Name: "users-finalizer"}, obj)).To(Succeed())
		obj.SetFinalizers([]string{"example.com/keep"})
		g.Expect(hub.Update(ctx, obj)).To(Succeed())
		g.Expect(obj.GetFinalizers()).To(Equal([]string{"example.com/keep"}), "an update is stored as sent")

		g.Expect(hub.Get(ctx, client.ObjectKeyFromObject(before), before)).To(Succeed())
		g.Expect(before.GetFinalizers()).To(BeEmpty(), "a Database created before the policy is not changed by it")
	})
}

func countOf(list []string, s string) int {
	return len(slices.DeleteFunc(slices.Clone(list), func(x string) bool { return x != s }))
}
