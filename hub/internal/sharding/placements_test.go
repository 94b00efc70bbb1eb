package sharding

import (
	"strings"
	"testing"

	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
)

func TestPlacementNames(t *testing.T) {
	g := NewWithT(t)
	a := placementName(types.NamespacedName{Namespace: "a", Name: "b.c"}, "d")
	b := placementName(types.NamespacedName{Namespace: "a", Name: "b"}, "c.d")
	g.Expect(a).NotTo(Equal(b), "names with dots must not collide")
	long := placementName(types.NamespacedName{Namespace: strings.Repeat("n", 63), Name: strings.Repeat("d", 253)}, strings.Repeat("m", 253))
	g.Expect(validation.IsDNS1123Subdomain(long)).To(BeEmpty())
	g.Expect(validation.IsDNS1123Subdomain(a)).To(BeEmpty())
}
