package database

import (
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleetv1alpha1 "github.com/fleetdb/fleetdb/apis/v1alpha1"
)

func TestRestoreObjects(t *testing.T) {
	db := &fleetv1alpha1.Database{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "copy"}}
	db.Spec.RestoreFrom = &fleetv1alpha1.RestoreSource{BackupName: "nightly"}
	objs := func() []client.Object {
		return []client.Object{
			&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "copy-credentials"}},
			&corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "copy"}},
			&corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "copy-hl"}},
		}
	}
	names := func(list []client.Object) []string {
		var out []string
		for _, o := range list {
			out = append(out, o.GetName())
		}
		return out
	}
	g := NewWithT(t)
	g.Expect(names(restoreObjects(objs(), db, &memberRestore{}))).To(ConsistOf("copy-credentials", "copy", "copy-hl"), "no restoreFrom: as rendered")

	pending := restoreObjects(objs(), db, &memberRestore{active: true, marker: "nightly"})
	g.Expect(names(pending)).To(ConsistOf("copy-credentials", "copy-hl"), "the client Service is withheld until restored")
	g.Expect(pending[0].GetAnnotations()).NotTo(HaveKey(fleetv1alpha1.AnnotationRestored))

	done := restoreObjects(objs(), db, &memberRestore{active: true, done: true, marker: "nightly"})
	g.Expect(names(done)).To(ConsistOf("copy-credentials", "copy", "copy-hl"))
	g.Expect(done[0].GetAnnotations()).To(HaveKeyWithValue(fleetv1alpha1.AnnotationRestored, "nightly"), "the durable record")
}
