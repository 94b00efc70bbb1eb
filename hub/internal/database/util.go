package database

import (
	"maps"
	"slices"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/fleetdb/fleetdb/hub/internal/queue"
)

func metav1Time(t time.Time) metav1.Time {
	return metav1.NewTime(t.Truncate(time.Second))
}

func setOf(list []string) map[string]bool {
	m := make(map[string]bool, len(list))
	for _, s := range list {
		m[s] = true
	}
	return m
}

func sortedKeys(m map[string]bool) []string {
	return slices.Sorted(maps.Keys(m))
}

// minPositive is the sooner of two requeue delays (queue.Sooner).
func minPositive(a, b time.Duration) time.Duration { return queue.Sooner(a, b) }

// ptrTo returns a pointer to v.
func ptrTo[T any](v T) *T { return &v }
