package database

import (
	"time"

	"k8s.io/apimachinery/pkg/types"
)

// statusHoldDelay paces the routine status writes of a Database (see
// dbstatus.Routine): one is written this long after the first reconcile that
// held it back, so that a Database that turns Ready (or is gone) within that
// time never shows its steps on the way, and one that takes longer shows
// them at most once per statusHoldDelay. In a burst of new Databases the
// first reconcile of each then makes one hub round trip (finalizer and
// credentials) instead of two, and a deletion's none: the Database queue
// drains that much sooner. Ready, Degraded, Failed and a Ready Database
// leaving Ready still go out at once.
const statusHoldDelay = time.Second

// holdStatus says how long a routine status of key is still held back: it
// goes out statusHoldDelay after the first reconcile that held it since the
// last write (0: write it now).
func (s *state) holdStatus(key types.NamespacedName, now time.Time) time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	since, ok := s.statusHeld[key]
	if !ok {
		s.statusHeld[key] = now
		return statusHoldDelay
	}
	if left := since.Add(statusHoldDelay).Sub(now); left > 0 {
		return left
	}
	return 0
}

// statusSettled: key's status was written, or nothing differs any more;
// the next routine status is held anew.
func (s *state) statusSettled(key types.NamespacedName) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.statusHeld, key)
}
