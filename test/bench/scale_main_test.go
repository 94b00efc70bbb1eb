package main

import (
	"testing"

	. "github.com/onsi/gomega"
)

// TestScaleCounts: the member and Database counts are positive, at most 50
// members, and the Database steps increase.
func TestScaleCounts(t *testing.T) {
	g := NewWithT(t)
	m, d, err := (&scaleConfig{members: "1, 5,10", databases: "100,500,1000"}).counts()
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(m).To(Equal([]int{1, 5, 10}))
	g.Expect(d).To(Equal([]int{100, 500, 1000}))
	for _, bad := range []scaleConfig{
		{members: "0", databases: "100"},
		{members: "51", databases: "100"},
		{members: "1", databases: "500,100"},
		{members: "1", databases: ""},
		{members: "x", databases: "100"},
	} {
		_, _, err := bad.counts()
		g.Expect(err).To(HaveOccurred(), "%+v", bad)
	}
}

// TestNeededComponents: the hub cluster runs no pods, so its kwok
// controller and scheduler may be gone; a member's may not.
func TestNeededComponents(t *testing.T) {
	g := NewWithT(t)
	g.Expect(needed([]string{"hub/kwok-controller", "hub/kube-scheduler"})).To(BeEmpty())
	g.Expect(needed([]string{"hub/etcd", "member-3/kwok-controller", "hub/kube-scheduler"})).
		To(Equal([]string{"hub/etcd", "member-3/kwok-controller"}))
}
