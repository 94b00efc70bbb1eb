package member_test

import (
	"context"
	"errors"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleetv1alpha1 "github.com/fleetdb/fleetdb/apis/v1alpha1"
	"github.com/fleetdb/fleetdb/member"
	"github.com/fleetdb/fleetdb/test/fleet"
)

// env is one member control plane shared by the integration tests.
type env struct {
	admin   client.Client // plain client for arranging and checking
	counted client.Client // the client under test; its writes are counted
	writes  *fleet.WriteCounter
}

func startMember(t *testing.T) *env {
	t.Helper()
	if testing.Short() {
		t.Skip("integration test: starts a kube-apiserver")
	}
	f := fleet.Start(t, fleet.Options{Members: []string{"m1"}})
	m := f.Member("m1")
	wc := &fleet.WriteCounter{}
	cfg := rest.CopyConfig(m.Config)
	cfg.WrapTransport = func(rt http.RoundTripper) http.RoundTripper { return wc.Wrap("", rt) }
	counted, err := client.New(cfg, client.Options{Scheme: fleet.Scheme})
	if err != nil {
		t.Fatalf("client: %v", err)
	}
	return &env{admin: m.Client, counted: counted, writes: wc}
}

func newDatabase(namespace, name string, replicas int32) *fleetv1alpha1.Database {
	return &fleetv1alpha1.Database{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace, UID: types.UID(namespace + "-" + name + "-uid-1"), Generation: 1},
		Spec: fleetv1alpha1.DatabaseSpec{
			Engine:   fleetv1alpha1.EnginePostgres,
			Backend:  fleetv1alpha1.BackendStatefulSet,
			Replicas: replicas,
			Storage:  fleetv1alpha1.StorageSpec{Size: resource.MustParse("1Gi")},
		},
	}
}

func renderFor(t *testing.T, db *fleetv1alpha1.Database, traceparent string) []client.Object {
	t.Helper()
	objs, err := member.Render(member.Params{Database: db, Cluster: "m1", Credentials: testCredentials(), Traceparent: traceparent})
	if err != nil {
		t.Fatalf("Render: %v", err)
	}
	return objs
}

func (e *env) apply(t *testing.T, ctx context.Context, objs []client.Object, memo *member.Memo) member.ApplyResult {
	t.Helper()
	res, err := member.Apply(ctx, "m1", e.counted, e.counted, objs, memo)
	if err != nil {
		t.Fatalf("Apply: %v", err)
	}
	return res
}

func key(namespace, name string) client.ObjectKey {
	return client.ObjectKey{Namespace: namespace, Name: name}
}

func TestIntegration(t *testing.T) {
	e := startMember(t)
	ctx := fleet.Context(t)
	t.Run("apply creates everything", func(t *testing.T) { testApplyCreates(t, ctx, e) })
	t.Run("steady state makes zero writes", func(t *testing.T) { testZeroWrites(t, ctx, e) })
	t.Run("drift is put back", func(t *testing.T) { testDrift(t, ctx, e) })
	t.Run("drift is put back after a restart", func(t *testing.T) { testDriftAfterRestart(t, ctx, e) })
	t.Run("unowned objects conflict", func(t *testing.T) { testConflict(t, ctx, e) })
	t.Run("leftovers are adopted", func(t *testing.T) { testAdopt(t, ctx, e) })
	t.Run("objects no longer rendered are pruned", func(t *testing.T) { testPrune(t, ctx, e) })
	t.Run("observe", func(t *testing.T) { testObserve(t, ctx, e) })
	t.Run("teardown Delete", func(t *testing.T) { testTeardownDelete(t, ctx, e) })
	t.Run("teardown Retain", func(t *testing.T) { testTeardownRetain(t, ctx, e) })
	t.Run("teardown Orphan", func(t *testing.T) { testTeardownOrphan(t, ctx, e) })
}

