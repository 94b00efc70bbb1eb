package member

import (
	"testing"

	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"

	fleetv1alpha1 "github.com/fleetdb/fleetdb/apis/v1alpha1"
)

func internalObjects(t *testing.T, traceparent string) []*appsv1.StatefulSet {
	t.Helper()
	db := &fleetv1alpha1.Database{
		ObjectMeta: metav1.ObjectMeta{Name: "orders", Namespace: "team-a", UID: "uid-1", Generation: 2},
		Spec: fleetv1alpha1.DatabaseSpec{
			Engine: fleetv1alpha1.EnginePostgres, Replicas: 2,
			Backend: fleetv1alpha1.BackendStatefulSet,
			Storage: fleetv1alpha1.StorageSpec{Size: resource.MustParse("1Gi")},
		},
	}
	objs, err := Render(Params{Database: db, Cluster: "m1", Traceparent: traceparent,
		Credentials: map[string][]byte{CredentialsUsernameKey: []byte("u"), CredentialsPasswordKey: []byte("p")}})
	if err != nil {
		t.Fatal(err)
	}
	var out []*appsv1.StatefulSet
	for _, o := range objs {
		if sts, ok := o.(*appsv1.StatefulSet); ok {
			out = append(out, sts)
		}
	}
	return out
}

func TestObjectHashIgnoresTraceparentOnly(t *testing.T) {
	g := NewWithT(t)
	a := internalObjects(t, "00-aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa-bbbbbbbbbbbbbbbb-01")[0]
	b := internalObjects(t, "00-cccccccccccccccccccccccccccccccc-dddddddddddddddd-01")[0]
	ha, err := objectHash(a)
	g.Expect(err).NotTo(HaveOccurred())
	hb, err := objectHash(b)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(ha).To(Equal(hb), "a new trace alone must not cause a write")
	g.Expect(a.Annotations).To(HaveKey(fleetv1alpha1.AnnotationTraceparent), "hashing must not modify the object")

	b.Annotations[fleetv1alpha1.AnnotationGeneration] = "3"
	hc, err := objectHash(b)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(hc).NotTo(Equal(ha), "a new hub generation is written so that Observe can report it")
}

func TestApplyObject(t *testing.T) {
	g := NewWithT(t)
	sts := internalObjects(t, "")[0]
	sts.ManagedFields = []metav1.ManagedFieldsEntry{{Manager: "x"}}

	u, err := ApplyBody(sts, nil)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(u.GetAPIVersion()).To(Equal("apps/v1"))
	g.Expect(u.GetKind()).To(Equal("StatefulSet"))
	g.Expect(u.Object).NotTo(HaveKey("status"), "fleetdb must not claim status fields")
	g.Expect(u.GetManagedFields()).To(BeNil())
	g.Expect(u.Object["metadata"]).NotTo(HaveKey("creationTimestamp"))
	templates, _, _ := unstructured.NestedSlice(u.Object, "spec", "volumeClaimTemplates")
	g.Expect(templates).To(HaveLen(1))
	g.Expect(templates[0]).NotTo(HaveKey("status"))
	g.Expect(sts.ManagedFields).To(HaveLen(1), "the rendered object is not modified")

	// The live StatefulSet's volumeClaimTemplates are immutable and kept when they differ.
	live := sts.DeepCopy()
	live.Spec.VolumeClaimTemplates[0].Labels[fleetv1alpha1.LabelDatabaseUID] = "uid-of-a-deleted-database"
	u, err = ApplyBody(sts, live)
	g.Expect(err).NotTo(HaveOccurred())
	uid, _, _ := unstructured.NestedString(u.Object["spec"].(map[string]any)["volumeClaimTemplates"].([]any)[0].(map[string]any),
		"metadata", "labels", fleetv1alpha1.LabelDatabaseUID)
	g.Expect(uid).To(Equal("uid-of-a-deleted-database"))

	// Equal templates are sent as rendered.
	u, err = ApplyBody(sts, sts.DeepCopy())
	g.Expect(err).NotTo(HaveOccurred())
	uid, _, _ = unstructured.NestedString(u.Object["spec"].(map[string]any)["volumeClaimTemplates"].([]any)[0].(map[string]any),
		"metadata", "labels", fleetv1alpha1.LabelDatabaseUID)
	g.Expect(uid).To(Equal("uid-1"))
}

