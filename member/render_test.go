package member_test

import (
	"strings"
	"testing"

	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleetv1alpha1 "github.com/fleetdb/fleetdb/apis/v1alpha1"
	"github.com/fleetdb/fleetdb/member"
)

const testTraceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"

func testDatabase(engine fleetv1alpha1.Engine, mutate ...func(*fleetv1alpha1.Database)) *fleetv1alpha1.Database {
	db := &fleetv1alpha1.Database{
		ObjectMeta: metav1.ObjectMeta{
			Name: "orders", Namespace: "team-a", UID: types.UID("0b7c2f3e-1d2a-4c5b-9e8f-112233445566"), Generation: 4,
		},
		Spec: fleetv1alpha1.DatabaseSpec{
			Engine:   engine,
			Backend:  fleetv1alpha1.BackendStatefulSet,
			Replicas: 3,
			Storage:  fleetv1alpha1.StorageSpec{Size: resource.MustParse("10Gi"), StorageClassName: "fast"},
			Placement: fleetv1alpha1.PlacementSpec{
				ClusterNames: []string{"eu-1", "us-1"},
			},
		},
	}
	for _, m := range mutate {
		m(db)
	}
	return db
}

func testCredentials() map[string][]byte {
	return map[string][]byte{member.CredentialsUsernameKey: []byte("app"), member.CredentialsPasswordKey: []byte("s3cr3t-value")}
}

// rendered indexes Render's output by "Kind/name".
type rendered struct {
	order []string
	objs  map[string]client.Object
}

func render(t *testing.T, p member.Params) rendered {
	t.Helper()
	objs, err := member.Render(p)
	if err != nil {
		t.Fatalf("Render: %v", err)
	}
	r := rendered{objs: map[string]client.Object{}}
	for _, o := range objs {
		gvk := o.GetObjectKind().GroupVersionKind()
		if gvk.Kind == "" || gvk.Version == "" {
			t.Fatalf("%T %s has no TypeMeta", o, o.GetName())
		}
		k := gvk.Kind + "/" + o.GetName()
		r.order = append(r.order, k)
		r.objs[k] = o
	}
	return r
}

func (r rendered) sts() *appsv1.StatefulSet {
	return r.objs["StatefulSet/orders"].(*appsv1.StatefulSet)
}

// TestRenderPostgresAppUserIsNoSuperuser (issue 42, item 5): the postgres
// image makes POSTGRES_USER the superuser; the StatefulSet backend gives it
// the name postgres and a password drawn at start and kept nowhere, never the
// application credentials, and hands those to the initialisation script that
// creates the application user as no superuser (test/engines
// TestPostgresAppUserIsNoSuperuser runs that script against PostgreSQL).
func TestRenderPostgresAppUserIsNoSuperuser(t *testing.T) {
	g := NewWithT(t)
	r := render(t, member.Params{Database: testDatabase(fleetv1alpha1.EnginePostgres), Cluster: "eu-1", Credentials: testCredentials()})
	ctr := r.sts().Spec.Template.Spec.Containers[0]
	env := map[string]corev1.EnvVar{}
	for _, e := range ctr.Env {
		env[e.Name] = e
	}
	g.Expect(env).To(HaveKeyWithValue("POSTGRES_USER", corev1.EnvVar{Name: "POSTGRES_USER", Value: "postgres"}), "the superuser is postgres, not the application user")
	g.Expect(env).NotTo(HaveKey("POSTGRES_PASSWORD"), "the superuser's password is no credential of the Secret")
	g.Expect(env).NotTo(HaveKey("POSTGRES_PASSWORD_FILE"))
	g.Expect(env["FLEETDB_APP_USER"].ValueFrom.SecretKeyRef.Key).To(Equal(member.CredentialsUsernameKey))
	g.Expect(env["FLEETDB_APP_PASSWORD"].ValueFrom.SecretKeyRef.Key).To(Equal(member.CredentialsPasswordKey))
	g.Expect(strings.Join(ctr.Command, " ")).To(And(ContainSubstring("/dev/urandom"), ContainSubstring("exec docker-entrypoint.sh")))
	cm := r.objs["ConfigMap/orders-config"].(*corev1.ConfigMap)
	g.Expect(cm.Data).To(HaveKeyWithValue("fleetdb-app-user.sh", member.PostgresAppUserScript()))
	g.Expect(member.PostgresAppUserScript()).To(ContainSubstring("NOSUPERUSER"))
	g.Expect(ctr.VolumeMounts).To(ContainElement(And(HaveField("MountPath", "/docker-entrypoint-initdb.d/fleetdb-app-user.sh"),
		HaveField("SubPath", "fleetdb-app-user.sh"), HaveField("ReadOnly", true))))
	// mysql keeps its own setup (root has its own password).
	my := render(t, member.Params{Database: testDatabase(fleetv1alpha1.EngineMySQL), Cluster: "eu-1", Credentials: testCredentials()})
	g.Expect(my.objs["ConfigMap/orders-config"].(*corev1.ConfigMap).Data).NotTo(HaveKey("fleetdb-app-user.sh"))
}