func testApplyCreates(t *testing.T, ctx context.Context, e *env) {
	g := NewWithT(t)
	db := newDatabase("it-create", "orders", 3)
	res := e.apply(t, ctx, renderFor(t, db, testTraceparent), member.NewMemo())
	g.Expect(res.Applied).To(Equal([]string{
		"Namespace/it-create",
		"Secret/it-create/orders-credentials",
		"ConfigMap/it-create/orders-config",
		"Service/it-create/orders",
		"Service/it-create/orders-hl",
		"StatefulSet/it-create/orders",
		"PodDisruptionBudget/it-create/orders",
	}))
	g.Expect(res.Restored).To(BeEmpty(), "a first creation is not a restore")

	ns := &corev1.Namespace{}
	g.Expect(e.admin.Get(ctx, key("", "it-create"), ns)).To(Succeed())
	g.Expect(ns.Labels).NotTo(HaveKey(fleetv1alpha1.LabelDatabaseName))

	sts := &appsv1.StatefulSet{}
	g.Expect(e.admin.Get(ctx, key("it-create", "orders"), sts)).To(Succeed())
	g.Expect(*sts.Spec.Replicas).To(Equal(int32(3)))
	g.Expect(sts.Spec.ServiceName).To(Equal("orders-hl"))
	g.Expect(sts.Spec.Template.Spec.Containers[0].Image).To(Equal("docker.io/library/postgres:17"))
	g.Expect(sts.Labels).To(HaveKeyWithValue(fleetv1alpha1.LabelDatabaseUID, string(db.UID)))
	g.Expect(sts.Annotations).To(HaveKeyWithValue(fleetv1alpha1.AnnotationGeneration, "1"))
	g.Expect(sts.Annotations).To(HaveKeyWithValue(fleetv1alpha1.AnnotationTraceparent, testTraceparent))
	g.Expect(sts.Spec.Template.Labels).To(HaveKeyWithValue(fleetv1alpha1.LabelManagedBy, fleetv1alpha1.ManagedByValue))
	g.Expect(sts.Spec.VolumeClaimTemplates[0].Labels).To(HaveKeyWithValue(fleetv1alpha1.LabelDatabaseName, "orders"))
	g.Expect(sts.Spec.VolumeClaimTemplates[0].Spec.Resources.Requests.Storage().String()).To(Equal("1Gi"))
	g.Expect(managers(sts.ManagedFields)).To(ConsistOf("fleetdb/Apply"))

	secret := &corev1.Secret{}
	g.Expect(e.admin.Get(ctx, key("it-create", "orders-credentials"), secret)).To(Succeed())
	g.Expect(secret.Data).To(Equal(testCredentials()))
	g.Expect(secret.Type).To(Equal(corev1.SecretTypeOpaque))

	cm := &corev1.ConfigMap{}
	g.Expect(e.admin.Get(ctx, key("it-create", "orders-config"), cm)).To(Succeed())
	g.Expect(cm.Data).To(HaveKey("postgresql.conf"))

	svc := &corev1.Service{}
	g.Expect(e.admin.Get(ctx, key("it-create", "orders"), svc)).To(Succeed())
	g.Expect(svc.Spec.Ports[0].Port).To(Equal(int32(5432)))
	g.Expect(e.admin.Get(ctx, key("it-create", "orders-hl"), svc)).To(Succeed())
	g.Expect(svc.Spec.ClusterIP).To(Equal(corev1.ClusterIPNone))

	pdb := &policyv1.PodDisruptionBudget{}
	g.Expect(e.admin.Get(ctx, key("it-create", "orders"), pdb)).To(Succeed())
	g.Expect(pdb.Spec.MaxUnavailable.IntValue()).To(Equal(1))
}

func managers(fields []metav1.ManagedFieldsEntry) []string {
	var out []string
	for _, f := range fields {
		out = append(out, f.Manager+"/"+string(f.Operation))
	}
	return out
}

