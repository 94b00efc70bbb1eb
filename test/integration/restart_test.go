package integration

import (
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleetv1alpha1 "github.com/fleetdb/fleetdb/apis/v1alpha1"
)

// testRestartWrites: a restarted hub writes nothing to the member objects
// that hold what it would apply, and puts back one changed while it was down.
// The restored object proves the new hub synced the members before the count.
func testRestartWrites(t *testing.T, e *env) {
	g := NewWithT(t)
	ns := e.namespace("restart-writes")
	g.Expect(e.hub.Create(e.ctx, newDB(ns, "orders", "m1", "m2"))).To(Succeed())
	g.Eventually(func() fleetv1alpha1.Phase {
		return e.getDB(ns, "orders").Status.Phase
	}).WithTimeout(eventually).WithPolling(poll).Should(Equal(fleetv1alpha1.PhaseReady))
	e.settle(g)

	e.stopHub()
	sts := &appsv1.StatefulSet{}
	g.Expect(e.member("m1").Get(e.ctx, client.ObjectKey{Namespace: ns, Name: "orders"}, sts)).To(Succeed())
	sts.Spec.Replicas = ptrTo(int32(3))
	g.Expect(e.member("m1").Update(e.ctx, sts, client.FieldOwner("someone"))).To(Succeed())
	e.writes.Reset()
	e.startHub(envOptions{})

	g.Eventually(func(g Gomega) {
		g.Expect(e.member("m1").Get(e.ctx, client.ObjectKey{Namespace: ns, Name: "orders"}, sts)).To(Succeed())
		g.Expect(*sts.Spec.Replicas).To(Equal(int32(1)))
	}).WithTimeout(eventually).WithPolling(poll).Should(Succeed(), "the restarted hub puts the drift back")
	e.settle(g)
	time.Sleep(2 * time.Second)
	_, log := e.writes.Writes()
	var members []string
	for _, w := range log {
		if !strings.HasPrefix(w, "hub: ") {
			members = append(members, w)
		}
	}
	g.Expect(members).To(Equal([]string{"m1: PATCH /apis/apps/v1/namespaces/" + ns + "/statefulsets/orders"}),
		"the restarted hub writes the changed object alone to the members")
}
