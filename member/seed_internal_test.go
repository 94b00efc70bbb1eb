package member

import (
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The applied hash of a Secret shows no hash of its values: two Secrets that
// differ in a password alone have the same one (seed compares the values),
// while any other change, a key added or dropped included, changes it.
func TestAppliedHashLeavesSecretValuesOut(t *testing.T) {
	g := NewWithT(t)
	secret := func(data map[string][]byte) *corev1.Secret {
		return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "orders-credentials"}, Data: data}
	}
	a := secret(map[string][]byte{"password": []byte("one")})
	b := secret(map[string][]byte{"password": []byte("two")})
	c := secret(map[string][]byte{"password": []byte("one"), "pending-password": []byte("two")})
	ha, err := appliedHash(a)
	g.Expect(err).NotTo(HaveOccurred())
	hb, _ := appliedHash(b)
	hc, _ := appliedHash(c)
	g.Expect(hb).To(Equal(ha))
	g.Expect(hc).NotTo(Equal(ha))
	oa, _ := objectHash(a)
	ob, _ := objectHash(b)
	g.Expect(oa).NotTo(Equal(ob), "the memo's hash still tells the passwords apart")
	g.Expect(a.Data["password"]).To(Equal([]byte("one")), "the rendered Secret is left as it was")
}

func TestHolds(t *testing.T) {
	g := NewWithT(t)
	live := map[string]any{"spec": map[string]any{"replicas": 3.0, "defaulted": "x", "list": []any{map[string]any{"a": "1", "b": "2"}}}}
	g.Expect(holds(live, map[string]any{"spec": map[string]any{"replicas": 3.0, "list": []any{map[string]any{"a": "1"}}}})).To(BeTrue())
	g.Expect(holds(live, map[string]any{"spec": map[string]any{"replicas": 2.0}})).To(BeFalse(), "a changed value")
	g.Expect(holds(live, map[string]any{"spec": map[string]any{"gone": "y"}})).To(BeFalse(), "a removed field")
	g.Expect(holds(live, map[string]any{"spec": map[string]any{"list": []any{map[string]any{"a": "1"}, map[string]any{"a": "2"}}}})).To(BeFalse(), "a removed element")
	g.Expect(holds(live, map[string]any{"spec": map[string]any{"empty": map[string]any{}}})).To(BeTrue(), "an empty map is held by nothing")
}