// resourceVersions maps "Kind/name" to the resourceVersion of every object of the Database.
func resourceVersions(t *testing.T, ctx context.Context, c client.Client, namespace string) map[string]string {
	t.Helper()
	out := map[string]string{}
	lists := map[string]client.ObjectList{
		"StatefulSet": &appsv1.StatefulSetList{}, "PodDisruptionBudget": &policyv1.PodDisruptionBudgetList{},
		"Service": &corev1.ServiceList{}, "ConfigMap": &corev1.ConfigMapList{}, "Secret": &corev1.SecretList{},
	}
	for kind, list := range lists {
		if err := c.List(ctx, list, client.InNamespace(namespace)); err != nil {
			t.Fatalf("list: %v", err)
		}
		switch l := list.(type) {
		case *appsv1.StatefulSetList:
			for _, o := range l.Items {
				out[kind+"/"+o.Name] = o.ResourceVersion
			}
		case *policyv1.PodDisruptionBudgetList:
			for _, o := range l.Items {
				out[kind+"/"+o.Name] = o.ResourceVersion
			}
		case *corev1.ServiceList:
			for _, o := range l.Items {
				out[kind+"/"+o.Name] = o.ResourceVersion
			}
		case *corev1.ConfigMapList:
			for _, o := range l.Items {
				if o.Name != "kube-root-ca.crt" {
					out[kind+"/"+o.Name] = o.ResourceVersion
				}
			}
		case *corev1.SecretList:
			for _, o := range l.Items {
				out[kind+"/"+o.Name] = o.ResourceVersion
			}
		}
	}
	return out
}

func testZeroWrites(t *testing.T, ctx context.Context, e *env) {
	g := NewWithT(t)
	db := newDatabase("it-steady", "orders", 3)
	memo := member.NewMemo()
	e.apply(t, ctx, renderFor(t, db, testTraceparent), memo)
	rvs := resourceVersions(t, ctx, e.admin, "it-steady")
	g.Expect(rvs).To(HaveLen(6))

	e.writes.Take()
	res := e.apply(t, ctx, renderFor(t, db, testTraceparent), memo)
	g.Expect(e.writes.Take()).To(BeEmpty(), "a second Apply with the same memo sends nothing")
	g.Expect(res.Applied).To(BeEmpty())

	// A new trace alone is no reason to write.
	e.apply(t, ctx, renderFor(t, db, "00-11111111111111111111111111111111-2222222222222222-01"), memo)
	g.Expect(e.writes.Take()).To(BeEmpty(), "a new traceparent alone sends nothing")

	// Status-only changes (the StatefulSet controller at work) cause no writes either.
	sts := &appsv1.StatefulSet{}
	g.Expect(e.admin.Get(ctx, key("it-steady", "orders"), sts)).To(Succeed())
	sts.Status = appsv1.StatefulSetStatus{ObservedGeneration: sts.Generation, Replicas: 3, ReadyReplicas: 1, CurrentReplicas: 3, UpdatedReplicas: 3}
	g.Expect(e.admin.Status().Update(ctx, sts)).To(Succeed())
	e.apply(t, ctx, renderFor(t, db, testTraceparent), memo)
	g.Expect(e.writes.Take()).To(BeEmpty(), "status updates do not make fleetdb write")

	// A restarted hub (empty memo, a new trace) sends nothing: every object
	// carries the hash of the same rendering and holds what it would apply.
	rvs = resourceVersions(t, ctx, e.admin, "it-steady")
	fresh := member.NewMemo()
	res = e.apply(t, ctx, renderFor(t, db, "00-33333333333333333333333333333333-4444444444444444-01"), fresh)
	g.Expect(e.writes.Take()).To(BeEmpty(), "a restarted hub writes nothing to an unchanged member")
	g.Expect(res.Applied).To(BeEmpty())
	g.Expect(res.Restored).To(BeEmpty())
	g.Expect(resourceVersions(t, ctx, e.admin, "it-steady")).To(Equal(rvs))
	e.apply(t, ctx, renderFor(t, db, testTraceparent), fresh)
	g.Expect(e.writes.Take()).To(BeEmpty(), "and after it the fleet is quiet again")

	// Forgetting the cluster (a reconnect) costs no write either.
	fresh.Forget("m1")
	e.apply(t, ctx, renderFor(t, db, testTraceparent), fresh)
	g.Expect(e.writes.Take()).To(BeEmpty())

	// A new hub generation that changes nothing else rewrites the StatefulSet
	// alone, which records it (Observe reports it from there).
	db.Generation = 2
	res = e.apply(t, ctx, renderFor(t, db, testTraceparent), fresh)
	g.Expect(e.writes.Take()).To(ConsistOf("PATCH /apis/apps/v1/namespaces/it-steady/statefulsets/orders"))
	g.Expect(res.Restored).To(BeEmpty())
	g.Expect(e.admin.Get(ctx, key("it-steady", "orders"), sts)).To(Succeed())
	g.Expect(sts.Annotations).To(HaveKeyWithValue(fleetv1alpha1.AnnotationGeneration, "2"))
	e.apply(t, ctx, renderFor(t, db, testTraceparent), fresh)
	g.Expect(e.writes.Take()).To(BeEmpty())
}

