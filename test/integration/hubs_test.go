package integration

import (
	"context"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleetv1alpha1 "github.com/fleetdb/fleetdb/apis/v1alpha1"
	"github.com/fleetdb/fleetdb/clusters"
	"github.com/fleetdb/fleetdb/hub"
	"github.com/fleetdb/fleetdb/test/fleet"
)

// secondHub is another hub (its own API server and manager, so its own
// identity) joined to some of the env's members.
type secondHub struct {
	cp  *fleet.ControlPlane
	hub client.Client
}

func startSecondHub(t *testing.T, e *env, members ...string) *secondHub {
	g := NewWithT(t)
	assets, err := fleet.AssetsDir()
	g.Expect(err).NotTo(HaveOccurred())
	cp, err := fleet.StartControlPlane("hub2", assets, true)
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(func() { _ = cp.Stop() })
	h := &secondHub{cp: cp, hub: cp.Client}
	g.Expect(h.hub.Create(e.ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: hubNS}})).To(Succeed())
	for _, m := range members {
		registerOn(t, e.ctx, h.hub, m, e.fleet.Member(m).Kubeconfig, map[string]string{"name": m})
	}
	mgr, _, err := hub.NewManager(e.ctx, hub.Config{
		Hub:     hubIdentity(t, e.ctx, cp.Config, cp.Client),
		Options: hub.Options{HubNamespace: hubNS, MemberCallTimeout: memberCallTimeout},
		Registry: clusters.Options{
			ProbeInterval: 500 * time.Millisecond, ProbeTimeout: time.Second,
			FailureGracePeriod: 1500 * time.Millisecond, ConnectTimeout: 10 * time.Second,
		},
		SkipControllerNameValidation: true,
	})
	g.Expect(err).NotTo(HaveOccurred())
	ctx, cancel := context.WithCancel(e.ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := mgr.Start(ctx); err != nil {
			t.Errorf("second hub manager: %v", err)
		}
	}()
	t.Cleanup(func() { cancel(); <-done })
	return h
}

// cutAndRestore takes a member off the first hub's network until the hub
// sees it down, then brings it back and waits for it: the hub sweeps it.
func (e *env) cutAndRestore(g Gomega, member string, while func()) {
	e.proxies[member].Cut()
	g.Eventually(func(g Gomega) {
		var mc fleetv1alpha1.MemberCluster
		g.Expect(e.hub.Get(e.ctx, client.ObjectKey{Name: member}, &mc)).To(Succeed())
		g.Expect(condition(mc.Status.Conditions, fleetv1alpha1.MemberConditionReady).Status).NotTo(Equal(metav1.ConditionTrue))
	}).WithTimeout(eventually).WithPolling(poll).Should(Succeed())
	if while != nil {
		while()
	}
	g.Expect(e.proxies[member].Restore()).To(Succeed())
	e.waitMemberReady(member)
}

// deleteWhileCut deletes a Database whose member is cut; it goes after its
// (short) unreachable timeout, with a tombstone for that member.
func (e *env) deleteWhileCut(g Gomega, ns, name string) {
	g.Expect(e.hub.Delete(e.ctx, e.getDB(ns, name))).To(Succeed())
	g.Eventually(func() bool {
		return apierrors.IsNotFound(e.hub.Get(e.ctx, client.ObjectKey{Namespace: ns, Name: name}, &fleetv1alpha1.Database{}))
	}).WithTimeout(eventually).WithPolling(poll).Should(BeTrue())
}

