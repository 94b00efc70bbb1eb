package member_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleetv1alpha1 "github.com/fleetdb/fleetdb/apis/v1alpha1"
	"github.com/fleetdb/fleetdb/member"
	"github.com/fleetdb/fleetdb/test/fleet"
)

// TestCNPGIntegration runs the CloudNativePG backend against a member with
// CloudNativePG's real Cluster CRD (its API server validates every Cluster
// fleetdb writes against CloudNativePG's schema) and a member without it.
// No CloudNativePG operator runs: the tests write the Cluster status and the
// volume claims CloudNativePG would.
func TestCNPGIntegration(t *testing.T) {
	if testing.Short() {
		t.Skip("integration test: starts kube-apiservers")
	}
	f := fleet.Start(t, fleet.Options{Members: []string{"cnpg", "bare"}, WithoutCNPG: []string{"bare"}})
	ctx := fleet.Context(t)
	c, bare := f.Member("cnpg").Client, f.Member("bare").Client
	t.Run("apply writes only fleetdb's fields, then nothing", func(t *testing.T) { testCNPGApply(t, ctx, c) })
	t.Run("drift on the Cluster is put back", func(t *testing.T) { testCNPGDrift(t, ctx, c) })
	t.Run("observe reads CloudNativePG's status", func(t *testing.T) { testCNPGObserve(t, ctx, c) })
	t.Run("a member without CloudNativePG", func(t *testing.T) { testCNPGMissing(t, ctx, bare) })
	t.Run("teardown Delete", func(t *testing.T) { testCNPGDelete(t, ctx, c) })
	t.Run("teardown Retain keeps volumes a new Cluster restores from", func(t *testing.T) { testCNPGRetain(t, ctx, c) })
	t.Run("teardown Retain of an unhealthy Cluster CloudNativePG will not hibernate", func(t *testing.T) { testCNPGRetainUnhealthy(t, ctx, c) })
	t.Run("teardown Orphan", func(t *testing.T) { testCNPGOrphan(t, ctx, c) })
	t.Run("the policy playing CloudNativePG's webhook refuses what it refuses", func(t *testing.T) { testCNPGWebhookPolicy(t, ctx, c) })
}

func cnpgDatabase(namespace string, replicas int32) *fleetv1alpha1.Database {
	return &fleetv1alpha1.Database{
		ObjectMeta: metav1.ObjectMeta{Name: "orders", Namespace: namespace, UID: types.UID(namespace + "-uid-1"), Generation: 1},
		Spec: fleetv1alpha1.DatabaseSpec{
			Engine:   fleetv1alpha1.EnginePostgres,
			Replicas: replicas,
			Storage:  fleetv1alpha1.StorageSpec{Size: resource.MustParse("1Gi")},
			Resources: &fleetv1alpha1.ResourceSpec{
				Requests: &fleetv1alpha1.ComputeResources{CPU: ptr(resource.MustParse("250m")), Memory: ptr(resource.MustParse("512Mi"))},
			},
		},
	}
}

func cnpgApply(t *testing.T, ctx context.Context, c client.Client, db *fleetv1alpha1.Database, memo *member.Memo) member.ApplyResult {
	t.Helper()
	res, err := member.Apply(ctx, "cnpg", c, c, renderFor(t, db, testTraceparent), memo)
	if err != nil {
		t.Fatalf("Apply: %v", err)
	}
	return res
}

func getCluster(t *testing.T, ctx context.Context, c client.Client, namespace string) *unstructured.Unstructured {
	t.Helper()
	u := member.NewCNPGCluster()
	if err := c.Get(ctx, key(namespace, "orders"), u); err != nil {
		t.Fatalf("reading the Cluster: %v", err)
	}
	return u
}

