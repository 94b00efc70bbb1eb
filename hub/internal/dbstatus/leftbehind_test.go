package dbstatus

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	fleetv1alpha1 "github.com/fleetdb/fleetdb/apis/v1alpha1"
)

func TestLeftBehindStatus(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	db := &fleetv1alpha1.Database{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "db"}}
	db.Status.LeftBehind = []fleetv1alpha1.LeftBehind{{Cluster: "old", Message: "m", Since: metav1.NewTime(now)}, {Cluster: "back", Message: "m"}}
	got := LeftBehind(db, []string{"gone"}, map[string]bool{"back": true}, now)
	if len(got) != 2 || got[0].Cluster != "gone" || got[1].Cluster != "old" {
		t.Fatalf("leftBehind: %+v; want gone (new) and old (kept), not back (placed again)", got)
	}
}