func TestLiveVersion(t *testing.T) {
	g := NewWithT(t)
	g.Expect(liveVersion(&metav1.ObjectMeta{Generation: 3, ResourceVersion: "17"})).To(Equal("g3"))
	g.Expect(liveVersion(&metav1.ObjectMeta{ResourceVersion: "17"})).To(Equal("rv17"))
}

func TestMemoForget(t *testing.T) {
	g := NewWithT(t)
	m := NewMemo()
	gvk := appsv1.SchemeGroupVersion.WithKind("StatefulSet")
	m.put(memoKey{cluster: "m1", gvk: gvk, namespace: "team-a", name: "orders"}, memoEntry{database: "team-a/orders"})
	m.put(memoKey{cluster: "m1", gvk: gvk, namespace: "team-a", name: "users"}, memoEntry{database: "team-a/users"})
	m.put(memoKey{cluster: "m2", gvk: gvk, namespace: "team-a", name: "orders"}, memoEntry{database: "team-a/orders"})
	g.Expect(m.len()).To(Equal(3))

	m.ForgetDatabase("m1", "team-a", "orders")
	g.Expect(m.len()).To(Equal(2))
	_, ok := m.get(memoKey{cluster: "m2", gvk: gvk, namespace: "team-a", name: "orders"})
	g.Expect(ok).To(BeTrue(), "other clusters keep their entries")

	m.Forget("m1")
	g.Expect(m.len()).To(Equal(1))
	m.Forget("m2")
	g.Expect(m.len()).To(Equal(0))

	var nilMemo *Memo
	_, ok = nilMemo.get(memoKey{})
	g.Expect(ok).To(BeFalse(), "a nil Memo remembers nothing")
}

// TestUpToDateCacheBehindOwnWrite: a cache that has not seen fleetdb's last
// write yet (same object, older generation) is no reason to write again; a
// newer generation (someone's change), another object of the same name, or a
// new rendering is.
func TestUpToDateCacheBehindOwnWrite(t *testing.T) {
	g := NewWithT(t)
	desired := internalObjects(t, "")[0]
	desired.SetGroupVersionKind(appsv1.SchemeGroupVersion.WithKind("StatefulSet"))
	hash, err := objectHash(desired)
	g.Expect(err).NotTo(HaveOccurred())
	key := memoKey{cluster: "m1", gvk: desired.GroupVersionKind(), namespace: desired.Namespace, name: desired.Name}
	m := NewMemo()
	m.put(key, memoEntry{hash: hash, version: "g5", resourceVersion: "50", uid: "u1", generation: 5, database: "team-a/orders"})

	live := func(uid string, generation int64) *item {
		l := desired.DeepCopy()
		l.UID, l.Generation, l.ResourceVersion = types.UID(uid), generation, "40"
		return &item{desired: desired, gvk: key.gvk, key: key, hash: hash, live: l}
	}
	g.Expect(live("u1", 5).upToDate(m)).To(BeTrue(), "the live object is the write")
	g.Expect(live("u1", 4).upToDate(m)).To(BeTrue(), "the cache has not seen the write yet")
	g.Expect(live("u1", 6).upToDate(m)).To(BeFalse(), "someone changed the spec after the write")
	g.Expect(live("u2", 4).upToDate(m)).To(BeFalse(), "another object of the same name")
	g.Expect(live("u1", 0).upToDate(m)).To(BeFalse(), "no generation: nothing to order by")

	newRendering := live("u1", 4)
	newRendering.hash = "other"
	g.Expect(newRendering.upToDate(m)).To(BeFalse(), "a new rendering is written")
}