func testCNPGApply(t *testing.T, ctx context.Context, c client.Client) {
	g := NewWithT(t)
	db := cnpgDatabase("cnpg-apply", 3)
	memo := member.NewMemo()
	res := cnpgApply(t, ctx, c, db, memo)
	g.Expect(res.Applied).To(ConsistOf(
		"Namespace/cnpg-apply", "Secret/cnpg-apply/orders-credentials", "Service/cnpg-apply/orders", "Cluster/cnpg-apply/orders"))

	u := getCluster(t, ctx, c, "cnpg-apply")
	spec, _, _ := unstructured.NestedMap(u.Object, "spec")
	g.Expect(spec).To(HaveKeyWithValue("instances", BeEquivalentTo(3)))
	g.Expect(spec).To(HaveKeyWithValue("imageName", "ghcr.io/cloudnative-pg/postgresql:17.10-system-trixie"))
	g.Expect(spec["bootstrap"]).To(Equal(map[string]any{"initdb": map[string]any{
		"database": "app", "owner": "app", "secret": map[string]any{"name": "orders-credentials"}}}))
	g.Expect(spec["storage"]).To(HaveKeyWithValue("size", "1Gi"))
	g.Expect(u.GetLabels()).To(HaveKeyWithValue(fleetv1alpha1.LabelManagedBy, fleetv1alpha1.ManagedByValue))
	g.Expect(u.GetAnnotations()).To(HaveKeyWithValue(fleetv1alpha1.AnnotationTraceparent, testTraceparent))
	// fleetdb owns exactly the spec fields it sets, nothing CloudNativePG defaults.
	var owned map[string]any
	for _, mf := range u.GetManagedFields() {
		if mf.Manager == fleetv1alpha1.FieldManager && mf.Operation == metav1.ManagedFieldsOperationApply {
			g.Expect(mf.FieldsV1).NotTo(BeNil())
			g.Expect(json.Unmarshal(mf.FieldsV1.GetRawBytes(), &owned)).To(Succeed())
		}
	}
	g.Expect(keys(owned["f:spec"].(map[string]any))).To(Equal([]string{"f:bootstrap", "f:imageName", "f:instances", "f:resources", "f:storage"}))

	s := &corev1.Secret{}
	g.Expect(c.Get(ctx, key("cnpg-apply", "orders-credentials"), s)).To(Succeed())
	g.Expect(s.Type).To(Equal(corev1.SecretTypeBasicAuth), "CloudNativePG's initdb wants a basic-auth Secret")
	svc := &corev1.Service{}
	g.Expect(c.Get(ctx, key("cnpg-apply", "orders"), svc)).To(Succeed())
	g.Expect(svc.Spec.Selector).To(Equal(map[string]string{"cnpg.io/cluster": "orders", "cnpg.io/instanceRole": "primary"}))

	// Applied again: nothing is written.
	again := cnpgApply(t, ctx, c, db, memo)
	g.Expect(again.Applied).To(BeEmpty())

	// A restarted hub (empty memo, new trace) writes nothing either.
	rv := getCluster(t, ctx, c, "cnpg-apply").GetResourceVersion()
	res, err := member.Apply(ctx, "cnpg", c, c, renderFor(t, db, "00-77777777777777777777777777777777-8888888888888888-01"), member.NewMemo())
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(res.Applied).To(BeEmpty())
	g.Expect(getCluster(t, ctx, c, "cnpg-apply").GetResourceVersion()).To(Equal(rv))
}

func testCNPGDrift(t *testing.T, ctx context.Context, c client.Client) {
	g := NewWithT(t)
	db := cnpgDatabase("cnpg-drift", 3)
	memo := member.NewMemo()
	cnpgApply(t, ctx, c, db, memo)
	u := getCluster(t, ctx, c, "cnpg-drift")
	g.Expect(unstructured.SetNestedField(u.Object, int64(1), "spec", "instances")).To(Succeed())
	g.Expect(c.Update(ctx, u)).To(Succeed())

	res := cnpgApply(t, ctx, c, db, memo)
	g.Expect(res.Restored).To(Equal([]string{"Cluster/cnpg-drift/orders"}))
	instances, _, _ := unstructured.NestedInt64(getCluster(t, ctx, c, "cnpg-drift").Object, "spec", "instances")
	g.Expect(instances).To(BeEquivalentTo(3))

	// Drift while the hub was down is put back by the restarted hub.
	u = getCluster(t, ctx, c, "cnpg-drift")
	g.Expect(unstructured.SetNestedField(u.Object, int64(1), "spec", "instances")).To(Succeed())
	g.Expect(c.Update(ctx, u, client.FieldOwner("someone"))).To(Succeed())
	res = cnpgApply(t, ctx, c, db, member.NewMemo())
	g.Expect(res.Applied).To(Equal([]string{"Cluster/cnpg-drift/orders"}))
	instances, _, _ = unstructured.NestedInt64(getCluster(t, ctx, c, "cnpg-drift").Object, "spec", "instances")
	g.Expect(instances).To(BeEquivalentTo(3))
}