func TestRenderOrderAndNames(t *testing.T) {
	tests := []struct {
		name     string
		replicas int32
		want     []string
	}{
		{"several replicas get a PodDisruptionBudget", 3, []string{
			"Namespace/team-a", "Secret/orders-credentials", "ConfigMap/orders-config",
			"Service/orders", "Service/orders-hl", "StatefulSet/orders", "PodDisruptionBudget/orders",
		}},
		{"one replica gets none", 1, []string{
			"Namespace/team-a", "Secret/orders-credentials", "ConfigMap/orders-config",
			"Service/orders", "Service/orders-hl", "StatefulSet/orders",
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			db := testDatabase(fleetv1alpha1.EnginePostgres, func(db *fleetv1alpha1.Database) { db.Spec.Replicas = tt.replicas })
			r := render(t, member.Params{Database: db, Cluster: "eu-1", Credentials: testCredentials()})
			g.Expect(r.order).To(Equal(tt.want))
			for k, o := range r.objs {
				if k == "Namespace/team-a" {
					continue
				}
				g.Expect(o.GetNamespace()).To(Equal("team-a"), k)
			}
		})
	}
}

func TestRenderMetadata(t *testing.T) {
	g := NewWithT(t)
	db := testDatabase(fleetv1alpha1.EnginePostgres)
	r := render(t, member.Params{Database: db, Cluster: "eu-1", Credentials: testCredentials(), Traceparent: testTraceparent})

	wantLabels := map[string]string{
		fleetv1alpha1.LabelManagedBy:         fleetv1alpha1.ManagedByValue,
		fleetv1alpha1.LabelDatabaseNamespace: "team-a",
		fleetv1alpha1.LabelDatabaseName:      "orders",
		fleetv1alpha1.LabelDatabaseUID:       string(db.UID),
		fleetv1alpha1.LabelName:              "postgres",
		fleetv1alpha1.LabelInstance:          "orders",
	}
	for k, o := range r.objs {
		if k == "Namespace/team-a" {
			// The namespace may be the user's: fleetdb marks nothing on it
			// but the label the member's admission policy requires of a
			// namespace it creates (an existing one is never changed).
			g.Expect(o.GetLabels()).To(Equal(map[string]string{fleetv1alpha1.LabelManagedNamespace: fleetv1alpha1.ManagedByValue}))
			g.Expect(o.GetAnnotations()).To(BeEmpty())
			continue
		}
		g.Expect(o.GetLabels()).To(Equal(wantLabels), k)
		// The generation sits on the StatefulSet alone, so that a spec change
		// rewrites only the objects whose content it changes.
		if k == "StatefulSet/orders" {
			g.Expect(o.GetAnnotations()).To(HaveKeyWithValue(fleetv1alpha1.AnnotationGeneration, "4"), k)
		} else {
			g.Expect(o.GetAnnotations()).NotTo(HaveKey(fleetv1alpha1.AnnotationGeneration), k)
		}
		g.Expect(o.GetAnnotations()).To(HaveKeyWithValue(fleetv1alpha1.AnnotationTraceparent, testTraceparent), k)
		g.Expect(o.GetAnnotations()).To(HaveKeyWithValue(fleetv1alpha1.AnnotationDeletionPolicy, "Delete"), k)
	}
	g.Expect(member.Labels(db)).To(Equal(map[string]string{
		fleetv1alpha1.LabelManagedBy:         fleetv1alpha1.ManagedByValue,
		fleetv1alpha1.LabelDatabaseNamespace: "team-a",
		fleetv1alpha1.LabelDatabaseName:      "orders",
		fleetv1alpha1.LabelDatabaseUID:       string(db.UID),
	}))

	sts := r.sts()
	// Pods and PVCs carry the labels, so that they can be found and collected too.
	g.Expect(sts.Spec.Template.Labels).To(Equal(wantLabels))
	g.Expect(sts.Spec.VolumeClaimTemplates).To(HaveLen(1))
	g.Expect(sts.Spec.VolumeClaimTemplates[0].Labels).To(Equal(wantLabels))
	// Per-change annotations on the pod template would restart the pods on every change.
	g.Expect(sts.Spec.Template.Annotations).NotTo(HaveKey(fleetv1alpha1.AnnotationTraceparent))
	g.Expect(sts.Spec.Template.Annotations).NotTo(HaveKey(fleetv1alpha1.AnnotationGeneration))
	g.Expect(sts.Spec.Template.Annotations).To(HaveKey(fleetv1alpha1.AnnotationConfigHash))
	// The selector is immutable: nothing in it may change for a Database name.
	g.Expect(sts.Spec.Selector.MatchLabels).NotTo(HaveKey(fleetv1alpha1.LabelDatabaseUID))

	g.Expect(sts.Spec.Template.Annotations).NotTo(HaveKey(fleetv1alpha1.AnnotationDeletionPolicy))

	// Without a traceparent there is no annotation at all.
	db.Spec.DeletionPolicy = fleetv1alpha1.DeletionPolicyRetain
	r = render(t, member.Params{Database: db, Cluster: "eu-1", Credentials: testCredentials()})
	g.Expect(r.sts().Annotations).NotTo(HaveKey(fleetv1alpha1.AnnotationTraceparent))
	// The deletion policy is recorded for leftovers collected after the hub object is gone.
	g.Expect(r.sts().Annotations).To(HaveKeyWithValue(fleetv1alpha1.AnnotationDeletionPolicy, "Retain"))
}

