// Package statusmsg shapes the messages fleetdb writes into an object's
// status: one rune-safe truncation to the API's bounds and the redaction of
// member addresses from what a tenant reads. It is pure.
package statusmsg

import (
	"fmt"
	"regexp"
	"strings"
	"unicode/utf8"
)

// Limit is the bound of a status or condition message the hub writes
// (the API allows more; a bounded message keeps a status readable).
const Limit = 483

// marker ends a message that was cut.
const marker = "..."

// MaxNames bounds how many member names a message lists (Names), so a
// status stays small on large fleets.
const MaxNames = 10

// Names lists member names for a message: at most MaxNames, then how many more.
func Names(list []string) string {
	if len(list) <= MaxNames {
		return strings.Join(list, ", ")
	}
	return fmt.Sprintf("%s and %d more", strings.Join(list[:MaxNames], ", "), len(list)-MaxNames)
}

// NamesOrNone is Names, or "none" for an empty list.
func NamesOrNone(list []string) string {
	if len(list) == 0 {
		return "none"
	}
	return Names(list)
}

// Bound cuts s to at most Limit bytes (see Truncate).
func Bound(s string) string { return Truncate(s, Limit) }

// Truncate cuts s to at most n bytes, on a rune boundary (a status message
// is UTF-8: the API server refuses a write with a broken character), and
// marks the cut with "...". A string of at most n bytes is returned as is.
func Truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	if n < len(marker) {
		return marker[:max(n, 0)]
	}
	cut := n - len(marker)
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + marker
}

// addresses matches what names a member's endpoint in an error: URLs, and
// IPv4 or [IPv6] addresses with an optional port.
var addresses = regexp.MustCompile(`[a-zA-Z][a-zA-Z0-9+.-]*://[^\s"']+|\[[0-9a-fA-F:.]+\](:\d+)?|\b\d{1,3}(\.\d{1,3}){3}(:\d+)?\b`)

// RedactAddresses removes member addresses from a message bound for a
// tenant-visible Database status (the platform-visible MemberCluster status
// keeps them).
func RedactAddresses(msg string) string {
	return addresses.ReplaceAllString(msg, "<member address>")
}
