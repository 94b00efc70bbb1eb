package integration

import (
	"testing"

	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleetv1alpha1 "github.com/fleetdb/fleetdb/apis/v1alpha1"
	"github.com/fleetdb/fleetdb/member"
)

// retainOnS1 creates a Database name on s1 with deletionPolicy Retain,
// waits for it to run, makes its data claims (what the StatefulSet or
// CloudNativePG controller would), deletes it and waits for the teardown;
// the hub credentials Secret goes as the garbage collector takes it on a
// real hub. It returns the Database's UID.
func retainOnS1(g Gomega, e *env, db *fleetv1alpha1.Database, claims func() []*corev1.PersistentVolumeClaim) types.UID {
	ns, name := db.Namespace, db.Name
	db.Spec.DeletionPolicy = fleetv1alpha1.DeletionPolicyRetain
	g.Expect(e.hub.Create(e.ctx, db)).To(Succeed())
	e.waitPhase(g, ns, name, fleetv1alpha1.PhaseReady)
	for _, c := range claims() {
		g.Expect(e.member("s1").Create(e.ctx, c)).To(Succeed())
	}
	first := e.getDB(ns, name)
	g.Expect(e.hub.Delete(e.ctx, first)).To(Succeed())
	g.Eventually(func() bool {
		return apierrors.IsNotFound(e.hub.Get(e.ctx, client.ObjectKey{Namespace: ns, Name: name}, &fleetv1alpha1.Database{}))
	}).WithTimeout(eventually).WithPolling(poll).Should(BeTrue())
	g.Expect(client.IgnoreNotFound(e.hub.Delete(e.ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name + "-credentials"}}))).To(Succeed())
	return first.UID
}

// expectRetainedDataFound waits for s1's entry of the Database to show
// RetainedDataFound naming claim and uid, and checks that the workload was
// not created there and the claim not written to.
func expectRetainedDataFound(g Gomega, e *env, ns, name, claim string, uid types.UID, claimRV string, workload client.Object) {
	g.Eventually(func(g Gomega) {
		c := clusterEntry(e.getDB(ns, name), "s1")
		g.Expect(c.Phase).To(Equal(fleetv1alpha1.ClusterPhaseConflict), "%+v", c)
		g.Expect(c.Reason).To(Equal(fleetv1alpha1.ReasonRetainedDataFound))
		g.Expect(c.Message).To(ContainSubstring(claim))
		g.Expect(c.Message).To(ContainSubstring(string(uid)))
		g.Expect(c.Message).To(ContainSubstring(fleetv1alpha1.AnnotationAdoptCredentials))
	}).WithTimeout(eventually).WithPolling(poll).Should(Succeed())
	err := e.member("s1").Get(e.ctx, client.ObjectKey{Namespace: ns, Name: name}, workload)
	g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "the workload was created on the retained claims: %v", err)
	var pvc corev1.PersistentVolumeClaim
	g.Expect(e.member("s1").Get(e.ctx, client.ObjectKey{Namespace: ns, Name: claim}, &pvc)).To(Succeed())
	g.Expect(pvc.ResourceVersion).To(Equal(claimRV), "the retained claim was written to")
}

// adopt sets the adopt annotation on the Database, naming uid.
func adopt(g Gomega, e *env, ns, name string, uid types.UID) {
	db := e.getDB(ns, name)
	patch := client.MergeFrom(db.DeepCopy())
	if db.Annotations == nil {
		db.Annotations = map[string]string{}
	}
	db.Annotations[fleetv1alpha1.AnnotationAdoptCredentials] = string(uid)
	g.Expect(e.hub.Patch(e.ctx, db, patch)).To(Succeed())
}

// testRetainedClaimsUnvouched (issue 42 item 4): the volume claims an
// earlier Database's Retain teardown kept in a member, its credentials
// Secret removed from the member by hand and the hub's Retain record of it
// gone (evicted, or a hub rebuilt), are not started on by a new Database of
// the same name: no StatefulSet there, RetainedDataFound naming the claim
// and its UID, the claim untouched. Told to adopt that UID, it proceeds.
func testRetainedClaimsUnvouched(t *testing.T, e *env) {
	g := NewWithT(t)
	ns := e.namespace("claims-unvouched")
	uid := retainOnS1(g, e, newDB(ns, "kept", "s1"), func() []*corev1.PersistentVolumeClaim {
		return []*corev1.PersistentVolumeClaim{pvcFor(e, "s1", ns, "kept")}
	})
	var claim corev1.PersistentVolumeClaim
	g.Expect(e.member("s1").Get(e.ctx, client.ObjectKey{Namespace: ns, Name: "data-kept-0"}, &claim)).To(Succeed())
	g.Expect(claim.Labels).NotTo(HaveKey(fleetv1alpha1.LabelManagedBy), "released by the teardown")
	g.Expect(claim.Annotations).To(HaveKeyWithValue(fleetv1alpha1.AnnotationReleasedUID, string(uid)))
	// The credentials Secret removed from the member by hand, and the hub's
	// record of the teardown gone.
	g.Expect(e.member("s1").Delete(e.ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "kept-credentials"}})).To(Succeed())
	forgetRetained(g, e, uid)

	g.Expect(e.hub.Create(e.ctx, newDB(ns, "kept", "s1"))).To(Succeed())
	expectRetainedDataFound(g, e, ns, "kept", "data-kept-0", uid, claim.ResourceVersion, &appsv1.StatefulSet{})

	// Told to adopt the earlier UID: the StatefulSet starts on the claim.
	adopt(g, e, ns, "kept", uid)
	e.waitPhase(g, ns, "kept", fleetv1alpha1.PhaseReady)
	g.Expect(e.member("s1").Get(e.ctx, client.ObjectKey{Namespace: ns, Name: "kept"}, &appsv1.StatefulSet{})).To(Succeed())
	var after corev1.PersistentVolumeClaim
	g.Expect(e.member("s1").Get(e.ctx, client.ObjectKey{Namespace: ns, Name: "data-kept-0"}, &after)).To(Succeed())
	g.Expect(after.ResourceVersion).To(Equal(claim.ResourceVersion), "the claim is never written to")
}

