package memberjob

import (
	"context"
	"encoding/json"
	"testing"

	. "github.com/onsi/gomega"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func ledgerJob(image string) *batchv1.Job {
	return &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "orders-rotate-1", Labels: map[string]string{"a": "b"}},
		Spec: batchv1.JobSpec{Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{
			Containers: []corev1.Container{{Name: "rotate", Image: image, Command: []string{"sh", "-c", "x"},
				Env: []corev1.EnvVar{{Name: "A", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
					LocalObjectReference: corev1.LocalObjectReference{Name: "s"}, Key: "k"}}}}}},
			Volumes: []corev1.Volume{{Name: "v", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}},
		}}},
	}
}

// PodHash is what SamePod compares: the same for a Job read back from the
// API (JSON round trip, labels and status aside), another for another image.
func TestPodHash(t *testing.T) {
	g := NewWithT(t)
	j := ledgerJob("postgres:17")
	raw, err := json.Marshal(j)
	g.Expect(err).NotTo(HaveOccurred())
	var back batchv1.Job
	g.Expect(json.Unmarshal(raw, &back)).To(Succeed())
	back.Labels, back.Status.Succeeded = nil, 1
	g.Expect(PodHash(&back)).To(Equal(PodHash(j)))
	g.Expect(SamePod(&back, j)).To(BeTrue())

	other := ledgerJob("postgres:17.2")
	g.Expect(PodHash(other)).NotTo(Equal(PodHash(j)))
	g.Expect(SamePod(other, j)).To(BeFalse())
}

// A nil Ledger records nothing and holds nothing.
func TestNilLedger(t *testing.T) {
	g := NewWithT(t)
	var l *Ledger
	ctx := context.Background()
	g.Expect(l.Record(ctx, "hub", "m1", ledgerJob("x"))).To(Succeed())
	held, err := l.Holds(ctx, "hub", "m1", ledgerJob("x"))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(held).To(BeFalse())
	g.Expect(l.Forget(ctx, "hub", "m1", ledgerJob("x"))).To(Succeed())
}