func testDrift(t *testing.T, ctx context.Context, e *env) {
	g := NewWithT(t)
	db := newDatabase("it-drift", "orders", 3)
	memo := member.NewMemo()
	e.apply(t, ctx, renderFor(t, db, ""), memo)

	// Someone scales the StatefulSet by hand.
	sts := &appsv1.StatefulSet{}
	g.Expect(e.admin.Get(ctx, key("it-drift", "orders"), sts)).To(Succeed())
	sts.Spec.Replicas = ptr(int32(5))
	g.Expect(e.admin.Update(ctx, sts)).To(Succeed())
	// ... deletes the ConfigMap ...
	g.Expect(e.admin.Delete(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "it-drift", Name: "orders-config"}})).To(Succeed())
	// ... and removes a label from the Service (a metadata edit: no new generation).
	svc := &corev1.Service{}
	g.Expect(e.admin.Get(ctx, key("it-drift", "orders"), svc)).To(Succeed())
	delete(svc.Labels, fleetv1alpha1.LabelDatabaseUID)
	g.Expect(e.admin.Update(ctx, svc)).To(Succeed())

	e.writes.Take()
	res := e.apply(t, ctx, renderFor(t, db, ""), memo)
	g.Expect(res.Restored).To(ConsistOf(
		"StatefulSet/it-drift/orders",
		"ConfigMap/it-drift/orders-config",
		"Service/it-drift/orders",
	))
	g.Expect(res.Applied).To(ConsistOf(res.Restored))
	g.Expect(e.writes.Take()).To(HaveLen(3), "only the drifted objects are written")

	g.Expect(e.admin.Get(ctx, key("it-drift", "orders"), sts)).To(Succeed())
	g.Expect(*sts.Spec.Replicas).To(Equal(int32(3)))
	g.Expect(e.admin.Get(ctx, key("it-drift", "orders-config"), &corev1.ConfigMap{})).To(Succeed())
	g.Expect(e.admin.Get(ctx, key("it-drift", "orders"), svc)).To(Succeed())
	g.Expect(svc.Labels).To(HaveKeyWithValue(fleetv1alpha1.LabelDatabaseUID, string(db.UID)))

	// Put back, the member is quiet again.
	res = e.apply(t, ctx, renderFor(t, db, ""), memo)
	g.Expect(e.writes.Take()).To(BeEmpty())
	g.Expect(res.Restored).To(BeEmpty())

	// A foreign label added by someone else is left alone and is no drift.
	g.Expect(e.admin.Get(ctx, key("it-drift", "orders-config"), &corev1.ConfigMap{})).To(Succeed())
	cm := &corev1.ConfigMap{}
	g.Expect(e.admin.Get(ctx, key("it-drift", "orders-config"), cm)).To(Succeed())
	cm.Labels["team"] = "payments"
	g.Expect(e.admin.Update(ctx, cm)).To(Succeed())
	res = e.apply(t, ctx, renderFor(t, db, ""), memo)
	g.Expect(res.Restored).To(BeEmpty(), "the apply changed nothing, so nothing was restored")
	g.Expect(e.admin.Get(ctx, key("it-drift", "orders-config"), cm)).To(Succeed())
	g.Expect(cm.Labels).To(HaveKeyWithValue("team", "payments"))
}

