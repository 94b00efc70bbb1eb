package dbstatus

import (
	"fmt"
	"slices"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	fleetv1alpha1 "github.com/fleetdb/fleetdb/apis/v1alpha1"
	"github.com/fleetdb/fleetdb/internal/statusmsg"
)

// maxLeftBehind bounds status.leftBehind (the CRD's MaxItems).
const maxLeftBehind = 64

// LeftBehindMessage says what a member that left the registry kept of the
// Database (its status entry and the Event of its teardown).
func LeftBehindMessage(db *fleetv1alpha1.Database, member string) string {
	return fmt.Sprintf("member %s left the registry while the Database was placed on it: nothing was removed there; "+
		"its StatefulSet, Services, ConfigMap, credentials Secret and PersistentVolumeClaims of %s remain in namespace %s of that cluster",
		member, db.Name, db.Namespace)
}

// LeftBehind is status.leftBehind: the earlier entries, less members
// placed again, plus the members that just left.
func LeftBehind(db *fleetv1alpha1.Database, left []string, targets map[string]bool, now time.Time) []fleetv1alpha1.LeftBehind {
	var out []fleetv1alpha1.LeftBehind
	for _, e := range db.Status.LeftBehind {
		if !targets[e.Cluster] && !slices.Contains(left, e.Cluster) {
			out = append(out, e)
		}
	}
	for _, name := range left {
		if targets[name] {
			continue
		}
		out = append(out, fleetv1alpha1.LeftBehind{Cluster: name, Message: statusmsg.Bound(LeftBehindMessage(db, name)), Since: metav1.NewTime(now)})
	}
	slices.SortFunc(out, func(a, b fleetv1alpha1.LeftBehind) int { return strings.Compare(a.Cluster, b.Cluster) })
	if len(out) > maxLeftBehind {
		out = out[:maxLeftBehind]
	}
	return out
}
