package member

import (
	"k8s.io/apimachinery/pkg/labels"

	fleetv1alpha1 "github.com/fleetdb/fleetdb/apis/v1alpha1"
)

// Labels are the labels that mark a member object as fleetdb's and name the
// hub Database it belongs to.
func Labels(db *fleetv1alpha1.Database) map[string]string {
	return map[string]string{
		fleetv1alpha1.LabelManagedBy:         fleetv1alpha1.ManagedByValue,
		fleetv1alpha1.LabelDatabaseNamespace: db.Namespace,
		fleetv1alpha1.LabelDatabaseName:      db.Name,
		fleetv1alpha1.LabelDatabaseUID:       string(db.UID),
	}
}

// SelectorFor selects the member objects of the hub Database namespace/name.
// It leaves the UID out on purpose: leftovers of a deleted Database that was
// recreated under the same name must still be found (and adopted or collected).
func SelectorFor(namespace, name string) labels.Selector {
	return labels.SelectorFromValidatedSet(labels.Set{
		fleetv1alpha1.LabelManagedBy:         fleetv1alpha1.ManagedByValue,
		fleetv1alpha1.LabelDatabaseNamespace: namespace,
		fleetv1alpha1.LabelDatabaseName:      name,
	})
}

// releasedLabels are the labels Teardown strips from the objects it keeps, so
// that SelectorFor no longer finds them and nothing marks them as fleetdb's.
var releasedLabels = []string{
	fleetv1alpha1.LabelManagedBy,
	fleetv1alpha1.LabelDatabaseNamespace,
	fleetv1alpha1.LabelDatabaseName,
	fleetv1alpha1.LabelDatabaseUID,
	fleetv1alpha1.LabelHubID,
}

// objectLabels are the labels of every rendered object (and of the pods and
// PVCs the StatefulSet creates): Labels plus the app.kubernetes.io ones.
func objectLabels(db *fleetv1alpha1.Database) map[string]string {
	l := Labels(db)
	l[fleetv1alpha1.LabelName] = string(db.Spec.Engine)
	l[fleetv1alpha1.LabelInstance] = db.Name
	return l
}

// podSelector selects the Database's pods. It is part of the StatefulSet's
// immutable spec.selector, so it holds only what never changes for a
// Database name: the engine (immutable in the API), the name and managed-by.
func podSelector(db *fleetv1alpha1.Database) map[string]string {
	return map[string]string{
		fleetv1alpha1.LabelManagedBy: fleetv1alpha1.ManagedByValue,
		fleetv1alpha1.LabelName:      string(db.Spec.Engine),
		fleetv1alpha1.LabelInstance:  db.Name,
	}
}

// ownedBy reports whether an object with these labels is fleetdb's object for
// the hub Database namespace/name. The UID is not compared: an object left by
// a deleted Database of the same name may be adopted.
func ownedBy(objLabels map[string]string, namespace, name string) bool {
	return objLabels[fleetv1alpha1.LabelManagedBy] == fleetv1alpha1.ManagedByValue &&
		objLabels[fleetv1alpha1.LabelDatabaseNamespace] == namespace &&
		objLabels[fleetv1alpha1.LabelDatabaseName] == name
}

// hasAll reports whether have contains every key of want with the same value.
func hasAll(have, want map[string]string) bool {
	for k, v := range want {
		if got, ok := have[k]; !ok || got != v {
			return false
		}
	}
	return true
}