func setClusterStatus(t *testing.T, ctx context.Context, c client.Client, namespace string, status map[string]any) {
	t.Helper()
	u := getCluster(t, ctx, c, namespace)
	patch, err := json.Marshal(map[string]any{"status": status})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Status().Patch(ctx, u, client.RawPatch(types.MergePatchType, patch)); err != nil {
		t.Fatalf("writing the Cluster status: %v", err)
	}
}

// defaultImage is the operand image fleetdb renders for postgres 17.
const defaultImage = "ghcr.io/cloudnative-pg/postgresql:17.10-system-trixie"

// healthyStatus is a healthy Cluster's status, CloudNativePG running defaultImage.
func healthyStatus(n int64, extra ...map[string]any) map[string]any {
	return healthyStatusWith(n, defaultImage, extra...)
}

func healthyStatusWith(n int64, image string, extra ...map[string]any) map[string]any {
	conditions := []any{map[string]any{"type": "Ready", "status": "True", "reason": "ClusterIsReady", "message": "Cluster is Ready",
		"lastTransitionTime": "2026-11-30T00:00:00Z"}}
	for _, e := range extra {
		conditions = append(conditions, e)
	}
	return map[string]any{
		"phase": "Cluster in healthy state", "instances": n, "readyInstances": n,
		"currentPrimary": "orders-1", "targetPrimary": "orders-1", "conditions": conditions, "image": image,
	}
}

func testCNPGObserve(t *testing.T, ctx context.Context, c client.Client) {
	g := NewWithT(t)
	db := cnpgDatabase("cnpg-observe", 3)
	st, err := member.Observe(ctx, c, db, "cnpg")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(st.Phase).To(Equal(fleetv1alpha1.ClusterPhasePending))

	cnpgApply(t, ctx, c, db, member.NewMemo())
	setClusterStatus(t, ctx, c, "cnpg-observe", map[string]any{
		"phase": "Setting up primary", "instances": int64(1), "readyInstances": int64(0),
		"conditions": []any{map[string]any{"type": "Ready", "status": "False", "reason": "ClusterIsNotReady",
			"message": "Cluster Is Not Ready", "lastTransitionTime": "2026-11-30T00:00:00Z"}},
	})
	st, err = member.Observe(ctx, c, db, "cnpg")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(st.Phase).To(Equal(fleetv1alpha1.ClusterPhaseProvisioning))
	g.Expect(st.Backend).To(Equal(fleetv1alpha1.BackendCloudNativePG))
	g.Expect(st.Message).To(Equal("CloudNativePG: Setting up primary; 0 of 3 instances ready: Cluster Is Not Ready"))
	g.Expect(st.ObservedGeneration).To(BeZero())

	setClusterStatus(t, ctx, c, "cnpg-observe", healthyStatus(3))
	st, err = member.Observe(ctx, c, db, "cnpg")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(st.Phase).To(Equal(fleetv1alpha1.ClusterPhaseReady), st.Message)
	g.Expect(st.Replicas).To(BeEquivalentTo(3))
	g.Expect(st.ReadyReplicas).To(BeEquivalentTo(3))
	g.Expect(st.Primary).To(Equal("orders-1"))
	g.Expect(st.Version).To(Equal("17.10"))
	g.Expect(st.ObservedGeneration).To(BeEquivalentTo(1))
	g.Expect(st.Endpoint).To(Equal("orders.cnpg-observe.svc:5432"))

	// A new version: CloudNativePG sets no observedGeneration, so the healthy
	// status from before says nothing until it reports the new image taken.
	db.Generation, db.Spec.Version = 2, "18"
	cnpgApply(t, ctx, c, db, member.NewMemo())
	st, err = member.Observe(ctx, c, db, "cnpg")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(st.Phase).To(Equal(fleetv1alpha1.ClusterPhaseProvisioning), "the old healthy status is not the new spec's")
	g.Expect(st.ObservedGeneration).To(BeZero())
	g.Expect(st.Message).To(ContainSubstring("image ghcr.io/cloudnative-pg/postgresql:18.4-system-trixie not taken yet"))
	setClusterStatus(t, ctx, c, "cnpg-observe", healthyStatusWith(3, "ghcr.io/cloudnative-pg/postgresql:18.4-system-trixie"))
	st, err = member.Observe(ctx, c, db, "cnpg")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(st.Phase).To(Equal(fleetv1alpha1.ClusterPhaseReady), st.Message)
	g.Expect(st.ObservedGeneration).To(BeEquivalentTo(2))
	g.Expect(st.Version).To(Equal("18.4"))

	// A scale: counted once CloudNativePG reports the instances (status.instances).
	db.Generation, db.Spec.Replicas = 3, 4
	cnpgApply(t, ctx, c, db, member.NewMemo())
	st, err = member.Observe(ctx, c, db, "cnpg")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(st.Phase).To(Equal(fleetv1alpha1.ClusterPhaseProvisioning))
	g.Expect(st.ObservedGeneration).To(BeZero())
}

