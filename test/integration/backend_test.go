package integration

import (
	"testing"

	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleetv1alpha1 "github.com/fleetdb/fleetdb/apis/v1alpha1"
	"github.com/fleetdb/fleetdb/member"
)

// testBackendNeverFlips (issue 25 item 8): a CloudNativePG Database whose
// fleetdb.io/backend annotation is removed while its status names no backend
// (written while its member was unreachable) waits with reason
// BackendUnknown and writes nothing; once the member is back the hub reads
// the Cluster running there, records CloudNativePG again, and never starts a
// StatefulSet (an empty database) behind the client Service.
func testBackendNeverFlips(t *testing.T, e *env) {
	g := NewWithT(t)
	ns := e.namespace("noflip")
	g.Expect(e.hub.Create(e.ctx, newCNPGDB(ns, "keep", "m1"))).To(Succeed())
	g.Eventually(func(g Gomega) {
		db := e.getDB(ns, "keep")
		g.Expect(db.Annotations).To(HaveKeyWithValue(fleetv1alpha1.AnnotationBackend, "CloudNativePG"))
		g.Expect(db.Status.Phase).To(Equal(fleetv1alpha1.PhaseReady))
	}).WithTimeout(eventually).WithPolling(poll).Should(Succeed())
	g.Expect(clusterInstances(e, "m1", ns, "keep")).To(BeEquivalentTo(2))

	// m1 drops off the network; the status is written while it is away.
	e.proxies["m1"].Cut()
	t.Cleanup(func() { _ = e.proxies["m1"].Restore() })
	g.Eventually(func(g Gomega) {
		g.Expect(clusterEntry(e.getDB(ns, "keep"), "m1").Phase).To(Equal(fleetv1alpha1.ClusterPhaseUnreachable))
	}).WithTimeout(eventually).WithPolling(poll).Should(Succeed())
	// The status names no backend (as one written from an unreachable
	// member's report does) and the annotation goes: the Database itself no
	// longer tells which backend its members run.
	db := e.getDB(ns, "keep")
	for i := range db.Status.Clusters {
		db.Status.Clusters[i].Backend = ""
	}
	g.Expect(e.hub.Status().Update(e.ctx, db)).To(Succeed())
	g.Expect(e.hub.Patch(e.ctx, e.getDB(ns, "keep"), client.RawPatch(types.MergePatchType,
		[]byte(`{"metadata":{"annotations":{"`+fleetv1alpha1.AnnotationBackend+`":null}}}`)))).To(Succeed())

	// The hub cannot read m1: it waits, and says why and what to do.
	g.Eventually(func(g Gomega) {
		db := e.getDB(ns, "keep")
		ready := condition(db.Status.Conditions, fleetv1alpha1.ConditionReady)
		g.Expect(ready.Reason).To(Equal(fleetv1alpha1.ReasonBackendUnknown))
		g.Expect(ready.Message).To(And(ContainSubstring("m1"), ContainSubstring(fleetv1alpha1.AnnotationBackend)))
	}).WithTimeout(eventually).WithPolling(poll).Should(Succeed())

	// m1 is back: the hub reads the Cluster there and records CloudNativePG.
	g.Expect(e.proxies["m1"].Restore()).To(Succeed())
	e.waitMemberReady("m1")
	g.Eventually(func(g Gomega) {
		db := e.getDB(ns, "keep")
		g.Expect(db.Annotations).To(HaveKeyWithValue(fleetv1alpha1.AnnotationBackend, "CloudNativePG"))
		g.Expect(db.Status.Phase).To(Equal(fleetv1alpha1.PhaseReady), "%+v %+v", db.Status.Clusters, db.Status.Conditions)
		g.Expect(clusterEntry(db, "m1").Backend).To(Equal(fleetv1alpha1.BackendCloudNativePG))
	}).WithTimeout(eventually).WithPolling(poll).Should(Succeed())
	e.settle(g)
	err := e.member("m1").Get(e.ctx, client.ObjectKey{Namespace: ns, Name: "keep"}, &appsv1.StatefulSet{})
	g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "no StatefulSet (an empty database) was started: %v", err)
	var svc corev1.Service
	g.Expect(e.member("m1").Get(e.ctx, client.ObjectKey{Namespace: ns, Name: "keep"}, &svc)).To(Succeed())
	g.Expect(svc.Spec.Selector).To(HaveKeyWithValue("cnpg.io/instanceRole", "primary"), "the client Service still leads to CloudNativePG's primary")
	g.Expect(clusterInstances(e, "m1", ns, "keep")).To(BeEquivalentTo(2))
}

