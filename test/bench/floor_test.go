package main

import (
	"bytes"
	"testing"

	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	fleetv1alpha1 "github.com/fleetdb/fleetdb/apis/v1alpha1"
	"github.com/fleetdb/fleetdb/member"
)

// TestFloorSendsTheHubsBodies: the floor's objects are the bodies member.Apply
// would send for the same Database, but for the managed-by label, which
// names the floor everywhere fleetdb's value stood (labels, selectors,
// templates) so that the hub never takes them for its own.
func TestFloorSendsTheHubsBodies(t *testing.T) {
	g := NewWithT(t)
	b := &bench{members: []string{"m1"}, creds: map[string][]byte{"username": []byte("app"), "password": []byte("secret")}}
	floor, err := b.directObjects("orders", "m1", 3, 2)
	g.Expect(err).NotTo(HaveOccurred())

	db := b.newDatabase("orders", b.members, 1)
	db.Namespace, db.UID, db.Generation, db.Spec.Replicas = nsDirect, "direct-orders", 2, 3
	rendered, err := member.Render(member.Params{Database: db, Cluster: "m1", Credentials: b.creds})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(floor).To(HaveLen(len(rendered)))

	fleetdbLabel := []byte(`"` + fleetv1alpha1.LabelManagedBy + `":"` + fleetv1alpha1.ManagedByValue + `"`)
	floorLabel := []byte(`"` + fleetv1alpha1.LabelManagedBy + `":"` + directManagedBy + `"`)
	for i, obj := range rendered {
		hub, err := member.ApplyBody(obj, nil)
		g.Expect(err).NotTo(HaveOccurred())
		want, err := hub.MarshalJSON()
		g.Expect(err).NotTo(HaveOccurred())
		got, err := floor[i].MarshalJSON()
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(bytes.Contains(got, fleetdbLabel)).To(BeFalse(), "%s still says managed-by fleetdb", floor[i].GetKind())
		g.Expect(bytes.Count(got, floorLabel)).To(Equal(bytes.Count(want, fleetdbLabel)), floor[i].GetKind())
		g.Expect(string(got)).To(Equal(string(bytes.ReplaceAll(want, fleetdbLabel, floorLabel))), floor[i].GetKind())
	}
}

// TestFloorKinds: the minimal floor applies only the object that creates the
// workload (the CloudNativePG Cluster of the bench's postgres Databases),
// the parallel floor every object but the Namespace, the sequential floor
// everything in render order; each kind has a name of its own.
func TestFloorKinds(t *testing.T) {
	g := NewWithT(t)
	b := &bench{members: []string{"m1"}, creds: map[string][]byte{"username": []byte("app"), "password": []byte("secret")}}
	objs, err := b.directObjects("orders", "m1", 2, 1)
	g.Expect(err).NotTo(HaveOccurred())
	kinds := func(k floorKind) []string {
		var out []string
		for _, u := range floorObjects(objs, k) {
			out = append(out, u.GetKind())
		}
		return out
	}
	g.Expect(kinds(floorMinimal)).To(Equal([]string{"Cluster"}))
	g.Expect(floorObjects(objs, floorMinimal)[0].GroupVersionKind()).To(Equal(member.CNPGClusterGVK))
	g.Expect(kinds(floorParallel)).To(Equal([]string{"Secret", "Service", "Cluster"}))
	g.Expect(kinds(floorSequential)).To(Equal([]string{"Namespace", "Secret", "Service", "Cluster"}))
	g.Expect([]string{floorName("x", floorMinimal), floorName("x", floorParallel), floorName("x", floorSequential)}).
		To(Equal([]string{"x-min", "x-all", "x"}))
}

// TestPeerManifestWork: the peer gets the parallel floor's objects (same
// bodies, same relabelling) in one ManifestWork per member, in the member's
// namespace on the hub, the workload first (its agent applies in list order).
func TestPeerManifestWork(t *testing.T) {
	g := NewWithT(t)
	b := &bench{members: []string{"m1"}, creds: map[string][]byte{"username": []byte("app"), "password": []byte("secret")}}
	name := floorName("orders", floorPeerOCM)
	g.Expect(name).To(Equal("orders-ocm"))
	objs, err := b.directObjects(name, "m1", 2, 1)
	g.Expect(err).NotTo(HaveOccurred())
	mw := manifestWork("m1", name, floorObjects(objs, floorParallel))
	g.Expect(mw.GroupVersionKind()).To(Equal(manifestWorkGVK))
	g.Expect(mw.GetNamespace()).To(Equal("m1"))
	manifests, _, _ := unstructured.NestedSlice(mw.Object, "spec", "workload", "manifests")
	var kinds []string
	for _, m := range manifests {
		kinds = append(kinds, (&unstructured.Unstructured{Object: m.(map[string]any)}).GetKind())
	}
	g.Expect(kinds).To(Equal([]string{"Cluster", "Secret", "Service"}))
	g.Expect(b.floorKinds()).NotTo(ContainElement(floorPeerOCM), "no peer running: not in the rotation")
	b.peer = &ocmPeer{}
	g.Expect(b.floorKinds()).To(Equal([]floorKind{floorMinimal, floorParallel, floorSequential, floorPeerOCM}))
}

// TestDeadKwok: members of a fleet with no kwok controller running are listed.
func TestDeadKwok(t *testing.T) {
	g := NewWithT(t)
	g.Expect(deadKwok(t.TempDir(), []string{"member-1", "member-2"}, "fleetdb-bench")).To(Equal([]string{"member-1", "member-2"}))
}