func testCNPGMissing(t *testing.T, ctx context.Context, bare client.Client) {
	g := NewWithT(t)
	db := cnpgDatabase("cnpg-missing", 3)
	_, err := member.Apply(ctx, "bare", bare, bare, renderFor(t, db, ""), member.NewMemo())
	g.Expect(member.IsBackendMissing(err)).To(BeTrue(), "got %v", err)
	_, err = member.Observe(ctx, bare, db, "bare")
	g.Expect(member.IsBackendMissing(err)).To(BeTrue(), "got %v", err)
	done, err := member.Teardown(ctx, bare, member.Owner{Namespace: db.Namespace, Name: db.Name}, fleetv1alpha1.DeletionPolicyDelete, nil)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(done).To(BeTrue(), "no Cluster API, no Cluster to remove")
}

func testCNPGDelete(t *testing.T, ctx context.Context, c client.Client) {
	g := NewWithT(t)
	db := cnpgDatabase("cnpg-delete", 2)
	cnpgApply(t, ctx, c, db, member.NewMemo())
	cnpgTeardown(t, ctx, c, db, fleetv1alpha1.DeletionPolicyDelete, nil)
	err := c.Get(ctx, key("cnpg-delete", "orders"), member.NewCNPGCluster())
	g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "the Cluster is gone: %v", err)
	err = c.Get(ctx, key("cnpg-delete", "orders-credentials"), &corev1.Secret{})
	g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "the Secret is gone: %v", err)
}

// cnpgTeardown calls Teardown until it is done; between calls, between(n) may
// stand in for CloudNativePG.
func cnpgTeardown(t *testing.T, ctx context.Context, c client.Client, db *fleetv1alpha1.Database, policy fleetv1alpha1.DeletionPolicy, between func(pass int)) {
	t.Helper()
	for pass := 0; pass < 10; pass++ {
		done, err := member.Teardown(ctx, c, member.Owner{Namespace: db.Namespace, Name: db.Name}, policy, nil)
		if err != nil {
			t.Fatalf("Teardown: %v", err)
		}
		if done {
			return
		}
		if between != nil {
			between(pass)
		}
	}
	t.Fatalf("Teardown %s not done after 10 passes", policy)
}

