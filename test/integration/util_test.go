package integration

import (
	"os"
	"strings"

	eventsv1 "k8s.io/api/events/v1"
)

type eventsv1List struct{ eventsv1.EventList }

func writeFile(path string, b []byte) error { return os.WriteFile(path, b, 0o600) }

func lower(s string) string { return strings.ToLower(s) }

func contains(s, sub string) bool { return strings.Contains(s, sub) }