func TestRenderEngines(t *testing.T) {
	tests := []struct {
		engine    fleetv1alpha1.Engine
		version   string
		repo      string
		wantImage string
		wantPort  int32
		wantEnv   []string
		wantMount string
		wantProbe string
		wantConf  string
	}{
		{
			engine: fleetv1alpha1.EnginePostgres, wantImage: "docker.io/library/postgres:17", wantPort: 5432,
			wantEnv: []string{"POSTGRES_USER", "FLEETDB_APP_USER", "FLEETDB_APP_PASSWORD", "PGDATA"}, wantMount: "/var/lib/postgresql/data",
			wantProbe: "pg_isready", wantConf: "postgresql.conf",
		},
		{
			engine: fleetv1alpha1.EnginePostgres, version: "16.4", repo: "registry.local/library/",
			wantImage: "registry.local/library/postgres:16.4", wantPort: 5432,
			wantEnv: []string{"POSTGRES_USER", "FLEETDB_APP_USER", "FLEETDB_APP_PASSWORD", "PGDATA"}, wantMount: "/var/lib/postgresql/data",
			wantProbe: "pg_isready", wantConf: "postgresql.conf",
		},
		{
			engine: fleetv1alpha1.EngineMySQL, wantImage: "docker.io/library/mysql:8.4", wantPort: 3306,
			wantEnv: []string{"MYSQL_ROOT_PASSWORD", "MYSQL_USER", "MYSQL_PASSWORD"}, wantMount: "/var/lib/mysql",
			wantProbe: "mysqladmin ping", wantConf: "fleetdb.cnf",
		},
		{
			engine: fleetv1alpha1.EngineMySQL, version: "9.1", repo: "registry.local/library",
			wantImage: "registry.local/library/mysql:9.1", wantPort: 3306,
			wantEnv: []string{"MYSQL_ROOT_PASSWORD", "MYSQL_USER", "MYSQL_PASSWORD"}, wantMount: "/var/lib/mysql",
			wantProbe: "mysqladmin ping", wantConf: "fleetdb.cnf",
		},
	}
	for _, tt := range tests {
		t.Run(tt.wantImage, func(t *testing.T) {
			g := NewWithT(t)
			db := testDatabase(tt.engine, func(db *fleetv1alpha1.Database) { db.Spec.Version = tt.version })
			r := render(t, member.Params{Database: db, Cluster: "eu-1", Credentials: testCredentials(), ImageRepository: tt.repo})

			sts := r.sts()
			g.Expect(sts.Spec.ServiceName).To(Equal("orders-hl"))
			g.Expect(*sts.Spec.Replicas).To(Equal(int32(3)))
			pod := sts.Spec.Template.Spec
			g.Expect(pod.Containers).To(HaveLen(1))
			ctr := pod.Containers[0]
			g.Expect(ctr.Image).To(Equal(tt.wantImage))
			g.Expect(ctr.Ports).To(ConsistOf(HaveField("ContainerPort", tt.wantPort)))

			var env []string
			for _, e := range ctr.Env {
				env = append(env, e.Name)
				if e.ValueFrom != nil {
					// Credentials come from the Secret, never inline.
					g.Expect(e.Value).To(BeEmpty())
					g.Expect(e.ValueFrom.SecretKeyRef.Name).To(Equal("orders-credentials"))
				}
			}
			g.Expect(env).To(Equal(tt.wantEnv))
			g.Expect(ctr.VolumeMounts).To(ContainElement(And(HaveField("Name", "data"), HaveField("MountPath", tt.wantMount))))
			g.Expect(ctr.VolumeMounts).To(ContainElement(And(HaveField("Name", "config"), HaveField("ReadOnly", true))))
			g.Expect(strings.Join(ctr.ReadinessProbe.Exec.Command, " ")).To(ContainSubstring(tt.wantProbe))
			g.Expect(ctr.LivenessProbe.TCPSocket).NotTo(BeNil())

			// Non-root, least privilege.
			g.Expect(*pod.SecurityContext.RunAsNonRoot).To(BeTrue())
			g.Expect(*pod.SecurityContext.RunAsUser).To(Equal(int64(999)))
			g.Expect(*pod.SecurityContext.FSGroup).To(Equal(int64(999)))
			g.Expect(*ctr.SecurityContext.AllowPrivilegeEscalation).To(BeFalse())
			g.Expect(ctr.SecurityContext.Capabilities.Drop).To(ConsistOf(corev1.Capability("ALL")))
			g.Expect(ctr.SecurityContext.SeccompProfile.Type).To(Equal(corev1.SeccompProfileTypeRuntimeDefault))

			for _, name := range []string{"Service/orders", "Service/orders-hl"} {
				svc := r.objs[name].(*corev1.Service)
				g.Expect(svc.Spec.Ports).To(ConsistOf(HaveField("Port", tt.wantPort)), name)
				g.Expect(svc.Spec.Selector).To(Equal(sts.Spec.Selector.MatchLabels), name)
			}
			g.Expect(r.objs["Service/orders-hl"].(*corev1.Service).Spec.ClusterIP).To(Equal(corev1.ClusterIPNone))
			g.Expect(r.objs["Service/orders"].(*corev1.Service).Spec.ClusterIP).To(BeEmpty())

			cm := r.objs["ConfigMap/orders-config"].(*corev1.ConfigMap)
			g.Expect(cm.Data).To(HaveKey(tt.wantConf))

			secret := r.objs["Secret/orders-credentials"].(*corev1.Secret)
			g.Expect(secret.Type).To(Equal(corev1.SecretTypeOpaque))
			g.Expect(secret.Data).To(Equal(testCredentials()))

			pdb := r.objs["PodDisruptionBudget/orders"].(*policyv1.PodDisruptionBudget)
			g.Expect(pdb.Spec.MaxUnavailable.IntValue()).To(Equal(1))
			g.Expect(pdb.Spec.Selector.MatchLabels).To(Equal(sts.Spec.Selector.MatchLabels))
		})
	}
}

