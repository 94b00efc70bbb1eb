package integration

import (
	"fmt"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleetv1alpha1 "github.com/fleetdb/fleetdb/apis/v1alpha1"
	"github.com/fleetdb/fleetdb/member"
)

// testCNPG runs a Database on the CloudNativePG backend (the postgres
// default) on m1 and m2, whose API servers hold CloudNativePG's real Cluster
// CRD, and on m3, which does not; the simulator plays the operator's status.
func testCNPG(t *testing.T, e *env) {
	g := NewWithT(t)
	ns := e.namespace("cnpg")
	g.Expect(e.hub.Create(e.ctx, newCNPGDB(ns, "books", "m1", "m2"))).To(Succeed())
	g.Eventually(func(g Gomega) {
		db := e.getDB(ns, "books")
		g.Expect(db.Annotations).To(HaveKeyWithValue(fleetv1alpha1.AnnotationBackend, "CloudNativePG"), "the backend is recorded")
		g.Expect(db.Status.Phase).To(Equal(fleetv1alpha1.PhaseReady))
		g.Expect(db.Status.ReadySummary).To(Equal("2/2"))
		for _, c := range db.Status.Clusters {
			g.Expect(c.Backend).To(Equal(fleetv1alpha1.BackendCloudNativePG))
			g.Expect(c.ReadyReplicas).To(BeEquivalentTo(2))
			g.Expect(c.Primary).To(Equal("books-1"))
			g.Expect(c.Endpoint).To(Equal("books." + ns + ".svc:5432"))
		}
	}).WithTimeout(eventually).WithPolling(poll).Should(Succeed())
	for _, m := range []string{"m1", "m2"} {
		g.Expect(clusterInstances(e, m, ns, "books")).To(BeEquivalentTo(2))
	}

	// At rest: no writes (the Cluster watch and the probes' discovery only read).
	e.settle(g)
	e.writes.Reset()
	time.Sleep(3 * time.Second)
	g.Expect(e.hubWritesIn(ns)).To(BeEmpty(), "writes at rest")

	// Drift on a field fleetdb owns is put back and reported.
	u := member.NewCNPGCluster()
	g.Expect(e.member("m1").Get(e.ctx, client.ObjectKey{Namespace: ns, Name: "books"}, u)).To(Succeed())
	g.Expect(unstructured.SetNestedField(u.Object, int64(5), "spec", "instances")).To(Succeed())
	g.Expect(e.member("m1").Update(e.ctx, u)).To(Succeed())
	g.Eventually(func() int64 { return clusterInstances(e, "m1", ns, "books") }).WithTimeout(eventually).WithPolling(poll).Should(BeEquivalentTo(2))
	g.Eventually(e.eventSeen(ns, "DriftCorrected", "m1")).WithTimeout(eventually).WithPolling(poll).Should(Succeed())

	// Node maintenance in m1 (MemberCluster spec.nodeMaintenance): its
	// Cluster gets a maintenance window that reuses the volumes, m2's none;
	// switched off, the window goes.
	window := func(m string) any {
		u := member.NewCNPGCluster()
		g.Expect(e.member(m).Get(e.ctx, client.ObjectKey{Namespace: ns, Name: "books"}, u)).To(Succeed())
		w, _, _ := unstructured.NestedFieldNoCopy(u.Object, "spec", "nodeMaintenanceWindow")
		return w
	}
	maintain := func(on bool) {
		var mc fleetv1alpha1.MemberCluster
		g.Expect(e.hub.Get(e.ctx, client.ObjectKey{Name: "m1"}, &mc)).To(Succeed())
		patch := client.MergeFrom(mc.DeepCopy())
		mc.Spec.NodeMaintenance = &fleetv1alpha1.NodeMaintenance{InProgress: on}
		g.Expect(e.hub.Patch(e.ctx, &mc, patch)).To(Succeed())
	}
	maintain(true)
	defer maintain(false)
	g.Eventually(func() any { return window("m1") }).WithTimeout(eventually).WithPolling(poll).
		Should(Equal(map[string]any{"inProgress": true, "reusePVC": true}))
	g.Expect(window("m2")).To(BeNil(), "m2 is not in maintenance")
	maintain(false)
	g.Eventually(func() any { return window("m1") }).WithTimeout(eventually).WithPolling(poll).Should(BeNil())

	// m3 serves no Cluster API: it says so, nothing is written there, the rest runs.
	g.Expect(e.hub.Create(e.ctx, newCNPGDB(ns, "maps", "m1", "m3"))).To(Succeed())
	g.Eventually(func(g Gomega) {
		db := e.getDB(ns, "maps")
		g.Expect(clusterEntry(db, "m1").Phase).To(Equal(fleetv1alpha1.ClusterPhaseReady))
		m3 := clusterEntry(db, "m3")
		g.Expect(m3.Phase).To(Equal(fleetv1alpha1.ClusterPhaseDegraded))
		g.Expect(m3.Reason).To(Equal(fleetv1alpha1.ReasonBackendMissing))
		g.Expect(m3.Message).To(ContainSubstring("CloudNativePG"))
		g.Expect(condition(db.Status.Conditions, fleetv1alpha1.ConditionDegraded).Message).To(ContainSubstring("m3"))
	}).WithTimeout(eventually).WithPolling(poll).Should(Succeed())
	err := e.member("m3").Get(e.ctx, client.ObjectKey{Namespace: ns, Name: "maps-credentials"}, &corev1.Secret{})
	g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "nothing reaches a member without the backend: %v", err)
	var mc fleetv1alpha1.MemberCluster
	g.Expect(e.hub.Get(e.ctx, client.ObjectKey{Name: "m3"}, &mc)).To(Succeed())
	g.Expect(mc.Status.Backends).To(Equal([]fleetv1alpha1.Backend{fleetv1alpha1.BackendStatefulSet}))
	g.Expect(e.hub.Get(e.ctx, client.ObjectKey{Name: "m1"}, &mc)).To(Succeed())
	g.Expect(mc.Status.Backends).To(ConsistOf(fleetv1alpha1.BackendStatefulSet, fleetv1alpha1.BackendCloudNativePG))

	// Delete: the Cluster goes; m3 had nothing.
	g.Expect(e.hub.Delete(e.ctx, e.getDB(ns, "maps"))).To(Succeed())
	g.Eventually(func() bool {
		return apierrors.IsNotFound(e.hub.Get(e.ctx, client.ObjectKey{Namespace: ns, Name: "maps"}, &fleetv1alpha1.Database{}))
	}).WithTimeout(eventually).WithPolling(poll).Should(BeTrue())
	g.Expect(clusterInstances(e, "m1", ns, "maps")).To(BeEquivalentTo(-1))

	testCNPGRetain(t, e, ns)
}

