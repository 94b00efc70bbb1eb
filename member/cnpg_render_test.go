package member_test

import (
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	fleetv1alpha1 "github.com/fleetdb/fleetdb/apis/v1alpha1"
	"github.com/fleetdb/fleetdb/member"
)

func cnpgTestDatabase(mutate ...func(*fleetv1alpha1.Database)) *fleetv1alpha1.Database {
	return testDatabase(fleetv1alpha1.EnginePostgres, append([]func(*fleetv1alpha1.Database){func(db *fleetv1alpha1.Database) {
		db.Spec.Backend = fleetv1alpha1.BackendCloudNativePG
	}}, mutate...)...)
}

func (r rendered) cluster() *unstructured.Unstructured {
	return r.objs["Cluster/orders"].(*unstructured.Unstructured)
}

func TestRenderCNPGObjects(t *testing.T) {
	g := NewWithT(t)
	r := render(t, member.Params{Database: cnpgTestDatabase(), Cluster: "eu-1", Credentials: testCredentials(), Traceparent: testTraceparent})
	g.Expect(r.order).To(Equal([]string{"Namespace/team-a", "Secret/orders-credentials", "Service/orders", "Cluster/orders"}))

	s := r.objs["Secret/orders-credentials"].(*corev1.Secret)
	g.Expect(s.Type).To(Equal(corev1.SecretTypeBasicAuth))
	g.Expect(s.Data).To(Equal(testCredentials()))
	g.Expect(s.Labels).To(HaveKeyWithValue("cnpg.io/reload", "true"), "CloudNativePG reconciles the Cluster when the Secret changes")

	svc := r.objs["Service/orders"].(*corev1.Service)
	g.Expect(svc.Spec.Selector).To(Equal(map[string]string{"cnpg.io/cluster": "orders", "cnpg.io/instanceRole": "primary"}))
	g.Expect(svc.Spec.Ports).To(HaveLen(1))
	g.Expect(svc.Spec.Ports[0].Port).To(BeEquivalentTo(5432))

	c := r.cluster()
	g.Expect(c.GetAPIVersion()).To(Equal("postgresql.cnpg.io/v1"))
	g.Expect(c.GetLabels()).To(Equal(map[string]string{
		fleetv1alpha1.LabelManagedBy: fleetv1alpha1.ManagedByValue, fleetv1alpha1.LabelDatabaseNamespace: "team-a",
		fleetv1alpha1.LabelDatabaseName: "orders", fleetv1alpha1.LabelDatabaseUID: "0b7c2f3e-1d2a-4c5b-9e8f-112233445566",
		fleetv1alpha1.LabelName: "postgres", fleetv1alpha1.LabelInstance: "orders",
	}))
	g.Expect(c.GetAnnotations()).To(Equal(map[string]string{
		fleetv1alpha1.AnnotationTraceparent: testTraceparent, fleetv1alpha1.AnnotationGeneration: "4",
		fleetv1alpha1.AnnotationDeletionPolicy: "Delete",
	}))
	g.Expect(c.Object["spec"]).To(Equal(map[string]any{
		"instances": int64(3),
		"imageName": "ghcr.io/cloudnative-pg/postgresql:17.10-system-trixie",
		"storage":   map[string]any{"size": "10Gi", "storageClass": "fast"},
		"bootstrap": map[string]any{"initdb": map[string]any{
			"database": "app", "owner": "app", "secret": map[string]any{"name": "orders-credentials"},
		}},
	}), "only the fields fleetdb sets")
	g.Expect(c.Object).NotTo(HaveKey("status"))
}

func TestRenderCNPGOverridesVersionAndResources(t *testing.T) {
	g := NewWithT(t)
	db := cnpgTestDatabase(func(db *fleetv1alpha1.Database) {
		db.Spec.Version = "16.4"
		db.Spec.Resources = &fleetv1alpha1.ResourceSpec{
			Requests: &fleetv1alpha1.ComputeResources{CPU: ptr(resource.MustParse("250m"))},
			Limits:   &fleetv1alpha1.ComputeResources{Memory: ptr(resource.MustParse("1Gi"))},
		}
		db.Spec.Overrides = []fleetv1alpha1.OverrideSpec{{ClusterNames: []string{"us-1"}, Replicas: ptr(int32(1)), StorageClassName: ptr("slow")}}
	})
	eu := render(t, member.Params{Database: db, Cluster: "eu-1", Credentials: testCredentials(), ImageRepository: "registry.local/cnpg/"}).cluster()
	us := render(t, member.Params{Database: db, Cluster: "us-1", Credentials: testCredentials()}).cluster()

	instances := func(u *unstructured.Unstructured) int64 {
		n, _, _ := unstructured.NestedInt64(u.Object, "spec", "instances")
		return n
	}
	g.Expect(instances(eu)).To(BeEquivalentTo(3))
	g.Expect(instances(us)).To(BeEquivalentTo(1), "the override scales that member alone")
	sc, _, _ := unstructured.NestedString(us.Object, "spec", "storage", "storageClass")
	g.Expect(sc).To(Equal("slow"))
	image, _, _ := unstructured.NestedString(eu.Object, "spec", "imageName")
	g.Expect(image).To(Equal("registry.local/cnpg/postgresql:16.4-system-trixie"), "the full version, from the repository override")
	image, _, _ = unstructured.NestedString(us.Object, "spec", "imageName")
	g.Expect(image).To(Equal("ghcr.io/cloudnative-pg/postgresql:16.4-system-trixie"))
	res, _, _ := unstructured.NestedMap(eu.Object, "spec", "resources")
	g.Expect(res).To(Equal(map[string]any{
		"requests": map[string]any{"cpu": "250m"},
		"limits":   map[string]any{"memory": "1Gi"},
	}))
}