// testTwoHubs (item 3): two hubs joined to one member never touch each
// other's objects: a clash of names is a Conflict for the second writer, a
// teardown and a reconnect sweep of one hub leave the other's objects alone.
func testTwoHubs(t *testing.T, e *env) {
	g := NewWithT(t)
	h2 := startSecondHub(t, e, "s1")
	ns := "shared"
	g.Expect(h2.hub.Create(e.ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})).To(Succeed())
	e.namespace(ns)

	g.Expect(h2.hub.Create(e.ctx, newDB(ns, "twin", "s1"))).To(Succeed())
	var theirs appsv1.StatefulSet
	g.Eventually(func(g Gomega) {
		g.Expect(e.member("s1").Get(e.ctx, client.ObjectKey{Namespace: ns, Name: "twin"}, &theirs)).To(Succeed())
		g.Expect(theirs.Labels[fleetv1alpha1.LabelHubID]).NotTo(BeEmpty())
		g.Expect(theirs.Labels[fleetv1alpha1.LabelHubID]).NotTo(Equal(e.hubID(g)))
	}).WithTimeout(eventually).WithPolling(poll).Should(Succeed())
	g.Eventually(func(g Gomega) {
		var db fleetv1alpha1.Database
		g.Expect(h2.hub.Get(e.ctx, client.ObjectKey{Namespace: ns, Name: "twin"}, &db)).To(Succeed())
		g.Expect(db.Status.Phase).To(Equal(fleetv1alpha1.PhaseReady))
	}).WithTimeout(eventually).WithPolling(poll).Should(Succeed())
	g.Expect(e.member("s1").Get(e.ctx, client.ObjectKeyFromObject(&theirs), &theirs)).To(Succeed())
	rv := theirs.ResourceVersion
	unchanged := func(g Gomega) {
		var now appsv1.StatefulSet
		g.Expect(e.member("s1").Get(e.ctx, client.ObjectKeyFromObject(&theirs), &now)).To(Succeed(), "the other hub's StatefulSet is gone")
		g.Expect(now.ResourceVersion).To(Equal(rv), "the other hub's StatefulSet was written to")
		g.Expect(now.DeletionTimestamp).To(BeNil())
	}

	// Apply: the first hub's Database of the same name conflicts there.
	g.Expect(e.hub.Create(e.ctx, newDB(ns, "twin", "s1"))).To(Succeed())
	g.Eventually(func(g Gomega) {
		db := e.getDB(ns, "twin")
		g.Expect(clusterEntry(db, "s1").Phase).To(Equal(fleetv1alpha1.ClusterPhaseConflict))
		g.Expect(clusterEntry(db, "s1").Message).To(ContainSubstring("another fleetdb hub"))
	}).WithTimeout(eventually).WithPolling(poll).Should(Succeed())
	unchanged(g)

	// Teardown: deleting it removes nothing of the other hub's.
	g.Expect(e.hub.Delete(e.ctx, e.getDB(ns, "twin"))).To(Succeed())
	g.Eventually(func() bool {
		return apierrors.IsNotFound(e.hub.Get(e.ctx, client.ObjectKey{Namespace: ns, Name: "twin"}, &fleetv1alpha1.Database{}))
	}).WithTimeout(eventually).WithPolling(poll).Should(BeTrue())
	unchanged(g)

	// Sweep: the first hub reconnects to s1 and collects its own leftover
	// (a Database deleted while s1 was away), not the other hub's objects.
	mine := newDB(ns, "mine", "s1")
	mine.Spec.Teardown.UnreachableTimeout = &metav1.Duration{Duration: time.Second}
	g.Expect(e.hub.Create(e.ctx, mine)).To(Succeed())
	e.waitPhase(g, ns, "mine", fleetv1alpha1.PhaseReady)
	e.cutAndRestore(g, "s1", func() { e.deleteWhileCut(g, ns, "mine") })
	g.Eventually(func() bool {
		return apierrors.IsNotFound(e.member("s1").Get(e.ctx, client.ObjectKey{Namespace: ns, Name: "mine"}, &appsv1.StatefulSet{}))
	}).WithTimeout(eventually).WithPolling(poll).Should(BeTrue(), "the hub's own leftover is swept")
	g.Consistently(unchanged).WithTimeout(3 * time.Second).WithPolling(poll).Should(Succeed())
}

