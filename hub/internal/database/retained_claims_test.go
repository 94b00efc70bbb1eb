package database

import (
	"testing"

	"k8s.io/apimachinery/pkg/types"

	"github.com/fleetdb/fleetdb/hub/internal/tombstones"
)

func TestVouchesForClaim(t *testing.T) {
	record := &tombstones.Retained{UID: "old", Members: []string{"m1"}}
	skipped := []tombstones.Tombstone{{Members: []string{"m2"}}}
	for _, tc := range []struct {
		name   string
		src    recoverySources
		from   types.UID
		member string
		want   bool
	}{
		{"no record, no annotation", recoverySources{}, "old", "m1", false},
		{"the record's UID in a member it names", recoverySources{retained: record}, "old", "m1", true},
		{"the record's UID in a member it does not name", recoverySources{retained: record}, "old", "m3", false},
		{"another UID than the record's", recoverySources{retained: record}, "other", "m1", false},
		{"no UID in a member the record names", recoverySources{retained: record}, "", "m1", true},
		{"no UID and no record", recoverySources{told: "old"}, "", "m1", false},
		{"the annotation names the UID", recoverySources{told: "old"}, "old", "m3", true},
		{"the annotation names another UID", recoverySources{told: "other"}, "old", "m1", false},
		{"a skipped teardown's tombstone for the member", recoverySources{skipped: skipped, skippedUIDs: []types.UID{"old"}}, "old", "m2", true},
		{"a skipped teardown's tombstone for another member", recoverySources{skipped: skipped, skippedUIDs: []types.UID{"old"}}, "old", "m1", false},
	} {
		if got := tc.src.vouchesForClaim(tc.from, tc.member); got != tc.want {
			t.Errorf("%s: vouchesForClaim %v, want %v", tc.name, got, tc.want)
		}
	}
}