// TestRenderBackendChoice: the backend comes from spec.backend, the hub's
// record, or the engine; a Database placed before backends existed (the
// finalizer without the record) keeps its StatefulSet.
func TestRenderBackendChoice(t *testing.T) {
	tests := []struct {
		name   string
		mutate func(*fleetv1alpha1.Database)
		want   string
	}{
		{"postgres defaults to CloudNativePG", func(*fleetv1alpha1.Database) {}, "Cluster/orders"},
		{"mysql runs on StatefulSet", func(db *fleetv1alpha1.Database) { db.Spec.Engine = fleetv1alpha1.EngineMySQL }, "StatefulSet/orders"},
		{"asked for StatefulSet", func(db *fleetv1alpha1.Database) { db.Spec.Backend = fleetv1alpha1.BackendStatefulSet }, "StatefulSet/orders"},
		{"placed before backends existed", func(db *fleetv1alpha1.Database) {
			db.Finalizers = []string{fleetv1alpha1.TeardownFinalizer}
		}, "StatefulSet/orders"},
		{"recorded at the first placement", func(db *fleetv1alpha1.Database) {
			db.Finalizers = []string{fleetv1alpha1.TeardownFinalizer}
			db.Annotations = map[string]string{fleetv1alpha1.AnnotationBackend: "CloudNativePG"}
		}, "Cluster/orders"},
		{"the record removed by hand: what the members report", func(db *fleetv1alpha1.Database) {
			db.Finalizers = []string{fleetv1alpha1.TeardownFinalizer}
			db.Status.Clusters = []fleetv1alpha1.ClusterStatus{{Name: "eu-1", Backend: fleetv1alpha1.BackendCloudNativePG}}
		}, "Cluster/orders"},
		{"the record wins over a later spec.backend", func(db *fleetv1alpha1.Database) {
			db.Spec.Backend = fleetv1alpha1.BackendCloudNativePG
			db.Annotations = map[string]string{fleetv1alpha1.AnnotationBackend: "StatefulSet"}
		}, "StatefulSet/orders"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			db := testDatabase(fleetv1alpha1.EnginePostgres, func(db *fleetv1alpha1.Database) { db.Spec.Backend = "" }, tt.mutate)
			r := render(t, member.Params{Database: db, Cluster: "eu-1", Credentials: testCredentials()})
			NewWithT(t).Expect(r.objs).To(HaveKey(tt.want))
		})
	}
}

// TestRenderCNPGImmutableImageTags: a major version alone gets the minor
// release CloudNativePG v1.30.0 tests with, in the variant of its default
// image; never the rolling "<major>" tag. A major fleetdb pins no minor for
// is refused until spec.version names the minor.
func TestRenderCNPGImmutableImageTags(t *testing.T) {
	for version, want := range map[string]string{
		"18":    "ghcr.io/cloudnative-pg/postgresql:18.4-system-trixie",
		"17":    "ghcr.io/cloudnative-pg/postgresql:17.10-system-trixie",
		"16":    "ghcr.io/cloudnative-pg/postgresql:16.14-system-trixie",
		"15":    "ghcr.io/cloudnative-pg/postgresql:15.18-system-trixie",
		"14":    "ghcr.io/cloudnative-pg/postgresql:14.23-system-trixie",
		"17.6":  "ghcr.io/cloudnative-pg/postgresql:17.6-system-trixie",
		"13.22": "ghcr.io/cloudnative-pg/postgresql:13.22-system-trixie",
	} {
		t.Run(version, func(t *testing.T) {
			db := cnpgTestDatabase(func(db *fleetv1alpha1.Database) { db.Spec.Version = version })
			image, _, _ := unstructured.NestedString(render(t, member.Params{Database: db, Cluster: "eu-1", Credentials: testCredentials()}).cluster().Object, "spec", "imageName")
			NewWithT(t).Expect(image).To(Equal(want))
		})
	}
	t.Run("a major without a pinned minor", func(t *testing.T) {
		db := cnpgTestDatabase(func(db *fleetv1alpha1.Database) { db.Spec.Version = "13" })
		_, err := member.Render(member.Params{Database: db, Cluster: "eu-1", Credentials: testCredentials()})
		NewWithT(t).Expect(err).To(MatchError(ContainSubstring("set spec.version to a major.minor release")))
	})
}

// A member in node maintenance renders the Cluster with a maintenance window
// that reuses the volumes (CloudNativePG then drops its disruption budgets);
// otherwise there is none.
func TestRenderCNPGNodeMaintenance(t *testing.T) {
	g := NewWithT(t)
	for _, on := range []bool{false, true} {
		c := render(t, member.Params{Database: cnpgTestDatabase(), Cluster: "eu-1", Credentials: testCredentials(), NodeMaintenance: on}).cluster()
		w, found, err := unstructured.NestedMap(c.Object, "spec", "nodeMaintenanceWindow")
		g.Expect(err).NotTo(HaveOccurred())
		if !on {
			g.Expect(found).To(BeFalse())
			continue
		}
		g.Expect(w).To(Equal(map[string]any{"inProgress": true, "reusePVC": true}))
	}
}
