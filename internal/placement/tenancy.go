package placement

import (
	"fmt"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	fleetv1alpha1 "github.com/fleetdb/fleetdb/apis/v1alpha1"
)

// NamespaceAllowed reports whether m admits Databases of a namespace with
// nsLabels: its spec.namespaceSelector matches them (an unset selector admits
// none, {} all). An invalid selector admits none and is returned as the error.
func NamespaceAllowed(m *fleetv1alpha1.MemberCluster, nsLabels map[string]string) (bool, error) {
	if m.Spec.NamespaceSelector == nil {
		return false, nil
	}
	sel, err := metav1.LabelSelectorAsSelector(m.Spec.NamespaceSelector)
	if err != nil {
		return false, err
	}
	return sel.Matches(labels.Set(nsLabels)), nil
}

// NotAllowedMessage is the Stalled message of a Database naming members its namespace may not use.
func NotAllowedMessage(db *fleetv1alpha1.Database, denied []string) string {
	return fmt.Sprintf("namespace %s may not place Databases on member(s) %s (their spec.namespaceSelector does not admit it); "+
		"ask the platform team, or remove them from spec.placement.clusterNames", db.Namespace, strings.Join(denied, ", "))
}

// CurrentMembers are the members a Database is placed on now (as the hub
// counts them: its status entries not being torn down).
func CurrentMembers(db *fleetv1alpha1.Database) []string {
	out := make([]string, 0, len(db.Status.Clusters))
	for _, c := range db.Status.Clusters {
		if c.Phase != fleetv1alpha1.ClusterPhaseDeleting {
			out = append(out, c.Name)
		}
	}
	return out
}