func testConflict(t *testing.T, ctx context.Context, e *env) {
	g := NewWithT(t)
	g.Expect(e.admin.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "it-conflict"}})).To(Succeed())
	labels := map[string]string{"app": "theirs"}
	theirs := &appsv1.StatefulSet{
		ObjectMeta: metav1.ObjectMeta{Namespace: "it-conflict", Name: "orders", Labels: labels},
		Spec: appsv1.StatefulSetSpec{
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "db", Image: "example.com/db:1"}}},
			},
		},
	}
	g.Expect(e.admin.Create(ctx, theirs)).To(Succeed())
	before := theirs.DeepCopy()

	db := newDatabase("it-conflict", "orders", 3)
	e.writes.Take()
	_, err := member.Apply(ctx, "m1", e.counted, e.counted, renderFor(t, db, ""), member.NewMemo())
	var conflict *member.ConflictError
	g.Expect(errors.As(err, &conflict)).To(BeTrue(), "got %v", err)
	g.Expect(*conflict).To(Equal(member.ConflictError{Kind: "StatefulSet", Namespace: "it-conflict", Name: "orders"}))
	g.Expect(err.Error()).To(ContainSubstring("StatefulSet it-conflict/orders"))
	g.Expect(e.writes.Take()).To(BeEmpty(), "nothing at all is written on a conflict")

	after := &appsv1.StatefulSet{}
	g.Expect(e.admin.Get(ctx, key("it-conflict", "orders"), after)).To(Succeed())
	g.Expect(after.ResourceVersion).To(Equal(before.ResourceVersion))
	g.Expect(after.Labels).To(Equal(before.Labels))
	g.Expect(e.admin.Get(ctx, key("it-conflict", "orders-credentials"), &corev1.Secret{})).To(Satisfy(apierrors.IsNotFound))

	// Objects labelled for another Database are not ours either.
	db2 := newDatabase("it-conflict", "users", 1)
	other := renderFor(t, newDatabase("it-conflict", "other", 1), "")
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "it-conflict", Name: "users-config", Labels: other[2].GetLabels()}}
	g.Expect(e.admin.Create(ctx, cm)).To(Succeed())
	_, err = member.Apply(ctx, "m1", e.counted, e.counted, renderFor(t, db2, ""), member.NewMemo())
	g.Expect(errors.As(err, &conflict)).To(BeTrue(), "got %v", err)
	g.Expect(conflict.Kind).To(Equal("ConfigMap"))
	g.Expect(e.writes.Take()).To(BeEmpty())

	// Observe does not report someone else's StatefulSet as the Database's.
	st, err := member.Observe(ctx, e.counted, db, "m1")
	g.Expect(errors.As(err, &conflict)).To(BeTrue(), "got %v", err)
	g.Expect(st.Phase).To(Equal(fleetv1alpha1.ClusterPhasePending))
}

func testAdopt(t *testing.T, ctx context.Context, e *env) {
	g := NewWithT(t)
	old := newDatabase("it-adopt", "orders", 1)
	e.apply(t, ctx, renderFor(t, old, ""), member.NewMemo())

	// The Database was deleted while the member was away and created again: a new UID.
	db := newDatabase("it-adopt", "orders", 1)
	db.UID = "it-adopt-orders-uid-2"
	res := e.apply(t, ctx, renderFor(t, db, ""), member.NewMemo())
	g.Expect(res.Applied).To(HaveLen(5))

	sts := &appsv1.StatefulSet{}
	g.Expect(e.admin.Get(ctx, key("it-adopt", "orders"), sts)).To(Succeed())
	g.Expect(sts.Labels).To(HaveKeyWithValue(fleetv1alpha1.LabelDatabaseUID, "it-adopt-orders-uid-2"))
	// volumeClaimTemplates are immutable: the old ones stay rather than failing the apply.
	g.Expect(sts.Spec.VolumeClaimTemplates[0].Labels).To(HaveKeyWithValue(fleetv1alpha1.LabelDatabaseUID, string(old.UID)))
}

func testPrune(t *testing.T, ctx context.Context, e *env) {
	g := NewWithT(t)
	db := newDatabase("it-prune", "orders", 3)
	memo := member.NewMemo()
	e.apply(t, ctx, renderFor(t, db, ""), memo)
	g.Expect(e.admin.Get(ctx, key("it-prune", "orders"), &policyv1.PodDisruptionBudget{})).To(Succeed())

	db.Generation, db.Spec.Replicas = 2, 1
	res := e.apply(t, ctx, renderFor(t, db, ""), memo)
	g.Expect(res.Pruned).To(Equal([]string{"PodDisruptionBudget/it-prune/orders"}))
	g.Expect(e.admin.Get(ctx, key("it-prune", "orders"), &policyv1.PodDisruptionBudget{})).To(Satisfy(apierrors.IsNotFound))

	// Scaling up again brings it back, as a new object rather than a restore.
	db.Generation, db.Spec.Replicas = 3, 2
	res = e.apply(t, ctx, renderFor(t, db, ""), memo)
	g.Expect(res.Applied).To(ContainElement("PodDisruptionBudget/it-prune/orders"))
	g.Expect(res.Restored).To(BeEmpty())
}