// testCNPGRetain deletes "books" with deletionPolicy Retain while m1 holds
// the volume claims CloudNativePG made, then creates it again: the claims
// survive, unowned, as CloudNativePG restores a Cluster of that name from.
func testCNPGRetain(t *testing.T, e *env, ns string) {
	g := NewWithT(t)
	db := e.getDB(ns, "books")
	db.Spec.DeletionPolicy = fleetv1alpha1.DeletionPolicyRetain
	g.Expect(e.hub.Update(e.ctx, db)).To(Succeed())
	cluster := member.NewCNPGCluster()
	g.Expect(e.member("m1").Get(e.ctx, client.ObjectKey{Namespace: ns, Name: "books"}, cluster)).To(Succeed())
	for i := 1; i <= 2; i++ {
		g.Expect(e.member("m1").Create(e.ctx, &corev1.PersistentVolumeClaim{
			ObjectMeta: metav1.ObjectMeta{
				Namespace: ns, Name: fmt.Sprintf("books-%d", i),
				Labels:      map[string]string{"cnpg.io/cluster": "books"},
				Annotations: map[string]string{"cnpg.io/nodeSerial": fmt.Sprint(i)},
				OwnerReferences: []metav1.OwnerReference{{APIVersion: "postgresql.cnpg.io/v1", Kind: "Cluster", Name: "books",
					UID: cluster.GetUID(), Controller: new(true)}},
			},
			Spec: corev1.PersistentVolumeClaimSpec{
				AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
				Resources:   corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}},
			},
		})).To(Succeed())
	}
	g.Eventually(func(g Gomega) {
		u := member.NewCNPGCluster()
		g.Expect(e.member("m1").Get(e.ctx, client.ObjectKey{Namespace: ns, Name: "books"}, u)).To(Succeed())
		g.Expect(u.GetAnnotations()).To(HaveKeyWithValue(fleetv1alpha1.AnnotationDeletionPolicy, "Retain"))
	}).WithTimeout(eventually).WithPolling(poll).Should(Succeed())

	g.Expect(e.hub.Delete(e.ctx, e.getDB(ns, "books"))).To(Succeed())
	g.Eventually(func() bool {
		return apierrors.IsNotFound(e.hub.Get(e.ctx, client.ObjectKey{Namespace: ns, Name: "books"}, &fleetv1alpha1.Database{}))
	}).WithTimeout(eventually).WithPolling(poll).Should(BeTrue())
	g.Expect(clusterInstances(e, "m1", ns, "books")).To(BeEquivalentTo(-1), "the Cluster is deleted")
	uids := map[string]string{}
	for i := 1; i <= 2; i++ {
		var pvc corev1.PersistentVolumeClaim
		g.Expect(e.member("m1").Get(e.ctx, client.ObjectKey{Namespace: ns, Name: fmt.Sprintf("books-%d", i)}, &pvc)).To(Succeed())
		g.Expect(pvc.OwnerReferences).To(BeEmpty())
		uids[pvc.Name] = string(pvc.UID)
	}

	// Created again: Ready, with the same claims waiting, unowned, for CloudNativePG.
	g.Expect(e.hub.Create(e.ctx, newCNPGDB(ns, "books", "m1", "m2"))).To(Succeed())
	g.Eventually(func(g Gomega) {
		db := e.getDB(ns, "books")
		g.Expect(db.Status.Phase).To(Equal(fleetv1alpha1.PhaseReady), "%+v", db.Status.Clusters)
	}).WithTimeout(eventually).WithPolling(poll).Should(Succeed())
	for name, uid := range uids {
		var pvc corev1.PersistentVolumeClaim
		g.Expect(e.member("m1").Get(e.ctx, client.ObjectKey{Namespace: ns, Name: name}, &pvc)).To(Succeed())
		g.Expect(string(pvc.UID)).To(Equal(uid))
		g.Expect(pvc.Labels).To(HaveKeyWithValue("cnpg.io/cluster", "books"))
		g.Expect(pvc.OwnerReferences).To(BeEmpty())
	}
}

