package hub

import (
	"testing"

	. "github.com/onsi/gomega"
)

func TestRedactAddresses(t *testing.T) {
	g := NewWithT(t)
	for in, want := range map[string]string{
		`Patch "https://10.0.3.7:6443/apis/apps/v1/namespaces/a/statefulsets/x": dial tcp 10.0.3.7:6443: connect: connection refused`: `Patch "<member address>": dial tcp <member address>: connect: connection refused`,
		`Get "https://eu-1.internal.example:6443/api": EOF`:                                                                           `Get "<member address>": EOF`,
		`dial tcp [fd00::1]:6443: i/o timeout`:                                                                                        `dial tcp <member address>: i/o timeout`,
		`statefulsets.apps "orders" is forbidden`:                                                                                     `statefulsets.apps "orders" is forbidden`,
		`running generation 3`: `running generation 3`,
	} {
		g.Expect(redactAddresses(in)).To(Equal(want), in)
	}
}