func TestRenderOverrides(t *testing.T) {
	withOverrides := func(db *fleetv1alpha1.Database) {
		db.Spec.Resources = &fleetv1alpha1.ResourceSpec{Requests: &fleetv1alpha1.ComputeResources{CPU: ptr(resource.MustParse("500m"))}}
		db.Spec.Overrides = []fleetv1alpha1.OverrideSpec{
			{ClusterNames: []string{"us-1", "us-2"}, Replicas: ptr(int32(1)), StorageClassName: ptr("standard")},
			{ClusterNames: []string{"ap-1"}, Resources: &fleetv1alpha1.ResourceSpec{
				Limits: &fleetv1alpha1.ComputeResources{Memory: ptr(resource.MustParse("2Gi"))},
			}},
		}
	}
	tests := []struct {
		cluster       string
		wantReplicas  int32
		wantClass     string
		wantResources corev1.ResourceRequirements
		wantPDB       bool
	}{
		{"eu-1", 3, "fast", corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("500m")}}, true},
		{"us-2", 1, "standard", corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("500m")}}, false},
		{"ap-1", 3, "fast", corev1.ResourceRequirements{Limits: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("2Gi")}}, true},
	}
	for _, tt := range tests {
		t.Run(tt.cluster, func(t *testing.T) {
			g := NewWithT(t)
			db := testDatabase(fleetv1alpha1.EnginePostgres, withOverrides)
			g.Expect(member.EffectiveReplicas(db, tt.cluster)).To(Equal(tt.wantReplicas))

			r := render(t, member.Params{Database: db, Cluster: tt.cluster, Credentials: testCredentials()})
			sts := r.sts()
			g.Expect(*sts.Spec.Replicas).To(Equal(tt.wantReplicas))
			claim := sts.Spec.VolumeClaimTemplates[0]
			g.Expect(claim.Name).To(Equal("data"))
			g.Expect(*claim.Spec.StorageClassName).To(Equal(tt.wantClass))
			g.Expect(claim.Spec.Resources.Requests.Storage().String()).To(Equal("10Gi"))
			g.Expect(claim.Spec.AccessModes).To(ConsistOf(corev1.ReadWriteOnce))
			g.Expect(sts.Spec.Template.Spec.Containers[0].Resources).To(Equal(tt.wantResources))
			_, hasPDB := r.objs["PodDisruptionBudget/orders"]
			g.Expect(hasPDB).To(Equal(tt.wantPDB))
		})
	}
}