// testLegacyBackend: a postgres Database stored before backends existed (no
// spec.backend, no backend annotation, the teardown finalizer already on)
// waits while no member shows what it runs (BackendUnknown: the hub never
// guesses), then keeps running on the StatefulSet backend its member runs
// (read there and recorded), and asking it to move is refused.
func testLegacyBackend(t *testing.T, e *env) {
	g := NewWithT(t)
	ns := e.namespace("legacy")
	db := newDB(ns, "old", "m1")
	db.Spec.Backend = ""
	db.Finalizers = []string{fleetv1alpha1.TeardownFinalizer}
	g.Expect(e.hub.Create(e.ctx, db)).To(Succeed())
	g.Eventually(func(g Gomega) {
		db := e.getDB(ns, "old")
		ready := condition(db.Status.Conditions, fleetv1alpha1.ConditionReady)
		g.Expect(ready.Reason).To(Equal(fleetv1alpha1.ReasonBackendUnknown))
		g.Expect(ready.Message).To(ContainSubstring("no member runs this Database"))
	}).WithTimeout(eventually).WithPolling(poll).Should(Succeed())
	g.Expect(e.member("m1").Get(e.ctx, client.ObjectKey{Namespace: ns, Name: "old"}, &appsv1.StatefulSet{})).NotTo(Succeed(), "nothing written while unknown")
	g.Expect(clusterInstances(e, "m1", ns, "old")).To(BeEquivalentTo(-1), "no Cluster")

	// What the earlier fleetdb left running in m1.
	e.legacyStatefulSet(g, "m1", e.getDB(ns, "old"))
	g.Eventually(func(g Gomega) {
		db := e.getDB(ns, "old")
		g.Expect(db.Status.Phase).To(Equal(fleetv1alpha1.PhaseReady), "%+v", db.Status.Clusters)
		g.Expect(clusterEntry(db, "m1").Backend).To(Equal(fleetv1alpha1.BackendStatefulSet))
		g.Expect(db.Annotations).To(HaveKeyWithValue(fleetv1alpha1.AnnotationBackend, "StatefulSet"), "read in m1 and recorded")
	}).WithTimeout(eventually).WithPolling(poll).Should(Succeed())
	g.Expect(clusterInstances(e, "m1", ns, "old")).To(BeEquivalentTo(-1), "no Cluster")

	db = e.getDB(ns, "old")
	db.Spec.Backend = fleetv1alpha1.BackendCloudNativePG
	g.Expect(e.hub.Update(e.ctx, db)).To(Succeed())
	g.Eventually(func(g Gomega) {
		db := e.getDB(ns, "old")
		g.Expect(db.Status.Phase).To(Equal(fleetv1alpha1.PhaseFailed))
		stalled := condition(db.Status.Conditions, fleetv1alpha1.ConditionStalled)
		g.Expect(stalled.Reason).To(Equal(fleetv1alpha1.ReasonBackendChanged))
	}).WithTimeout(eventually).WithPolling(poll).Should(Succeed())
	g.Expect(clusterInstances(e, "m1", ns, "old")).To(BeEquivalentTo(-1), "still no Cluster")
}
