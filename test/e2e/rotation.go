package e2e

import (
	"context"
	"testing"

	. "github.com/onsi/gomega" //nolint:staticcheck // ST1001: gomega's DSL reads as assertions, as in Cluster API's test/framework
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleetv1alpha1 "github.com/fleetdb/fleetdb/apis/v1alpha1"
)

// RotationInput is the input of RotationSpec.
type RotationInput struct {
	T     testing.TB
	Fleet *Fleet
}

// RotationSpec runs docs/credentials.md's rotation: `kubectl annotate` a
// Ready Database with a rotation token, `kubectl wait` for the status to name
// it, and proves that the password changed in the hub Secret and, identically,
// in every member's, with no rotation state left and the rotation Jobs (run
// by each member's Job controller; kwok completes their pods) removed.
func RotationSpec(ctx context.Context, in RotationInput) {
	t, f := in.T, in.Fleet
	g := NewWithT(t)
	ns := CreateNamespace(ctx, CreateNamespaceInput{T: t, Fleet: f, Prefix: "e2e-rotate"})
	DumpOnFailure(t, f, ns)
	members := f.MemberNames()

	db := NewDatabase(ns, "rotated", 1, members)
	db.Spec.Backend = fleetv1alpha1.BackendStatefulSet // the Job path; CloudNativePG rotates through its own Secret
	g.Expect(f.Hub.Client.Create(ctx, db)).To(Succeed())
	key := client.ObjectKeyFromObject(db)
	WaitForDatabaseReady(ctx, WaitForDatabaseReadyInput{T: t, Fleet: f, Key: key, Members: members, Replicas: 1, Version: "17"})
	secretKey := types.NamespacedName{Namespace: ns, Name: key.Name + "-credentials"}
	before := &corev1.Secret{}
	g.Expect(f.Hub.Client.Get(ctx, secretKey, before)).To(Succeed())

	out, err := kubectl(ctx, f, "-n", ns, "annotate", "database/"+key.Name, fleetv1alpha1.AnnotationRotateCredentials+"=e2e-1", "--overwrite")
	g.Expect(err).NotTo(HaveOccurred(), "kubectl annotate: %s", out)
	out, err = kubectl(ctx, f, "-n", ns, "wait", "database/"+key.Name,
		"--for=jsonpath={.status.credentials.rotatedToken}=e2e-1", "--timeout="+f.Intervals.Ready.String())
	g.Expect(err).NotTo(HaveOccurred(), "kubectl wait: %s", out)

	cur := GetDatabase(ctx, g, f, key)
	c := Condition(cur.Status.Conditions, fleetv1alpha1.ConditionCredentialsRotated)
	g.Expect(c.Status).To(Equal(metav1.ConditionTrue), c.Message)
	g.Expect(c.Reason).To(Equal(fleetv1alpha1.ReasonRotated))
	after := &corev1.Secret{}
	g.Expect(f.Hub.Client.Get(ctx, secretKey, after)).To(Succeed())
	g.Expect(after.Data["password"]).NotTo(Equal(before.Data["password"]), "the password changed")
	g.Expect(after.Data).NotTo(HaveKey("pending-password"))
	for _, m := range f.Members {
		s := &corev1.Secret{}
		g.Expect(m.Client.Get(ctx, secretKey, s)).To(Succeed())
		g.Expect(s.Data).To(Equal(after.Data), "member %s holds the hub's credentials", m.Name)
		g.Eventually(func(g Gomega) {
			var jobs batchv1.JobList
			g.Expect(m.Client.List(ctx, &jobs, client.InNamespace(ns), client.HasLabels{fleetv1alpha1.LabelRotation})).To(Succeed())
			for _, j := range jobs.Items {
				g.Expect(j.DeletionTimestamp).NotTo(BeNil(), "rotation Job %s left in %s", j.Name, m.Name)
			}
		}).WithTimeout(f.Intervals.Delete).WithPolling(f.Intervals.Poll).Should(Succeed())
	}
}
