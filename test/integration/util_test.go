package integration

import (
	"os"
	"strings"

	. "github.com/onsi/gomega"
	eventsv1 "k8s.io/api/events/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

type eventsv1List struct{ eventsv1.EventList }

func writeFile(path string, b []byte) error { return os.WriteFile(path, b, 0o600) }

func lower(s string) string { return strings.ToLower(s) }

func contains(s, sub string) bool { return strings.Contains(s, sub) }

// eventSeen checks that an Event with the reason, whose note names text, was
// recorded in the namespace.
func (e *env) eventSeen(ns, reason, text string) func(g Gomega) {
	return func(g Gomega) {
		var evs eventsv1List
		g.Expect(e.hub.List(e.ctx, &evs.EventList, client.InNamespace(ns))).To(Succeed())
		found := false
		var seen []string
		for _, ev := range evs.Items {
			found = found || (ev.Reason == reason && contains(ev.Note, text))
			seen = append(seen, ev.Reason+": "+ev.Note)
		}
		g.Expect(found).To(BeTrue(), "no %s event naming %s among %v", reason, text, seen)
	}
}
