package member

import (
	"bytes"
	"fmt"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleetv1alpha1 "github.com/fleetdb/fleetdb/apis/v1alpha1"
)

// Owner names whose member objects Teardown may act on: the hub Database
// namespace/name, as written by the hub HubID. Objects labelled with another
// hub's identity are never the Owner's. Objects written before hub
// identities existed (no LabelHubID) are the Owner's only when they carry
// its Database UID. An empty HubID matches every hub (tools and tests).
type Owner struct {
	Namespace, Name string
	// UID is the hub Database's UID; it claims unlabelled (older) objects.
	UID types.UID
	// HubID is the identity of the hub acting.
	HubID string
	// ExactUID, when set, leaves out of what Teardown deletes every object
	// not labelled with UID (on top of the hub check): the reconnect sweep
	// acts for one Database UID (its tombstone), never deletes what a later
	// Database of the same name wrote or relabelled. Releasing (Retain,
	// Orphan), which deletes nothing, still acts on every UID of the name,
	// and claims wait for every StatefulSet of the name.
	ExactUID bool
}

// anyUID is o without ExactUID.
func (o Owner) anyUID() Owner {
	o.ExactUID = false
	return o
}

// owns reports whether obj, found by SelectorFor(o.Namespace, o.Name), is the Owner's.
func (o Owner) owns(obj client.Object) bool {
	if o.ExactUID && obj.GetLabels()[fleetv1alpha1.LabelDatabaseUID] != string(o.UID) {
		return false
	}
	if o.HubID == "" {
		return true
	}
	l := obj.GetLabels()
	switch l[fleetv1alpha1.LabelHubID] {
	case o.HubID:
		return true
	case "":
		return o.UID != "" && l[fleetv1alpha1.LabelDatabaseUID] == string(o.UID)
	}
	return false
}

// StampHub labels every rendered object (and the claims of a StatefulSet's
// volumeClaimTemplates) with the hub identity hubID; the Namespace, which
// may be the user's, is left bare. Apply then refuses objects of another hub.
func StampHub(objs []client.Object, hubID string) {
	if hubID == "" {
		return
	}
	for _, obj := range objs {
		if _, ok := obj.(*corev1.Namespace); ok {
			continue
		}
		obj.SetLabels(withLabel(obj.GetLabels(), fleetv1alpha1.LabelHubID, hubID))
		if sts, ok := obj.(*appsv1.StatefulSet); ok {
			for i := range sts.Spec.VolumeClaimTemplates {
				t := &sts.Spec.VolumeClaimTemplates[i]
				t.Labels = withLabel(t.Labels, fleetv1alpha1.LabelHubID, hubID)
			}
		}
	}
}

func withLabel(l map[string]string, k, v string) map[string]string {
	out := make(map[string]string, len(l)+1)
	for key, val := range l {
		out[key] = val
	}
	out[k] = v
	return out
}

// guardOwnership refuses, with a *ConflictError, to write desired over cur
// (an object already labelled for the same hub Database namespace/name) when:
//
//   - cur names another hub (LabelHubID): that hub owns it;
//   - cur names no hub (written before hub identities) and another Database
//     UID: it is adopted only by the Database that wrote it (a Secret a
//     Retain teardown released carries no fleetdb label at all: that case
//     is the next one's);
//   - cur is the credentials Secret of another Database UID (a deleted
//     Database of the same name) holding another password: overwriting it
//     would lock clients and the retained data out. The hub recovers the
//     password from such a Secret instead of generating one (see hub).
func guardOwnership(desired, cur client.Object) error {
	want, have := desired.GetLabels(), cur.GetLabels()
	conflict := func(why string) error {
		return &ConflictError{Kind: kindOf(desired), Namespace: cur.GetNamespace(), Name: cur.GetName(), Reason: why}
	}
	wantHub, haveHub := want[fleetv1alpha1.LabelHubID], have[fleetv1alpha1.LabelHubID]
	sameUID := have[fleetv1alpha1.LabelDatabaseUID] == want[fleetv1alpha1.LabelDatabaseUID]
	released := have[fleetv1alpha1.LabelManagedBy] == ""
	switch {
	case wantHub != "" && haveHub != "" && haveHub != wantHub:
		return conflict("written by another fleetdb hub")
	case wantHub != "" && haveHub == "" && !sameUID && !released:
		return conflict("written for another Database of this name, before hub identities; not adopted")
	}
	ds, ok1 := desired.(*corev1.Secret)
	cs, ok2 := cur.(*corev1.Secret)
	if ok1 && ok2 && !sameUID && !bytes.Equal(ds.Data["password"], cs.Data["password"]) {
		uid := have[fleetv1alpha1.LabelDatabaseUID]
		if uid == "" {
			uid = cur.GetAnnotations()[fleetv1alpha1.AnnotationReleasedUID]
		}
		return conflict(fmt.Sprintf("holds the password of an earlier Database of this name (uid %s); not replaced: "+
			"to run on what it guards, set the Database's annotation %s to that UID and delete its hub Secret; "+
			"to start afresh, remove this Secret (and that Database's volume claims) from the member",
			uid, fleetv1alpha1.AnnotationAdoptCredentials))
	}
	return nil
}

func kindOf(obj client.Object) string {
	if k := obj.GetObjectKind().GroupVersionKind().Kind; k != "" {
		return k
	}
	return fmt.Sprintf("%T", obj)
}