func TestRenderDefaults(t *testing.T) {
	g := NewWithT(t)
	db := testDatabase(fleetv1alpha1.EngineMySQL, func(db *fleetv1alpha1.Database) {
		db.Spec.Replicas = 0 // unset: the CRD defaults it to 1
		db.Spec.Storage.StorageClassName = ""
	})
	g.Expect(member.EffectiveReplicas(db, "eu-1")).To(Equal(int32(1)))
	r := render(t, member.Params{Database: db, Cluster: "eu-1", Credentials: testCredentials()})
	sts := r.sts()
	g.Expect(*sts.Spec.Replicas).To(Equal(int32(1)))
	g.Expect(sts.Spec.VolumeClaimTemplates[0].Spec.StorageClassName).To(BeNil(), "the member's default class")
	g.Expect(sts.Spec.Template.Spec.Containers[0].Resources).To(Equal(corev1.ResourceRequirements{}))
	g.Expect(sts.Spec.Template.Spec.Containers[0].Image).To(Equal("docker.io/library/mysql:" + fleetv1alpha1.DefaultMySQLVersion))
	g.Expect(r.objs).NotTo(HaveKey("PodDisruptionBudget/orders"))
}

func TestRenderIsDeterministic(t *testing.T) {
	g := NewWithT(t)
	p := member.Params{Database: testDatabase(fleetv1alpha1.EnginePostgres), Cluster: "eu-1", Credentials: testCredentials()}
	a, err := member.Render(p)
	g.Expect(err).NotTo(HaveOccurred())
	b, err := member.Render(p)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(a).To(Equal(b))
}