// claims creates the volume claims CloudNativePG makes for a Cluster's
// instances: named <cluster>-<serial>, labelled, annotated with the serial,
// controlled by the Cluster.
func claims(t *testing.T, ctx context.Context, c client.Client, u *unstructured.Unstructured, n int) {
	t.Helper()
	for i := 1; i <= n; i++ {
		pvc := &corev1.PersistentVolumeClaim{
			ObjectMeta: metav1.ObjectMeta{
				Namespace: u.GetNamespace(), Name: fmt.Sprintf("%s-%d", u.GetName(), i),
				Labels:      map[string]string{"cnpg.io/cluster": u.GetName(), "cnpg.io/instanceName": fmt.Sprintf("%s-%d", u.GetName(), i), "cnpg.io/pvcRole": "PG_DATA"},
				Annotations: map[string]string{"cnpg.io/nodeSerial": fmt.Sprint(i), "cnpg.io/pvcStatus": "ready"},
				OwnerReferences: []metav1.OwnerReference{{
					APIVersion: member.CNPGClusterGVK.GroupVersion().String(), Kind: "Cluster", Name: u.GetName(), UID: u.GetUID(),
					Controller: ptr(true), BlockOwnerDeletion: ptr(true),
				}},
			},
			Spec: corev1.PersistentVolumeClaimSpec{
				AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
				Resources:   corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}},
			},
		}
		if err := c.Create(ctx, pvc); err != nil {
			t.Fatalf("creating claim: %v", err)
		}
	}
}

func testCNPGRetain(t *testing.T, ctx context.Context, c client.Client) {
	g := NewWithT(t)
	ns := "cnpg-retain"
	db := cnpgDatabase(ns, 2)
	db.Spec.DeletionPolicy = fleetv1alpha1.DeletionPolicyRetain
	cnpgApply(t, ctx, c, db, member.NewMemo())
	setClusterStatus(t, ctx, c, ns, healthyStatus(2))
	old := getCluster(t, ctx, c, ns)
	claims(t, ctx, c, old, 2)
	claimUIDs := map[string]types.UID{}

	cnpgTeardown(t, ctx, c, db, fleetv1alpha1.DeletionPolicyRetain, func(pass int) {
		u := member.NewCNPGCluster()
		if err := c.Get(ctx, key(ns, "orders"), u); err != nil {
			return
		}
		if pass == 0 {
			// First the Cluster is hibernated, nothing else is touched yet.
			g.Expect(u.GetAnnotations()).To(HaveKeyWithValue("cnpg.io/hibernation", "on"))
			pvc := &corev1.PersistentVolumeClaim{}
			g.Expect(c.Get(ctx, key(ns, "orders-1"), pvc)).To(Succeed())
			g.Expect(pvc.OwnerReferences).To(HaveLen(1), "claims keep their owner until the instances stopped")
			// CloudNativePG stops the instances.
			setClusterStatus(t, ctx, c, ns, healthyStatus(2, map[string]any{"type": "cnpg.io/hibernation", "status": "True",
				"reason": "Hibernated", "message": "Cluster has been hibernated", "lastTransitionTime": "2026-11-30T00:00:00Z"}))
		}
	})
	err := c.Get(ctx, key(ns, "orders"), member.NewCNPGCluster())
	g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "the Cluster is deleted: %v", err)
	for i := 1; i <= 2; i++ {
		pvc := &corev1.PersistentVolumeClaim{}
		g.Expect(c.Get(ctx, key(ns, fmt.Sprintf("orders-%d", i)), pvc)).To(Succeed(), "the claim survives")
		g.Expect(pvc.OwnerReferences).To(BeEmpty(), "no owner: the garbage collector leaves it")
		claimUIDs[pvc.Name] = pvc.UID
	}
	secret := &corev1.Secret{}
	g.Expect(c.Get(ctx, key(ns, "orders-credentials"), secret)).To(Succeed(), "the credentials are kept")
	g.Expect(secret.Labels).NotTo(HaveKey(fleetv1alpha1.LabelManagedBy))

	// A Database created again under the name (new UID; the hub recovers the
	// retained password, never writes another over it) takes the retained Secret over and gets a Cluster of the same name in
	// the same namespace, with the claims as CloudNativePG restores a Cluster
	// from: labelled cnpg.io/cluster=<name>, with the serial annotation and
	// no owner reference (getOrphanPVCs in CloudNativePG's cluster_restore.go).
	again := cnpgDatabase(ns, 2)
	again.UID = "cnpg-retain-uid-2"
	again.Spec.DeletionPolicy = fleetv1alpha1.DeletionPolicyRetain
	objs, err := member.Render(member.Params{Database: again, Cluster: "cnpg", Credentials: map[string][]byte{
		member.CredentialsUsernameKey: []byte("app"), member.CredentialsPasswordKey: secret.Data[member.CredentialsPasswordKey]}})
	g.Expect(err).NotTo(HaveOccurred())
	_, err = member.Apply(ctx, "cnpg", c, c, objs, member.NewMemo())
	g.Expect(err).NotTo(HaveOccurred())
	recreated := getCluster(t, ctx, c, ns)
	g.Expect(recreated.GetUID()).NotTo(Equal(old.GetUID()))
	g.Expect(recreated.GetAnnotations()).NotTo(HaveKey("cnpg.io/hibernation"), "the new Cluster starts")
	latest, _, _ := unstructured.NestedInt64(recreated.Object, "status", "latestGeneratedNode")
	g.Expect(latest).To(BeZero(), "a new Cluster: CloudNativePG looks for orphan claims")
	pvcs := &corev1.PersistentVolumeClaimList{}
	g.Expect(c.List(ctx, pvcs, client.InNamespace(ns), client.MatchingLabels{"cnpg.io/cluster": recreated.GetName()})).To(Succeed())
	g.Expect(pvcs.Items).To(HaveLen(2))
	for _, pvc := range pvcs.Items {
		g.Expect(pvc.UID).To(Equal(claimUIDs[pvc.Name]), "the same claims")
		g.Expect(pvc.OwnerReferences).To(BeEmpty())
		g.Expect(pvc.Annotations).To(HaveKey("cnpg.io/nodeSerial"))
	}
	kept := string(secret.Data[member.CredentialsPasswordKey])
	g.Expect(c.Get(ctx, key(ns, "orders-credentials"), secret)).To(Succeed())
	g.Expect(secret.Labels).To(HaveKeyWithValue(fleetv1alpha1.LabelDatabaseUID, "cnpg-retain-uid-2"), "the retained Secret is taken over")
	g.Expect(string(secret.Data[member.CredentialsPasswordKey])).To(Equal(kept), "the retained password is kept")

	// Another password over the retained one is refused (issue 10: never
	// force a different password over a Secret this Database did not write).
	other := cnpgDatabase(ns, 2)
	other.UID = "cnpg-retain-uid-3"
	objs, err = member.Render(member.Params{Database: other, Cluster: "cnpg", Credentials: map[string][]byte{
		member.CredentialsUsernameKey: []byte("app"), member.CredentialsPasswordKey: []byte("another-password")}})
	g.Expect(err).NotTo(HaveOccurred())
	_, err = member.Apply(ctx, "cnpg", c, c, objs, member.NewMemo())
	var conflict *member.ConflictError
	g.Expect(errors.As(err, &conflict)).To(BeTrue(), "a different password is a conflict: %v", err)
}