func testObserve(t *testing.T, ctx context.Context, e *env) {
	g := NewWithT(t)
	db := newDatabase("it-observe", "orders", 3)
	db.Generation = 4

	st, err := member.Observe(ctx, e.counted, db, "m1")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(st.Name).To(Equal("m1"))
	g.Expect(st.Phase).To(Equal(fleetv1alpha1.ClusterPhasePending))
	g.Expect(st.LastSyncTime).NotTo(BeNil())

	memo := member.NewMemo()
	e.apply(t, ctx, renderFor(t, db, ""), memo)
	st, err = member.Observe(ctx, e.counted, db, "m1")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(st.Phase).To(Equal(fleetv1alpha1.ClusterPhaseProvisioning))
	g.Expect(st.ObservedGeneration).To(BeZero(), "the StatefulSet controller has not caught up")
	g.Expect(st.Replicas).To(Equal(int32(3)))
	g.Expect(st.Version).To(Equal("17"))
	g.Expect(st.Endpoint).To(Equal("orders.it-observe.svc:5432"))
	g.Expect(st.Message).To(ContainSubstring("not observed generation"))

	setStatus := func(mutate func(sts *appsv1.StatefulSet)) {
		t.Helper()
		sts := &appsv1.StatefulSet{}
		g.Expect(e.admin.Get(ctx, key("it-observe", "orders"), sts)).To(Succeed())
		sts.Status = appsv1.StatefulSetStatus{
			ObservedGeneration: sts.Generation, Replicas: 3, CurrentReplicas: 3, UpdatedReplicas: 3,
			CurrentRevision: "orders-1", UpdateRevision: "orders-1",
		}
		mutate(sts)
		g.Expect(e.admin.Status().Update(ctx, sts)).To(Succeed())
	}

	setStatus(func(sts *appsv1.StatefulSet) { sts.Status.ReadyReplicas = 2 })
	st, err = member.Observe(ctx, e.counted, db, "m1")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(st.Phase).To(Equal(fleetv1alpha1.ClusterPhaseProvisioning))
	g.Expect(st.ReadyReplicas).To(Equal(int32(2)))
	g.Expect(st.ObservedGeneration).To(Equal(int64(4)), "caught up: the member runs hub generation 4")
	g.Expect(st.Message).To(Equal("2 of 3 replicas are ready"))

	setStatus(func(sts *appsv1.StatefulSet) { sts.Status.ReadyReplicas = 3 })
	st, err = member.Observe(ctx, e.counted, db, "m1")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(st.Phase).To(Equal(fleetv1alpha1.ClusterPhaseReady))
	g.Expect(st.ReadyReplicas).To(Equal(int32(3)))
	g.Expect(st.ObservedGeneration).To(Equal(int64(4)))
	g.Expect(st.Message).To(BeEmpty())

	// A rollout in progress: the previous revision still runs somewhere.
	setStatus(func(sts *appsv1.StatefulSet) {
		sts.Status.ReadyReplicas = 3
		sts.Status.UpdateRevision = "orders-2"
	})
	st, err = member.Observe(ctx, e.counted, db, "m1")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(st.Phase).To(Equal(fleetv1alpha1.ClusterPhaseProvisioning))
	g.Expect(st.ObservedGeneration).To(BeZero())

	setStatus(func(sts *appsv1.StatefulSet) {
		sts.Status.ReadyReplicas = 3
		sts.Status.UpdatedReplicas = 1
	})
	st, err = member.Observe(ctx, e.counted, db, "m1")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(st.Phase).To(Equal(fleetv1alpha1.ClusterPhaseProvisioning))
	g.Expect(st.ObservedGeneration).To(BeZero())

	// A new hub generation changes the StatefulSet: until its controller observes it, the generation is unknown.
	setStatus(func(sts *appsv1.StatefulSet) { sts.Status.ReadyReplicas = 3 })
	db.Generation = 5
	db.Spec.Resources = &fleetv1alpha1.ResourceSpec{Requests: &fleetv1alpha1.ComputeResources{CPU: new(resource.MustParse("250m"))}}
	e.apply(t, ctx, renderFor(t, db, ""), memo)
	st, err = member.Observe(ctx, e.counted, db, "m1")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(st.Phase).To(Equal(fleetv1alpha1.ClusterPhaseProvisioning))
	g.Expect(st.ObservedGeneration).To(BeZero())
	g.Expect(st.ReadyReplicas).To(Equal(int32(3)))

	setStatus(func(sts *appsv1.StatefulSet) { sts.Status.ReadyReplicas = 3 })
	st, err = member.Observe(ctx, e.counted, db, "m1")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(st.Phase).To(Equal(fleetv1alpha1.ClusterPhaseReady))
	g.Expect(st.ObservedGeneration).To(Equal(int64(5)))
}

