package member

import (
	"strings"
	"testing"
	"unicode/utf8"
)

// A member's status message comes from CloudNativePG's or the StatefulSet
// controller's words, which may be any UTF-8: bounding it must never cut a
// character in half (the API server refuses a status that is not UTF-8).
func TestBoundMessageKeepsRunesWhole(t *testing.T) {
	for _, prefix := range []string{"", "a", "ab"} {
		msg := prefix + strings.Repeat("é—", maxMessage) // 2- and 3-byte runes at every offset
		got := boundMessage(msg)
		if len(got) > maxMessage {
			t.Fatalf("prefix %q: %d bytes, bound is %d", prefix, len(got), maxMessage)
		}
		if !utf8.ValidString(got) {
			t.Fatalf("prefix %q: bounded message is not valid UTF-8: %q", prefix, got[len(got)-8:])
		}
		if !strings.HasPrefix(msg, strings.TrimSuffix(got, "...")) {
			t.Fatalf("prefix %q: bounded message is not a prefix of the original", prefix)
		}
	}
	if short := "ready"; boundMessage(short) != short {
		t.Fatalf("a short message changed: %q", boundMessage(short))
	}
}