// testCNPGRetainUnhealthy: since v1.28.2 CloudNativePG answers the
// hibernation annotation on an unhealthy Cluster with the cnpg.io/hibernation
// condition False, reason WaitingForHealthy (EnrichStatus in
// pkg/reconciler/hibernation/status.go, v1.30.0): hibernation has not
// started, and the Retain teardown goes on without it (claims released, the
// Cluster deleted). While the reason says the instances are being stopped
// (DeletingPods) it waits, whatever the phase.
func testCNPGRetainUnhealthy(t *testing.T, ctx context.Context, c client.Client) {
	g := NewWithT(t)
	ns := "cnpg-retain-unhealthy"
	db := cnpgDatabase(ns, 2)
	db.Spec.DeletionPolicy = fleetv1alpha1.DeletionPolicyRetain
	cnpgApply(t, ctx, c, db, member.NewMemo())
	condition := func(status, reason string) map[string]any {
		return map[string]any{"type": "cnpg.io/hibernation", "status": status, "reason": reason,
			"message": reason, "lastTransitionTime": "2026-11-30T00:00:00Z"}
	}
	unhealthy := func(extra map[string]any) map[string]any {
		return map[string]any{"phase": "Setting up primary", "instances": int64(2), "readyInstances": int64(0),
			"conditions": []any{map[string]any{"type": "Ready", "status": "False", "reason": "ClusterIsNotReady",
				"message": "Cluster Is Not Ready", "lastTransitionTime": "2026-11-30T00:00:00Z"}, extra}}
	}
	claims(t, ctx, c, getCluster(t, ctx, c, ns), 2)
	owner := member.Owner{Namespace: ns, Name: db.Name}

	// The annotation first.
	done, err := member.Teardown(ctx, c, owner, fleetv1alpha1.DeletionPolicyRetain, nil)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(done).To(BeFalse())
	g.Expect(getCluster(t, ctx, c, ns).GetAnnotations()).To(HaveKeyWithValue("cnpg.io/hibernation", "on"))

	// Stopping the instances: wait, the claims keep their owner.
	setClusterStatus(t, ctx, c, ns, unhealthy(condition("False", "DeletingPods")))
	for range 3 {
		done, err = member.Teardown(ctx, c, owner, fleetv1alpha1.DeletionPolicyRetain, nil)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(done).To(BeFalse())
	}
	pvc := &corev1.PersistentVolumeClaim{}
	g.Expect(c.Get(ctx, key(ns, "orders-1"), pvc)).To(Succeed())
	g.Expect(pvc.OwnerReferences).To(HaveLen(1), "claims keep their owner while the instances stop")
	g.Expect(getCluster(t, ctx, c, ns).GetDeletionTimestamp()).To(BeNil())

	// WaitingForHealthy: hibernation never starts; the teardown goes on.
	setClusterStatus(t, ctx, c, ns, unhealthy(condition("False", "WaitingForHealthy")))
	cnpgTeardown(t, ctx, c, db, fleetv1alpha1.DeletionPolicyRetain, nil)
	err = c.Get(ctx, key(ns, "orders"), member.NewCNPGCluster())
	g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "the Cluster is deleted: %v", err)
	for i := 1; i <= 2; i++ {
		g.Expect(c.Get(ctx, key(ns, fmt.Sprintf("orders-%d", i)), pvc)).To(Succeed(), "the claim survives")
		g.Expect(pvc.OwnerReferences).To(BeEmpty())
	}
}

