// Package crd proves that the API server itself rejects bad Database and
// MemberCluster objects with a message naming the offending field, and
// applies the documented defaults, using fleetdb's generated CRDs on a real
// kube-apiserver.
package crd

import (
	"context"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	fleetv1alpha1 "github.com/fleetdb/fleetdb/apis/v1alpha1"
	"github.com/fleetdb/fleetdb/test/fleet"
)

const validSpec = `
engine: postgres
storage: {size: 1Gi}
placement: {clusterNames: [eu-1]}
`

// database builds a Database manifest whose spec is validSpec with the given
// top-level spec fields replaced (a YAML mapping), so each case changes one thing.
func database(t *testing.T, name, specPatch string) *unstructured.Unstructured {
	t.Helper()
	spec := map[string]any{}
	mustYAML(t, validSpec, &spec)
	patch := map[string]any{}
	mustYAML(t, specPatch, &patch)
	for k, v := range patch {
		if v == nil {
			delete(spec, k)
			continue
		}
		spec[k] = v
	}
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": fleetv1alpha1.GroupVersion.String(),
		"kind":       "Database",
		"metadata":   map[string]any{"name": name, "namespace": "default"},
		"spec":       spec,
	}}
}

func memberCluster(t *testing.T, name, spec string) *unstructured.Unstructured {
	t.Helper()
	s := map[string]any{}
	mustYAML(t, spec, &s)
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": fleetv1alpha1.GroupVersion.String(),
		"kind":       "MemberCluster",
		"metadata":   map[string]any{"name": name},
		"spec":       s,
	}}
}

func mustYAML(t *testing.T, in string, out any) {
	t.Helper()
	if err := yaml.Unmarshal([]byte(in), out); err != nil {
		t.Fatalf("bad test YAML %q: %v", in, err)
	}
}

