package hub

import "regexp"

// addresses matches what names a member's endpoint in an error: URLs, and
// IPv4 or [IPv6] addresses with an optional port.
var addresses = regexp.MustCompile(`[a-zA-Z][a-zA-Z0-9+.-]*://[^\s"']+|\[[0-9a-fA-F:.]+\](:\d+)?|\b\d{1,3}(\.\d{1,3}){3}(:\d+)?\b`)

// redactAddresses removes member addresses from a message bound for a
// tenant-visible Database status (the platform-visible MemberCluster status
// keeps them).
func redactAddresses(msg string) string {
	return addresses.ReplaceAllString(msg, "<member address>")
}