// testRetainedClaimsOtherRecord (issue 42 item 4, CloudNativePG): the
// orphan claims a Retain teardown kept for a Cluster in s1 are not started
// on when the hub's newest Retain record of the name is another Database's
// (one torn down in s2 later) and the first one's credentials Secret was
// removed from s1 by hand: no Cluster there, RetainedDataFound. Told to
// adopt the first UID, the Cluster is created.
func testRetainedClaimsOtherRecord(t *testing.T, e *env) {
	g := NewWithT(t)
	ns := e.namespace("claims-other-record")
	uid := retainOnS1(g, e, newCNPGDB(ns, "kept", "s1"), func() []*corev1.PersistentVolumeClaim {
		u := member.NewCNPGCluster()
		g.Expect(e.member("s1").Get(e.ctx, client.ObjectKey{Namespace: ns, Name: "kept"}, u)).To(Succeed())
		return []*corev1.PersistentVolumeClaim{{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "kept-1",
				Labels:      map[string]string{"cnpg.io/cluster": "kept", "cnpg.io/instanceName": "kept-1", "cnpg.io/pvcRole": "PG_DATA"},
				Annotations: map[string]string{"cnpg.io/nodeSerial": "1"},
				OwnerReferences: []metav1.OwnerReference{{APIVersion: member.CNPGClusterGVK.GroupVersion().String(), Kind: "Cluster",
					Name: "kept", UID: u.GetUID(), Controller: ptrTo(true)}},
			},
			Spec: corev1.PersistentVolumeClaimSpec{
				AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
				Resources:   corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}},
			},
		}}
	})
	var claim corev1.PersistentVolumeClaim
	g.Expect(e.member("s1").Get(e.ctx, client.ObjectKey{Namespace: ns, Name: "kept-1"}, &claim)).To(Succeed())
	g.Expect(claim.OwnerReferences).To(BeEmpty(), "released by the teardown")
	g.Expect(claim.Annotations).To(HaveKeyWithValue(fleetv1alpha1.AnnotationReleasedUID, string(uid)))
	g.Expect(e.member("s1").Delete(e.ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "kept-credentials"}})).To(Succeed())
	// A later Database of the name, torn down with Retain in s2: the
	// hub's newest record of the name is that one's.
	retainOnS2(g, e, newCNPGDB(ns, "kept", "s2"))

	g.Expect(e.hub.Create(e.ctx, newCNPGDB(ns, "kept", "s1"))).To(Succeed())
	expectRetainedDataFound(g, e, ns, "kept", "kept-1", uid, claim.ResourceVersion, member.NewCNPGCluster())

	adopt(g, e, ns, "kept", uid)
	g.Eventually(func() int64 { return clusterInstances(e, "s1", ns, "kept") }).WithTimeout(eventually).WithPolling(poll).
		Should(BeNumerically(">", 0), "the Cluster is created once told")
}

// retainOnS2 creates db (placed on s2) with Retain, waits for it to run and
// deletes it: the hub records the Retain teardown.
func retainOnS2(g Gomega, e *env, db *fleetv1alpha1.Database) {
	db.Spec.DeletionPolicy = fleetv1alpha1.DeletionPolicyRetain
	g.Expect(e.hub.Create(e.ctx, db)).To(Succeed())
	e.waitPhase(g, db.Namespace, db.Name, fleetv1alpha1.PhaseReady)
	g.Expect(e.hub.Delete(e.ctx, e.getDB(db.Namespace, db.Name))).To(Succeed())
	g.Eventually(func() bool {
		return apierrors.IsNotFound(e.hub.Get(e.ctx, client.ObjectKeyFromObject(db), &fleetv1alpha1.Database{}))
	}).WithTimeout(eventually).WithPolling(poll).Should(BeTrue())
	g.Expect(client.IgnoreNotFound(e.hub.Delete(e.ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: db.Namespace, Name: db.Name + "-credentials"}}))).To(Succeed())
}

// forgetRetained removes the hub's Retain record of uid from its tombstones
// ConfigMap: what an evicted record, or a hub rebuilt without it, looks like.
func forgetRetained(g Gomega, e *env, uid types.UID) {
	var cm corev1.ConfigMap
	g.Expect(e.hub.Get(e.ctx, client.ObjectKey{Namespace: hubNS, Name: fleetv1alpha1.TombstonesConfigMap}, &cm)).To(Succeed())
	g.Expect(cm.Data).To(HaveKey("retained." + string(uid)))
	patch := client.MergeFrom(cm.DeepCopy())
	delete(cm.Data, "retained."+string(uid))
	g.Expect(e.hub.Patch(e.ctx, &cm, patch)).To(Succeed())
}