// arrangeTeardown applies a Database, adds the PVCs its StatefulSet controller
// would create and an unrelated ConfigMap next to them.
func arrangeTeardown(t *testing.T, ctx context.Context, e *env, namespace string) *fleetv1alpha1.Database {
	t.Helper()
	g := NewWithT(t)
	db := newDatabase(namespace, "orders", 2)
	objs := renderFor(t, db, "")
	e.apply(t, ctx, objs, member.NewMemo())
	sts := objs[5].(*appsv1.StatefulSet)
	for _, name := range []string{"data-orders-0", "data-orders-1"} {
		tmpl := sts.Spec.VolumeClaimTemplates[0]
		pvc := &corev1.PersistentVolumeClaim{
			ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name, Labels: tmpl.Labels},
			Spec:       tmpl.Spec,
		}
		g.Expect(e.admin.Create(ctx, pvc)).To(Succeed())
	}
	unrelated := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: "unrelated",
		Labels: map[string]string{fleetv1alpha1.LabelManagedBy: fleetv1alpha1.ManagedByValue, fleetv1alpha1.LabelDatabaseName: "other"}}}
	g.Expect(e.admin.Create(ctx, unrelated)).To(Succeed())
	return db
}

// teardown calls Teardown until it is done. Between calls it stands in for
// kube-controller-manager, which envtest does not run: it removes the
// pvc-protection finalizer of deleted claims once no pod uses them.
func teardown(t *testing.T, ctx context.Context, e *env, db *fleetv1alpha1.Database, policy fleetv1alpha1.DeletionPolicy) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		done, err := member.Teardown(ctx, e.counted, member.Owner{Namespace: db.Namespace, Name: db.Name}, policy, nil)
		if err != nil {
			t.Fatalf("Teardown: %v", err)
		}
		if done {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("Teardown %s not done after 30s", policy)
		}
		pvcs := &corev1.PersistentVolumeClaimList{}
		if err := e.admin.List(ctx, pvcs, client.InNamespace(db.Namespace)); err != nil {
			t.Fatal(err)
		}
		for i := range pvcs.Items {
			pvc := &pvcs.Items[i]
			if pvc.DeletionTimestamp != nil && len(pvc.Finalizers) > 0 {
				pvc.Finalizers = nil
				if err := e.admin.Update(ctx, pvc); err != nil && !apierrors.IsNotFound(err) {
					t.Fatal(err)
				}
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// inventory lists "Kind/name" of what is left in namespace, with fleetdb's labels if any.
func inventory(t *testing.T, ctx context.Context, e *env, namespace string) map[string]map[string]string {
	t.Helper()
	out := map[string]map[string]string{}
	add := func(kind string, objs []client.Object) {
		for _, o := range objs {
			if o.GetName() == "kube-root-ca.crt" {
				continue
			}
			fleet := map[string]string{}
			for k, v := range o.GetLabels() {
				if strings.HasPrefix(k, "fleetdb.io/") || k == fleetv1alpha1.LabelManagedBy {
					fleet[k] = v
				}
			}
			out[kind+"/"+o.GetName()] = fleet
		}
	}
	var (
		stss = &appsv1.StatefulSetList{}
		pdbs = &policyv1.PodDisruptionBudgetList{}
		svcs = &corev1.ServiceList{}
		cms  = &corev1.ConfigMapList{}
		secs = &corev1.SecretList{}
		pvcs = &corev1.PersistentVolumeClaimList{}
	)
	for _, l := range []client.ObjectList{stss, pdbs, svcs, cms, secs, pvcs} {
		if err := e.admin.List(ctx, l, client.InNamespace(namespace)); err != nil {
			t.Fatal(err)
		}
	}
	add("StatefulSet", objects(stss.Items))
	add("PodDisruptionBudget", objects(pdbs.Items))
	add("Service", objects(svcs.Items))
	add("ConfigMap", objects(cms.Items))
	add("Secret", objects(secs.Items))
	add("PersistentVolumeClaim", objects(pvcs.Items))
	return out
}

func objects[T any, PT interface {
	*T
	client.Object
}](items []T) []client.Object {
	out := make([]client.Object, 0, len(items))
	for i := range items {
		out = append(out, PT(&items[i]))
	}
	return out
}

func keys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

func testTeardownDelete(t *testing.T, ctx context.Context, e *env) {
	g := NewWithT(t)
	db := arrangeTeardown(t, ctx, e, "it-delete")
	teardown(t, ctx, e, db, fleetv1alpha1.DeletionPolicyDelete)

	g.Expect(keys(inventory(t, ctx, e, "it-delete"))).To(Equal([]string{"ConfigMap/unrelated"}))
	g.Expect(e.admin.Get(ctx, key("", "it-delete"), &corev1.Namespace{})).To(Succeed(), "the namespace is never deleted")

	// Done stays done, without a write.
	e.writes.Take()
	done, err := member.Teardown(ctx, e.counted, member.Owner{Namespace: db.Namespace, Name: db.Name}, fleetv1alpha1.DeletionPolicyDelete, nil)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(done).To(BeTrue())
	g.Expect(e.writes.Take()).To(BeEmpty())
}

func testTeardownRetain(t *testing.T, ctx context.Context, e *env) {
	g := NewWithT(t)
	db := arrangeTeardown(t, ctx, e, "it-retain")
	teardown(t, ctx, e, db, fleetv1alpha1.DeletionPolicyRetain)

	left := inventory(t, ctx, e, "it-retain")
	g.Expect(keys(left)).To(Equal([]string{
		"ConfigMap/unrelated",
		"PersistentVolumeClaim/data-orders-0",
		"PersistentVolumeClaim/data-orders-1",
		"Secret/orders-credentials",
	}))
	for _, k := range []string{"PersistentVolumeClaim/data-orders-0", "PersistentVolumeClaim/data-orders-1", "Secret/orders-credentials"} {
		g.Expect(left[k]).To(BeEmpty(), "%s keeps no fleetdb label", k)
	}
	secret := &corev1.Secret{}
	g.Expect(e.admin.Get(ctx, key("it-retain", "orders-credentials"), secret)).To(Succeed())
	g.Expect(secret.Data).To(Equal(testCredentials()), "the data is safe")
}

func testTeardownOrphan(t *testing.T, ctx context.Context, e *env) {
	g := NewWithT(t)
	db := arrangeTeardown(t, ctx, e, "it-orphan")
	before := inventory(t, ctx, e, "it-orphan")
	teardown(t, ctx, e, db, fleetv1alpha1.DeletionPolicyOrphan)

	left := inventory(t, ctx, e, "it-orphan")
	g.Expect(keys(left)).To(Equal(keys(before)), "nothing is deleted")
	for k, l := range left {
		if k == "ConfigMap/unrelated" {
			g.Expect(l).To(Equal(before[k]))
			continue
		}
		g.Expect(l).To(BeEmpty(), "%s keeps no fleetdb label", k)
	}
	// Released objects are no longer fleetdb's: a new Database of the same name conflicts with them.
	_, err := member.Apply(ctx, "m1", e.counted, e.counted, renderFor(t, newDatabase("it-orphan", "orders", 2), ""), member.NewMemo())
	var conflict *member.ConflictError
	g.Expect(errors.As(err, &conflict)).To(BeTrue(), "got %v", err)
}