func TestValidation(t *testing.T) {
	f := fleet.Start(t, fleet.Options{Members: []string{}})
	hub := f.Hub.Client

	invalid := []struct {
		name string
		obj  *unstructured.Unstructured
		// want are substrings the API server's message must contain: the field and the reason.
		want []string
	}{
		{"engine missing", database(t, "a1", `{engine: null}`), []string{"spec.engine", "Required"}},
		{"engine not supported", database(t, "a2", `{engine: oracle}`), []string{"spec.engine", "Unsupported value"}},
		{"version not a version", database(t, "a3", `{version: latest}`), []string{"spec.version", "should match"}},
		{"version too long", database(t, "a4", `{version: "1.2.3.4"}`), []string{"spec.version"}},
		{"replicas zero", database(t, "a5", `{replicas: 0}`), []string{"spec.replicas", "greater than or equal to 1"}},
		{"replicas above nine", database(t, "a6", `{replicas: 10}`), []string{"spec.replicas", "less than or equal to 9"}},
		{"storage missing", database(t, "a7", `{storage: null}`), []string{"spec.storage", "Required"}},
		{"storage size zero", database(t, "a8", `{storage: {size: "0"}}`), []string{"spec.storage.size", "greater than 0"}},
		{"storage size negative", database(t, "a9", `{storage: {size: "-1Gi"}}`), []string{"spec.storage.size", "greater than 0"}},
		{"storage size not a quantity", database(t, "a10", `{storage: {size: "lots"}}`), []string{"spec.storage.size"}},
		{"storage class not a name", database(t, "a11", `{storage: {size: 1Gi, storageClassName: "Fast Disks"}}`), []string{"spec.storage.storageClassName"}},
		{"placement missing", database(t, "a12", `{placement: null}`), []string{"spec.placement", "Required"}},
		{"placement empty", database(t, "a13", `{placement: {}}`), []string{"spec.placement", "at least one of clusterNames or clusterSelector"}},
		{"placement only empty names", database(t, "a14", `{placement: {clusterNames: []}}`), []string{"spec.placement", "at least one of clusterNames or clusterSelector"}},
		{"placement duplicate names", database(t, "a15", `{placement: {clusterNames: [eu-1, eu-1]}}`), []string{"spec.placement.clusterNames", "Duplicate value"}},
		{"placement bad cluster name", database(t, "a16", `{placement: {clusterNames: [EU_1]}}`), []string{"spec.placement.clusterNames[0]", "should match"}},
		{"placement maxClusters zero", database(t, "a17", `{placement: {clusterNames: [eu-1], maxClusters: 0}}`), []string{"spec.placement.maxClusters"}},
		{"placement bad selector", database(t, "a18", `{placement: {clusterSelector: {matchExpressions: [{key: tier, operator: Sometimes}]}}}`), []string{"spec.placement.clusterSelector.matchExpressions", "operator must be"}},
		{"placement selector In without values", database(t, "a31", `{placement: {clusterSelector: {matchExpressions: [{key: tier, operator: In}]}}}`), []string{"spec.placement.clusterSelector.matchExpressions", "operator must be"}},
		{"override without targets", database(t, "a19", `{overrides: [{clusterNames: [], replicas: 1}]}`), []string{"spec.overrides[0].clusterNames"}},
		{"override without change", database(t, "a20", `{overrides: [{clusterNames: [eu-1]}]}`), []string{"spec.overrides[0]", "must change at least one"}},
		{"override replicas out of range", database(t, "a21", `{overrides: [{clusterNames: [eu-1], replicas: 12}]}`), []string{"spec.overrides[0].replicas"}},
		{"override duplicate target", database(t, "a22", `{overrides: [{clusterNames: [eu-1, eu-1], replicas: 2}]}`), []string{"spec.overrides[0].clusterNames", "Duplicate value"}},
		{"cluster in two overrides", database(t, "a23", `{overrides: [{clusterNames: [eu-1], replicas: 2}, {clusterNames: [eu-1], replicas: 3}]}`), []string{"spec", "only one override"}},
		{"rollout maxUnavailable zero", database(t, "a24", `{rollout: {maxUnavailable: 0}}`), []string{"spec.rollout.maxUnavailable"}},
		{"deletion policy unknown", database(t, "a25", `{deletionPolicy: Destroy}`), []string{"spec.deletionPolicy", "Unsupported value"}},
		{"teardown timeout negative", database(t, "a26", `{teardown: {unreachableTimeout: "-5m"}}`), []string{"spec.teardown.unreachableTimeout"}},
		{"teardown timeout garbage", database(t, "a27", `{teardown: {unreachableTimeout: "soon"}}`), []string{"spec.teardown.unreachableTimeout"}},
		{"name not a DNS-1035 label", database(t, "1orders", `{}`), []string{"metadata.name", "DNS-1035"}},
		{"name too long for member objects", database(t, "orders-"+strings.Repeat("x", 40), `{}`), []string{"metadata.name", "at most 40"}},
		{"resources not quantities", database(t, "a30", `{resources: {requests: {cpu: "fast"}}}`), []string{"spec.resources.requests.cpu"}},
		{"StatefulSet backend with replicas", database(t, "k1", `{backend: StatefulSet, replicas: 3}`), []string{"StatefulSet backend", "replicas", "CloudNativePG"}},
		{"StatefulSet backend with override replicas", database(t, "k2", `{backend: StatefulSet, overrides: [{clusterNames: [eu-1], replicas: 2}]}`), []string{"StatefulSet backend", "CloudNativePG"}},
		{"mysql with replicas", database(t, "k3", `{engine: mysql, replicas: 2}`), []string{"StatefulSet backend", "mysql", "CloudNativePG"}},
		{"mysql on CloudNativePG", database(t, "k4", `{engine: mysql, backend: CloudNativePG}`), []string{"spec.backend", "mysql"}},
		{"backend unknown", database(t, "k5", `{backend: Operator}`), []string{"spec.backend", "Unsupported value"}},
		// Issue 10 item 11: resources are bounded, non-negative, limits >= requests.
		{"request negative", database(t, "b1", `{resources: {requests: {cpu: "-1"}}}`), []string{"spec.resources.requests.cpu", "cpu must not be negative"}},
		{"limit negative", database(t, "b2", `{resources: {limits: {memory: "-1Gi"}}}`), []string{"spec.resources.limits.memory", "memory must not be negative"}},
		{"limit below request", database(t, "b3", `{resources: {requests: {memory: 2Gi}, limits: {memory: 1Gi}}}`), []string{"spec.resources.limits", "greater than or equal to requests"}},
		{"cpu limit below request", database(t, "b4", `{resources: {requests: {cpu: "2"}, limits: {cpu: 1500m}}}`), []string{"spec.resources.limits", "greater than or equal to requests"}},
		{"cpu request unbounded", database(t, "b5", `{resources: {requests: {cpu: "100k"}}}`), []string{"spec.resources.requests.cpu", "cpu must be at most 256"}},
		{"memory limit unbounded", database(t, "b6", `{resources: {limits: {memory: 5Ti}}}`), []string{"spec.resources.limits.memory", "memory must be at most 4Ti"}},
		{"override limit below request", database(t, "b8", `{overrides: [{clusterNames: [eu-1], resources: {requests: {cpu: "2"}, limits: {cpu: "1"}}}]}`), []string{"spec.overrides[0].resources.limits", "greater than or equal to requests"}},
		{"override request negative", database(t, "b9", `{overrides: [{clusterNames: [eu-1], resources: {requests: {memory: "-5Mi"}}}]}`), []string{"spec.overrides[0].resources.requests.memory", "memory must not be negative"}},
		{"ephemeral storage request negative", database(t, "b12", `{resources: {requests: {ephemeral-storage: "-1"}}}`), []string{"spec.resources.requests.ephemeral-storage", "must not be negative"}},
		{"ephemeral storage limit below request", database(t, "b13", `{resources: {requests: {ephemeral-storage: 2Gi}, limits: {ephemeral-storage: 1Gi}}}`), []string{"spec.resources.limits", "greater than or equal to requests"}},
		{"quantity too long", database(t, "b14", `{resources: {requests: {memory: "1000000000000000000000000000000000000m"}}}`), []string{"spec.resources.requests.memory"}},
		{"storage size unbounded", database(t, "b10", `{storage: {size: 65Ti}}`), []string{"spec.storage.size", "at most 64Ti"}},
		{"deletion protection not a bool", database(t, "b11", `{deletionProtection: "yes"}`), []string{"spec.deletionProtection", "boolean"}},
		{"member without secret ref", memberCluster(t, "m1", `{}`), []string{"spec.kubeconfigSecretRef", "Required"}},
		{"member secret ref without name", memberCluster(t, "m2", `{kubeconfigSecretRef: {key: kubeconfig}}`), []string{"spec.kubeconfigSecretRef.name", "Required"}},
		// Issue 10 item 6: the kubeconfig Secret is always in the hub's namespace.
		{"member secret ref in another namespace", memberCluster(t, "m3", `{kubeconfigSecretRef: {namespace: team-a, name: m3}}`), []string{"spec.kubeconfigSecretRef.namespace", "must be omitted"}},
		{"member secret ref empty key", memberCluster(t, "m4", `{kubeconfigSecretRef: {name: b, key: ""}}`), []string{"spec.kubeconfigSecretRef.key"}},
		{"member name not a DNS label", memberCluster(t, "eu.1", `{kubeconfigSecretRef: {name: b}}`), []string{"metadata.name", "DNS label"}},
		// Issue 10 item 7: the opt-ins are booleans, named in the message.
		{"member insecure opt-in not a bool", memberCluster(t, "m5", `{kubeconfigSecretRef: {name: b}, connection: {allowInsecureSkipTLSVerify: "sure"}}`), []string{"spec.connection.allowInsecureSkipTLSVerify", "boolean"}},
		{"member proxy opt-in not a bool", memberCluster(t, "m6", `{kubeconfigSecretRef: {name: b}, connection: {allowProxyURL: 1}}`), []string{"spec.connection.allowProxyURL", "boolean"}},
		{"member http opt-in not a bool", memberCluster(t, "m7", `{kubeconfigSecretRef: {name: b}, connection: {allowHTTP: "no"}}`), []string{"spec.connection.allowHTTP", "boolean"}},
	}
	for _, tc := range invalid {
		t.Run("rejects "+tc.name, func(t *testing.T) {
			g := NewWithT(t)
			err := hub.Create(ctx(t), tc.obj)
			g.Expect(err).To(HaveOccurred(), "the API server accepted an invalid object")
			g.Expect(apierrors.IsInvalid(err)).To(BeTrue(), "want an Invalid error, got %v", err)
			for _, w := range tc.want {
				g.Expect(err.Error()).To(ContainSubstring(w))
			}
		})
	}

	t.Run("engine is immutable", func(t *testing.T) {
		g := NewWithT(t)
		db := database(t, "immutable", `{}`)
		g.Expect(hub.Create(ctx(t), db)).To(Succeed())
		g.Expect(unstructured.SetNestedField(db.Object, "mysql", "spec", "engine")).To(Succeed())
		err := hub.Update(ctx(t), db)
		g.Expect(apierrors.IsInvalid(err)).To(BeTrue(), "want Invalid, got %v", err)
		g.Expect(err.Error()).To(And(ContainSubstring("spec.engine"), ContainSubstring("immutable")))
	})

	t.Run("backend is immutable once set", func(t *testing.T) {
		g := NewWithT(t)
		db := database(t, "settled", `{backend: CloudNativePG, replicas: 3}`)
		g.Expect(hub.Create(ctx(t), db)).To(Succeed())
		g.Expect(unstructured.SetNestedField(db.Object, "StatefulSet", "spec", "backend")).To(Succeed())
		g.Expect(unstructured.SetNestedField(db.Object, int64(1), "spec", "replicas")).To(Succeed())
		err := hub.Update(ctx(t), db)
		g.Expect(apierrors.IsInvalid(err)).To(BeTrue(), "want Invalid, got %v", err)
		g.Expect(err.Error()).To(And(ContainSubstring("spec.backend"), ContainSubstring("immutable")))
		unstructured.RemoveNestedField(db.Object, "spec", "backend")
		err = hub.Update(ctx(t), db)
		g.Expect(apierrors.IsInvalid(err)).To(BeTrue(), "removing it is a change too; got %v", err)
	})

	t.Run("postgres without a backend may run replicas (CloudNativePG by default)", func(t *testing.T) {
		g := NewWithT(t)
		g.Expect(hub.Create(ctx(t), database(t, "replicated", `{replicas: 3}`))).To(Succeed())
		var db fleetv1alpha1.Database
		g.Expect(hub.Get(ctx(t), client.ObjectKey{Namespace: "default", Name: "replicated"}, &db)).To(Succeed())
		g.Expect(db.Spec.Backend).To(BeEmpty(), "no CRD default: the hub records the backend at the first placement")
		g.Expect(db.EffectiveBackend()).To(Equal(fleetv1alpha1.BackendCloudNativePG))
	})

	t.Run("accepts a minimal Database and applies defaults", func(t *testing.T) {
		g := NewWithT(t)
		g.Expect(hub.Create(ctx(t), database(t, "minimal", `{}`))).To(Succeed())
		var db fleetv1alpha1.Database
		g.Expect(hub.Get(ctx(t), client.ObjectKey{Namespace: "default", Name: "minimal"}, &db)).To(Succeed())
		g.Expect(db.Spec.Replicas).To(BeEquivalentTo(1))
		g.Expect(db.Spec.DeletionPolicy).To(Equal(fleetv1alpha1.DeletionPolicyDelete))
		g.Expect(db.Spec.Rollout.MaxUnavailable).To(BeEquivalentTo(1))
		g.Expect(db.EffectiveUnreachableTimeout()).To(Equal(10 * time.Minute))
		g.Expect(db.Spec.Teardown.UnreachableTimeout).NotTo(BeNil(), "the CRD defaults it")
		g.Expect(db.EffectiveVersion()).To(Equal(fleetv1alpha1.DefaultPostgresVersion))
	})

	t.Run("accepts a full Database", func(t *testing.T) {
		g := NewWithT(t)
		full := database(t, "orders", `
engine: postgres
backend: CloudNativePG
version: "16.4"
replicas: 3
storage: {size: 10Gi, storageClassName: fast}
resources: {requests: {cpu: 500m, memory: 1Gi}, limits: {memory: 2Gi}}
placement:
  clusterNames: [eu-1, us-1]
  clusterSelector: {matchLabels: {tier: prod}}
  maxClusters: 3
overrides:
- {clusterNames: [us-1], replicas: 1}
- {clusterNames: [eu-1], storageClassName: standard}
rollout: {maxUnavailable: 2}
deletionPolicy: Retain
teardown: {unreachableTimeout: 90s}
`)
		g.Expect(hub.Create(ctx(t), full)).To(Succeed())
		var db fleetv1alpha1.Database
		g.Expect(hub.Get(ctx(t), client.ObjectKey{Namespace: "default", Name: "orders"}, &db)).To(Succeed())
		g.Expect(db.Spec.Replicas).To(BeEquivalentTo(3))
		g.Expect(db.Spec.Overrides).To(HaveLen(2))
		g.Expect(db.EffectiveUnreachableTimeout()).To(Equal(90 * time.Second))
		g.Expect(db.EffectiveVersion()).To(Equal("16.4"))
	})

	t.Run("accepts a MemberCluster and defaults the key", func(t *testing.T) {
		g := NewWithT(t)
		g.Expect(hub.Create(ctx(t), memberCluster(t, "eu-1", `{kubeconfigSecretRef: {name: eu-1-kubeconfig}, connection: {allowHTTP: true}}`))).To(Succeed())
		var mc fleetv1alpha1.MemberCluster
		g.Expect(hub.Get(ctx(t), client.ObjectKey{Name: "eu-1"}, &mc)).To(Succeed())
		g.Expect(mc.Spec.KubeconfigSecretRef.Key).To(Equal("kubeconfig"))
		g.Expect(mc.Spec.Connection.AllowHTTP).To(BeTrue())
	})

	t.Run("bounds a MemberCluster's status.kubernetesVersion", func(t *testing.T) {
		// A member is not trusted: what its /version says is stored cut
		// (clusters.memberVersion), and the API server holds the bound too.
		g := NewWithT(t)
		g.Expect(hub.Create(ctx(t), memberCluster(t, "eu-2", `{kubeconfigSecretRef: {name: eu-2-kubeconfig}}`))).To(Succeed())
		var mc fleetv1alpha1.MemberCluster
		g.Expect(hub.Get(ctx(t), client.ObjectKey{Name: "eu-2"}, &mc)).To(Succeed())
		mc.Status.KubernetesVersion = strings.Repeat("v", fleetv1alpha1.MaxKubernetesVersionLength+1)
		err := hub.Status().Update(ctx(t), &mc)
		g.Expect(apierrors.IsInvalid(err)).To(BeTrue(), "want Invalid, got %v", err)
		g.Expect(err.Error()).To(ContainSubstring("status.kubernetesVersion"))
		mc.Status.KubernetesVersion = strings.Repeat("v", fleetv1alpha1.MaxKubernetesVersionLength)
		g.Expect(hub.Status().Update(ctx(t), &mc)).To(Succeed())
	})

	t.Run("accepts resources at their bounds and limits equal to requests", func(t *testing.T) {
		g := NewWithT(t)
		g.Expect(hub.Create(ctx(t), database(t, "bounds", `
resources: {requests: {cpu: 256, memory: 4Ti, ephemeral-storage: 1Gi}, limits: {cpu: "256", memory: 4Ti, ephemeral-storage: 10Gi}}
storage: {size: 64Ti}
deletionProtection: true
`))).To(Succeed())
		var db fleetv1alpha1.Database
		g.Expect(hub.Get(ctx(t), client.ObjectKey{Namespace: "default", Name: "bounds"}, &db)).To(Succeed())
		g.Expect(db.Spec.DeletionProtection).To(BeTrue())
	})
}

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return c
}
