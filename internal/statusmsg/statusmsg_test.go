package statusmsg

import (
	"strings"
	"testing"
	"unicode/utf8"

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
		g.Expect(RedactAddresses(in)).To(Equal(want), in)
	}
}

func TestTruncateKeepsRunesWhole(t *testing.T) {
	g := NewWithT(t)
	g.Expect(Truncate("short", 10)).To(Equal("short"))
	g.Expect(Truncate("abcdefghij", 8)).To(Equal("abcde..."))
	// "é" is two bytes, "日" three, "🙂" four: a byte cut lands inside each.
	for _, s := range []string{strings.Repeat("é", 300), strings.Repeat("日本", 200), strings.Repeat("🙂", 150), "a" + strings.Repeat("🙂", 150)} {
		for _, n := range []int{3, 4, 5, 6, 7, 100, 101, 102, 103, Limit} {
			got := Truncate(s, n)
			g.Expect(utf8.ValidString(got)).To(BeTrue(), "%q cut to %d", s[:8], n)
			g.Expect(len(got)).To(BeNumerically("<=", n))
			g.Expect(got).To(HaveSuffix("..."))
			g.Expect(s).To(HavePrefix(strings.TrimSuffix(got, "...")))
		}
	}
	long := strings.Repeat("日", 400)
	g.Expect(utf8.ValidString(Bound(long))).To(BeTrue())
	g.Expect(len(Bound(long))).To(BeNumerically("<=", Limit))
}
