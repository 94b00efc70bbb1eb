package database

import (
	"testing"
	"time"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

func TestHoldStatus(t *testing.T) {
	g := NewWithT(t)
	s := newState()
	key := types.NamespacedName{Namespace: "ns", Name: "db"}
	t0 := metav1.Now().Time
	g.Expect(s.holdStatus(key, t0)).To(Equal(statusHoldDelay), "held from the first reconcile that computed it")
	g.Expect(s.holdStatus(key, t0.Add(300*time.Millisecond))).To(Equal(statusHoldDelay-300*time.Millisecond), "held until the first hold's delay is over")
	g.Expect(s.holdStatus(key, t0.Add(statusHoldDelay))).To(BeZero(), "then written")
	s.statusSettled(key)
	g.Expect(s.holdStatus(key, t0.Add(statusHoldDelay+time.Millisecond))).To(Equal(statusHoldDelay), "the next one is held anew")
	s.forget(key)
	g.Expect(s.statusHeld).To(BeEmpty())
}
