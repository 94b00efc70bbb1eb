package member_test

import (
	"context"
	"testing"

	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleetv1alpha1 "github.com/fleetdb/fleetdb/apis/v1alpha1"
	"github.com/fleetdb/fleetdb/member"
)

// testDriftAfterRestart: a restarted hub (a new, empty memo) writes only the
// objects someone changed, deleted or left without the applied hash, and
// puts them back.
func testDriftAfterRestart(t *testing.T, ctx context.Context, e *env) {
	g := NewWithT(t)
	db := newDatabase("it-restart", "orders", 3)
	e.apply(t, ctx, renderFor(t, db, testTraceparent), member.NewMemo())

	// Another field manager scales the StatefulSet ...
	sts := &appsv1.StatefulSet{}
	g.Expect(e.admin.Get(ctx, key("it-restart", "orders"), sts)).To(Succeed())
	sts.Spec.Replicas = ptr(int32(5))
	g.Expect(e.admin.Update(ctx, sts, client.FieldOwner("someone"))).To(Succeed())
	// ... removes a fleetdb label from the Service (no new generation) ...
	svc := &corev1.Service{}
	g.Expect(e.admin.Get(ctx, key("it-restart", "orders"), svc)).To(Succeed())
	delete(svc.Labels, fleetv1alpha1.LabelDatabaseUID)
	g.Expect(e.admin.Update(ctx, svc, client.FieldOwner("someone"))).To(Succeed())
	// ... removes a key fleetdb set from the ConfigMap (a removal leaves no
	// managedFields entry of its own) ...
	cm := &corev1.ConfigMap{}
	g.Expect(e.admin.Get(ctx, key("it-restart", "orders-config"), cm)).To(Succeed())
	delete(cm.Data, "postgresql.conf")
	g.Expect(e.admin.Update(ctx, cm, client.FieldOwner("someone"))).To(Succeed())
	// ... changes the password in the Secret ...
	secret := &corev1.Secret{}
	g.Expect(e.admin.Get(ctx, key("it-restart", "orders-credentials"), secret)).To(Succeed())
	secret.Data[member.CredentialsPasswordKey] = []byte("not-the-password")
	g.Expect(e.admin.Update(ctx, secret, client.FieldOwner("someone"))).To(Succeed())
	// ... deletes the PodDisruptionBudget ...
	g.Expect(e.admin.Delete(ctx, &policyv1.PodDisruptionBudget{ObjectMeta: metav1.ObjectMeta{Namespace: "it-restart", Name: "orders"}})).To(Succeed())
	// ... and drops the applied hash from the headless Service (as an object
	// applied by a hub from before the annotation looks).
	hl := &corev1.Service{}
	g.Expect(e.admin.Get(ctx, key("it-restart", "orders-hl"), hl)).To(Succeed())
	delete(hl.Annotations, fleetv1alpha1.AnnotationAppliedHash)
	g.Expect(e.admin.Update(ctx, hl)).To(Succeed())

	e.writes.Take()
	fresh := member.NewMemo()
	res := e.apply(t, ctx, renderFor(t, db, "00-55555555555555555555555555555555-6666666666666666-01"), fresh)
	g.Expect(res.Applied).To(ConsistOf(
		"StatefulSet/it-restart/orders",
		"Service/it-restart/orders",
		"ConfigMap/it-restart/orders-config",
		"PodDisruptionBudget/it-restart/orders",
		"Service/it-restart/orders-hl",
		"Secret/it-restart/orders-credentials",
	))
	g.Expect(e.writes.Take()).To(HaveLen(6))
	g.Expect(e.admin.Get(ctx, key("it-restart", "orders-credentials"), secret)).To(Succeed())
	g.Expect(secret.Data).To(Equal(testCredentials()))

	g.Expect(e.admin.Get(ctx, key("it-restart", "orders"), sts)).To(Succeed())
	g.Expect(*sts.Spec.Replicas).To(Equal(int32(3)))
	g.Expect(e.admin.Get(ctx, key("it-restart", "orders"), svc)).To(Succeed())
	g.Expect(svc.Labels).To(HaveKeyWithValue(fleetv1alpha1.LabelDatabaseUID, string(db.UID)))
	g.Expect(e.admin.Get(ctx, key("it-restart", "orders-config"), cm)).To(Succeed())
	g.Expect(cm.Data).To(HaveKey("postgresql.conf"))
	g.Expect(e.admin.Get(ctx, key("it-restart", "orders"), &policyv1.PodDisruptionBudget{})).To(Succeed())
	g.Expect(e.admin.Get(ctx, key("it-restart", "orders-hl"), hl)).To(Succeed())
	g.Expect(hl.Annotations).To(HaveKey(fleetv1alpha1.AnnotationAppliedHash))

	// Put back, the member is quiet, for this hub and for the next one.
	e.apply(t, ctx, renderFor(t, db, testTraceparent), fresh)
	g.Expect(e.writes.Take()).To(BeEmpty())
	e.apply(t, ctx, renderFor(t, db, testTraceparent), member.NewMemo())
	g.Expect(e.writes.Take()).To(BeEmpty())

	// A changed rendering is applied after a restart too.
	db.Spec.Replicas = 2
	res = e.apply(t, ctx, renderFor(t, db, testTraceparent), member.NewMemo())
	g.Expect(res.Applied).To(ContainElement("StatefulSet/it-restart/orders"))
	g.Expect(e.admin.Get(ctx, key("it-restart", "orders"), sts)).To(Succeed())
	g.Expect(*sts.Spec.Replicas).To(Equal(int32(2)))
}