// testSweepTombstones (item 3): on reconnect the hub collects a Database's
// leftovers only when it recorded the Database as gone, with the policy it
// recorded (a policy annotation changed in the member is ignored), and never
// the objects of a Database it does not know to be gone (a hub restored
// from an older backup).
func testSweepTombstones(t *testing.T, e *env) {
	g := NewWithT(t)
	ns := e.namespace("sweep")
	gone := newDB(ns, "gone", "s2")
	gone.Spec.DeletionPolicy = fleetv1alpha1.DeletionPolicyRetain
	gone.Spec.Teardown.UnreachableTimeout = &metav1.Duration{Duration: time.Second}
	g.Expect(e.hub.Create(e.ctx, gone)).To(Succeed())
	g.Expect(e.hub.Create(e.ctx, newDB(ns, "unknown", "s2"))).To(Succeed())
	e.waitPhase(g, ns, "gone", fleetv1alpha1.PhaseReady)
	e.waitPhase(g, ns, "unknown", fleetv1alpha1.PhaseReady)
	g.Expect(e.member("s2").Create(e.ctx, pvcFor(e, "s2", ns, "gone"))).To(Succeed())
	uid := e.getDB(ns, "gone").UID

	e.cutAndRestore(g, "s2", func() {
		e.deleteWhileCut(g, ns, "gone")
		// The hub's own record, written before it let the Database go.
		var cm corev1.ConfigMap
		g.Expect(e.hub.Get(e.ctx, client.ObjectKey{Namespace: hubNS, Name: fleetv1alpha1.TombstonesConfigMap}, &cm)).To(Succeed())
		g.Expect(cm.Data).To(HaveKey(string(uid)))
		// Someone rewrites the policy annotation in the member meanwhile.
		for _, obj := range []client.Object{&appsv1.StatefulSet{}, &corev1.ConfigMap{}} {
			name := "gone"
			if _, ok := obj.(*corev1.ConfigMap); ok {
				name = "gone-config"
			}
			g.Expect(e.member("s2").Get(e.ctx, client.ObjectKey{Namespace: ns, Name: name}, obj)).To(Succeed())
			a := obj.GetAnnotations()
			a[fleetv1alpha1.AnnotationDeletionPolicy] = string(fleetv1alpha1.DeletionPolicyDelete)
			obj.SetAnnotations(a)
			g.Expect(e.member("s2").Update(e.ctx, obj)).To(Succeed())
		}
		// A hub restored from an older backup: "unknown" is gone from the
		// hub without a teardown or a record.
		e.forget(g, ns, "unknown")
	})

	g.Eventually(func() bool {
		return apierrors.IsNotFound(e.member("s2").Get(e.ctx, client.ObjectKey{Namespace: ns, Name: "gone"}, &appsv1.StatefulSet{}))
	}).WithTimeout(eventually).WithPolling(poll).Should(BeTrue(), "the recorded leftover is swept")
	g.Eventually(func(g Gomega) {
		var pvc corev1.PersistentVolumeClaim
		g.Expect(e.member("s2").Get(e.ctx, client.ObjectKey{Namespace: ns, Name: "data-gone-0"}, &pvc)).To(Succeed(), "swept with the recorded Retain")
		g.Expect(pvc.DeletionTimestamp).To(BeNil())
		g.Expect(pvc.Labels).NotTo(HaveKey(fleetv1alpha1.LabelManagedBy), "released")
	}).WithTimeout(eventually).WithPolling(poll).Should(Succeed())
	g.Eventually(func(g Gomega) {
		var cm corev1.ConfigMap
		g.Expect(e.hub.Get(e.ctx, client.ObjectKey{Namespace: hubNS, Name: fleetv1alpha1.TombstonesConfigMap}, &cm)).To(Succeed())
		g.Expect(cm.Data).NotTo(HaveKey(string(uid)), "the tombstone goes once swept")
	}).WithTimeout(eventually).WithPolling(poll).Should(Succeed())
	g.Consistently(func(g Gomega) {
		g.Expect(e.member("s2").Get(e.ctx, client.ObjectKey{Namespace: ns, Name: "unknown"}, &appsv1.StatefulSet{})).To(Succeed())
	}).WithTimeout(3*time.Second).WithPolling(poll).Should(Succeed(), "not known to be gone: kept")
}
