package integration

import (
	"testing"
	"time"

	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleetv1alpha1 "github.com/fleetdb/fleetdb/apis/v1alpha1"
	"github.com/fleetdb/fleetdb/test/fleet"
)

// TestDeletionProtectionAfterDelete covers spec.deletionProtection set on a
// Database whose teardown is already under way (issue 25 item 6): the API
// server refuses it (deploy/hub's policy), and where the policy is absent
// the hub stops the teardown while it is set.
func TestDeletionProtectionAfterDelete(t *testing.T) {
	if testing.Short() {
		t.Skip("starts control planes")
	}
	e := startEnvWith(t, envOptions{}, "m1")
	e.sim.enable("m1", true)
	g := NewWithT(t)
	ns := e.namespace("late-protect")
	db := newDB(ns, "ledger", "m1")
	db.Spec.Teardown.UnreachableTimeout = &metav1.Duration{Duration: 30 * time.Minute}
	g.Expect(e.hub.Create(e.ctx, db)).To(Succeed())
	e.waitDatabaseReady(ns, "ledger")
	stsKey := client.ObjectKey{Namespace: ns, Name: "ledger"}
	g.Expect(e.member("m1").Get(e.ctx, stsKey, &appsv1.StatefulSet{})).To(Succeed())

	// The teardown is under way but cannot finish: the member is cut off.
	e.proxies["m1"].Cut()
	t.Cleanup(func() { _ = e.proxies["m1"].Restore() })
	g.Eventually(func(g Gomega) {
		g.Expect(clusterEntry(e.getDB(ns, "ledger"), "m1").Phase).To(Equal(fleetv1alpha1.ClusterPhaseUnreachable))
	}).WithTimeout(eventually).WithPolling(poll).Should(Succeed())
	g.Expect(e.hub.Delete(e.ctx, e.getDB(ns, "ledger"))).To(Succeed())
	g.Eventually(func(g Gomega) {
		got := e.getDB(ns, "ledger")
		g.Expect(got.DeletionTimestamp).NotTo(BeNil())
		g.Expect(clusterEntry(got, "m1").Phase).To(Equal(fleetv1alpha1.ClusterPhaseUnreachable))
	}).WithTimeout(eventually).WithPolling(poll).Should(Succeed())

	protect := func(on bool) error {
		got := e.getDB(ns, "ledger")
		patch := client.MergeFrom(got.DeepCopy())
		got.Spec.DeletionProtection = on
		return e.hub.Patch(e.ctx, got, patch)
	}

	t.Run("the API server refuses protection on a deleting Database", func(t *testing.T) {
		g := NewWithT(t)
		err := protect(true)
		g.Expect(err).To(HaveOccurred(), "deletionProtection was set on a Database being deleted")
		g.Expect(apierrors.IsForbidden(err)).To(BeTrue(), "want Forbidden, got %v", err)
		g.Expect(err.Error()).To(And(ContainSubstring("late-protect/ledger"), ContainSubstring("is being deleted")))
		g.Expect(e.getDB(ns, "ledger").Spec.DeletionProtection).To(BeFalse())
	})

	t.Run("without the policy the hub stops the teardown while protection is set", func(t *testing.T) {
		g := NewWithT(t)
		g.Expect(e.hub.Delete(e.ctx, unstructuredBinding())).To(Succeed())
		t.Cleanup(func() {
			g.Expect(fleet.ApplyManifests(e.ctx, e.hub, fleet.HubPolicies...)).To(Succeed())
		})
		g.Eventually(func() error { return protect(true) }).WithTimeout(eventually).WithPolling(poll).Should(Succeed())
		g.Eventually(func(g Gomega) {
			stalled := condition(e.getDB(ns, "ledger").Status.Conditions, fleetv1alpha1.ConditionStalled)
			g.Expect(stalled.Status).To(Equal(metav1.ConditionTrue))
			g.Expect(stalled.Reason).To(Equal(fleetv1alpha1.ReasonDeletionProtected))
		}).WithTimeout(eventually).WithPolling(poll).Should(Succeed())

		// The member comes back: the teardown fanned out before protection
		// was set must not run now.
		g.Expect(e.proxies["m1"].Restore()).To(Succeed())
		e.waitMemberReady("m1")
		g.Consistently(func(g Gomega) {
			var sts appsv1.StatefulSet
			g.Expect(e.member("m1").Get(e.ctx, stsKey, &sts)).To(Succeed(), "the member's workload is still there")
			g.Expect(sts.DeletionTimestamp).To(BeNil())
			g.Expect(e.getDB(ns, "ledger").Finalizers).To(ContainElement(fleetv1alpha1.TeardownFinalizer))
		}).WithTimeout(5 * time.Second).WithPolling(poll).Should(Succeed())

		g.Expect(protect(false)).To(Succeed())
		g.Eventually(func(g Gomega) {
			err := e.hub.Get(e.ctx, client.ObjectKey{Namespace: ns, Name: "ledger"}, &fleetv1alpha1.Database{})
			g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "the Database is gone once unprotected: %v", err)
			err = e.member("m1").Get(e.ctx, stsKey, &appsv1.StatefulSet{})
			g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "and so is its workload: %v", err)
		}).WithTimeout(eventually).WithPolling(poll).Should(Succeed())
	})
}