func TestRenderErrors(t *testing.T) {
	tests := []struct {
		name    string
		params  func() member.Params
		wantErr string
	}{
		{"no database", func() member.Params { return member.Params{Credentials: testCredentials()} }, "no Database"},
		{"unknown engine", func() member.Params {
			return member.Params{Database: testDatabase("oracle"), Credentials: testCredentials()}
		}, `unknown engine "oracle"`},
		{"no credentials", func() member.Params {
			return member.Params{Database: testDatabase(fleetv1alpha1.EnginePostgres)}
		}, `no "username"`},
		{"no password", func() member.Params {
			return member.Params{Database: testDatabase(fleetv1alpha1.EnginePostgres), Credentials: map[string][]byte{"username": []byte("app")}}
		}, `no "password"`},
		{"mysql root user", func() member.Params {
			return member.Params{Database: testDatabase(fleetv1alpha1.EngineMySQL), Credentials: map[string][]byte{
				"username": []byte("root"), "password": []byte("s3cr3t-value"),
			}}
		}, "reserves the user name root"},
		{"no storage", func() member.Params {
			return member.Params{Database: testDatabase(fleetv1alpha1.EnginePostgres, func(db *fleetv1alpha1.Database) {
				db.Spec.Storage.Size = resource.Quantity{}
			}), Credentials: testCredentials()}
		}, "spec.storage.size"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			objs, err := member.Render(tt.params())
			g.Expect(err).To(MatchError(ContainSubstring(tt.wantErr)))
			g.Expect(err.Error()).NotTo(ContainSubstring("s3cr3t-value"))
			g.Expect(objs).To(BeNil())
		})
	}
}

func TestSelectorFor(t *testing.T) {
	g := NewWithT(t)
	db := testDatabase(fleetv1alpha1.EnginePostgres)
	sel := member.SelectorFor("team-a", "orders")
	g.Expect(sel.Matches(labels.Set(member.Labels(db)))).To(BeTrue())

	// A leftover of a deleted Database of the same name (another UID) is found.
	other := member.Labels(db)
	other[fleetv1alpha1.LabelDatabaseUID] = "another-uid"
	g.Expect(sel.Matches(labels.Set(other))).To(BeTrue())

	for _, key := range []string{fleetv1alpha1.LabelManagedBy, fleetv1alpha1.LabelDatabaseName, fleetv1alpha1.LabelDatabaseNamespace} {
		l := member.Labels(db)
		delete(l, key)
		g.Expect(sel.Matches(labels.Set(l))).To(BeFalse(), key)
	}
	g.Expect(member.SelectorFor("team-b", "orders").Matches(labels.Set(member.Labels(db)))).To(BeFalse())
}

func ptr[T any](v T) *T { return &v }