func testCNPGOrphan(t *testing.T, ctx context.Context, c client.Client) {
	g := NewWithT(t)
	db := cnpgDatabase("cnpg-orphan", 2)
	cnpgApply(t, ctx, c, db, member.NewMemo())
	cnpgTeardown(t, ctx, c, db, fleetv1alpha1.DeletionPolicyOrphan, nil)
	u := getCluster(t, ctx, c, "cnpg-orphan")
	g.Expect(u.GetDeletionTimestamp()).To(BeNil(), "the Cluster keeps running")
	g.Expect(u.GetLabels()).NotTo(HaveKey(fleetv1alpha1.LabelManagedBy))
	// No longer fleetdb's: a new Database of that name conflicts with it.
	_, err := member.Apply(ctx, "cnpg", c, c, renderFor(t, db, ""), member.NewMemo())
	var conflict *member.ConflictError
	g.Expect(errors.As(err, &conflict)).To(BeTrue(), "got %v", err)
}

// testCNPGWebhookPolicy checks the simulator itself: the admission policy
// installed on the test members (hack/kwok/cnpg-webhook-policy.yaml) refuses
// what CloudNativePG v1.30.0's webhook refuses of the fields fleetdb writes
// (internal/webhook/v1/cluster_webhook.go) and accepts the rest.
func testCNPGWebhookPolicy(t *testing.T, ctx context.Context, c client.Client) {
	g := NewWithT(t)
	ns := "cnpg-webhook"
	g.Expect(c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})).To(Succeed())
	cluster := func(name string, spec map[string]any) *unstructured.Unstructured {
		u := member.NewCNPGCluster()
		u.SetNamespace(ns)
		u.SetName(name)
		base := map[string]any{"instances": int64(1), "storage": map[string]any{"size": "1Gi"},
			"imageName": "ghcr.io/cloudnative-pg/postgresql:17.10-system-trixie"}
		for k, v := range spec {
			base[k] = v
		}
		u.Object["spec"] = base
		return u
	}
	peers := []any{map[string]any{"name": "a", "connectionParameters": map[string]any{"host": "a"}},
		map[string]any{"name": "b", "connectionParameters": map[string]any{"host": "b"}}}
	refused := map[string]map[string]any{
		"serverAltDNSNames beside serverTLSSecret": {"certificates": map[string]any{
			"serverTLSSecret": "s", "serverCASecret": "ca", "serverAltDNSNames": []any{"h"}}},
		"serverTLSSecret without serverCASecret":      {"certificates": map[string]any{"serverTLSSecret": "s"}},
		"replicationTLSSecret without clientCASecret": {"certificates": map[string]any{"replicationTLSSecret": "r"}},
		"a replica created with initdb": {"externalClusters": peers, "replica": map[string]any{"self": "b", "primary": "a", "source": "a"},
			"bootstrap": map[string]any{"initdb": map[string]any{"database": "app", "owner": "app"}}},
		"a source that is no external cluster": {"externalClusters": peers, "replica": map[string]any{"self": "a", "primary": "a", "source": "c"}},
		"enabled beside primary":               {"externalClusters": peers, "replica": map[string]any{"enabled": false, "primary": "a", "source": "b"}},
		"a promotion token on a replica": {"externalClusters": peers, "replica": map[string]any{"self": "b", "primary": "a", "source": "a", "promotionToken": "t"},
			"bootstrap": map[string]any{"pg_basebackup": map[string]any{"source": "a"}}},
	}
	for name, spec := range refused {
		err := c.Create(ctx, cluster("refused", spec), client.DryRunAll)
		g.Expect(apierrors.IsInvalid(err)).To(BeTrue(), "%s: got %v", name, err)
	}
	accepted := cluster("accepted", map[string]any{
		"externalClusters": peers, "replica": map[string]any{"self": "a", "primary": "a", "source": "b"},
		"certificates": map[string]any{"serverTLSSecret": "s", "serverCASecret": "ca", "replicationTLSSecret": "r", "clientCASecret": "ca"},
	})
	g.Expect(c.Create(ctx, accepted)).To(Succeed())
	status := map[string]any{"pgDataImageInfo": map[string]any{"image": "ghcr.io/cloudnative-pg/postgresql:17.10-system-trixie", "majorVersion": int64(17)},
		"switchReplicaClusterStatus": map[string]any{"inProgress": true}}
	patch, _ := json.Marshal(map[string]any{"status": status})
	g.Expect(c.Status().Patch(ctx, accepted, client.RawPatch(types.MergePatchType, patch))).To(Succeed())
	update := func(mutate func(spec map[string]any)) error {
		u := member.NewCNPGCluster()
		g.Expect(c.Get(ctx, client.ObjectKeyFromObject(accepted), u)).To(Succeed())
		mutate(u.Object["spec"].(map[string]any))
		return c.Update(ctx, u, client.DryRunAll)
	}
	g.Expect(update(func(s map[string]any) { s["storage"] = map[string]any{"size": "2Gi"} })).To(Succeed(), "storage grows")
	err := update(func(s map[string]any) { s["storage"] = map[string]any{"size": "512Mi"} })
	g.Expect(apierrors.IsInvalid(err)).To(BeTrue(), "storage never shrinks: %v", err)
	err = update(func(s map[string]any) { s["imageName"] = "ghcr.io/cloudnative-pg/postgresql:16.14-system-trixie" })
	g.Expect(apierrors.IsInvalid(err)).To(BeTrue(), "no major downgrade: %v", err)
	g.Expect(update(func(s map[string]any) { s["imageName"] = "ghcr.io/cloudnative-pg/postgresql:18.4-system-trixie" })).To(Succeed(), "a major upgrade")
	err = update(func(s map[string]any) { s["replica"] = map[string]any{"self": "a", "primary": "b", "source": "b"} })
	g.Expect(apierrors.IsInvalid(err)).To(BeTrue(), "no role change while a replica switch is in progress: %v", err)
	patch, _ = json.Marshal(map[string]any{"status": map[string]any{"switchReplicaClusterStatus": map[string]any{"inProgress": false}}})
	g.Expect(c.Status().Patch(ctx, accepted, client.RawPatch(types.MergePatchType, patch))).To(Succeed())
	g.Expect(update(func(s map[string]any) { s["replica"] = map[string]any{"self": "a", "primary": "b", "source": "b"} })).To(Succeed(), "a demotion")
}