// legacyStatefulSet puts in member m what a fleetdb that had only the
// StatefulSet backend wrote for db: its StatefulSet, labelled for db (its
// UID, no hub identity).
func (e *env) legacyStatefulSet(g Gomega, m string, db *fleetv1alpha1.Database) {
	_ = e.member(m).Create(e.ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: db.Namespace}})
	legacy := db.DeepCopy()
	legacy.Spec.Backend = fleetv1alpha1.BackendStatefulSet
	creds := map[string][]byte{member.CredentialsUsernameKey: []byte("app"), member.CredentialsPasswordKey: []byte("legacy")}
	objs, err := member.Render(member.Params{Database: legacy, Cluster: m, Credentials: creds})
	g.Expect(err).NotTo(HaveOccurred())
	for _, o := range objs {
		if sts, ok := o.(*appsv1.StatefulSet); ok {
			g.Expect(e.member(m).Create(e.ctx, sts)).To(Succeed())
			return
		}
	}
	g.Expect(false).To(BeTrue(), "no StatefulSet rendered")
}

// testBackendAnnotationPinned (issue 42 item 4b): the fleetdb.io/backend
// annotation of a Ready CloudNativePG Database changed to StatefulSet (here
// removed and then set, which the hub API server's policy lets through) is
// not followed: no StatefulSet (an empty database) starts in the member, the
// client Service keeps leading to CloudNativePG's primary, and the Database
// says why (Stalled, BackendChanged). A direct change of the annotation from
// one backend to another is refused at admission.
func testBackendAnnotationPinned(t *testing.T, e *env) {
	g := NewWithT(t)
	ns := e.namespace("pinned")
	g.Expect(e.hub.Create(e.ctx, newCNPGDB(ns, "ledger", "m1"))).To(Succeed())
	g.Eventually(func(g Gomega) {
		db := e.getDB(ns, "ledger")
		g.Expect(db.Annotations).To(HaveKeyWithValue(fleetv1alpha1.AnnotationBackend, "CloudNativePG"))
		g.Expect(db.Status.Phase).To(Equal(fleetv1alpha1.PhaseReady))
		g.Expect(clusterEntry(db, "m1").Backend).To(Equal(fleetv1alpha1.BackendCloudNativePG))
	}).WithTimeout(eventually).WithPolling(poll).Should(Succeed())
	var svc corev1.Service
	g.Expect(e.member("m1").Get(e.ctx, client.ObjectKey{Namespace: ns, Name: "ledger"}, &svc)).To(Succeed())
	selector := svc.Spec.Selector

	annotate := func(value string) error {
		v := "null"
		if value != "" {
			v = `"` + value + `"`
		}
		return e.hub.Patch(e.ctx, e.getDB(ns, "ledger"), client.RawPatch(types.MergePatchType,
			[]byte(`{"metadata":{"annotations":{"`+fleetv1alpha1.AnnotationBackend+`":`+v+`}}}`)))
	}
	g.Expect(annotate("")).To(Succeed(), "removing the annotation is allowed")
	g.Expect(annotate("StatefulSet")).To(Succeed(), "setting an absent annotation is allowed")

	g.Eventually(func(g Gomega) {
		db := e.getDB(ns, "ledger")
		stalled := condition(db.Status.Conditions, fleetv1alpha1.ConditionStalled)
		g.Expect(stalled.Status).To(Equal(metav1.ConditionTrue), "%+v", db.Status.Conditions)
		g.Expect(stalled.Reason).To(Equal(fleetv1alpha1.ReasonBackendChanged))
		g.Expect(stalled.Message).To(And(ContainSubstring(fleetv1alpha1.AnnotationBackend),
			ContainSubstring("changed to StatefulSet"), ContainSubstring("keeps running CloudNativePG")))
	}).WithTimeout(eventually).WithPolling(poll).Should(Succeed())
	e.settle(g)
	err := e.member("m1").Get(e.ctx, client.ObjectKey{Namespace: ns, Name: "ledger"}, &appsv1.StatefulSet{})
	g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "no StatefulSet (an empty database) was started: %v", err)
	g.Expect(e.member("m1").Get(e.ctx, client.ObjectKey{Namespace: ns, Name: "ledger"}, &svc)).To(Succeed())
	g.Expect(svc.Spec.Selector).To(Equal(selector), "the client Service still leads to CloudNativePG's primary")
	g.Expect(svc.Spec.Selector).To(HaveKeyWithValue("cnpg.io/instanceRole", "primary"))
	g.Expect(clusterInstances(e, "m1", ns, "ledger")).To(BeEquivalentTo(2))
	g.Expect(clusterEntry(e.getDB(ns, "ledger"), "m1").Backend).To(Equal(fleetv1alpha1.BackendCloudNativePG))

	// Set back: the Database is Ready again.
	g.Expect(annotate("CloudNativePG")).NotTo(Succeed(), "from one backend to another is refused at admission")
	g.Expect(annotate("")).To(Succeed())
	g.Expect(annotate("CloudNativePG")).To(Succeed())
	g.Eventually(func(g Gomega) {
		g.Expect(e.getDB(ns, "ledger").Status.Phase).To(Equal(fleetv1alpha1.PhaseReady))
	}).WithTimeout(eventually).WithPolling(poll).Should(Succeed())

	// A direct change from one backend to another is refused at admission.
	err = annotate("StatefulSet")
	g.Expect(apierrors.IsForbidden(err) || apierrors.IsInvalid(err)).To(BeTrue(), "want refused, got %v", err)
	g.Expect(err.Error()).To(ContainSubstring("cannot be changed to StatefulSet"))
}
