package integration

import (
	"bytes"
	"fmt"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleetv1alpha1 "github.com/fleetdb/fleetdb/apis/v1alpha1"
	"github.com/fleetdb/fleetdb/test/fleet"
)

// TestSafety runs the data-safety and tenancy behaviours (issue 10: items 1,
// 3, 4, 8, 10, 12) on one fleet of a hub and three members; each subtest
// uses its own namespace. The fairness subtest hangs members and runs last.
func TestSafety(t *testing.T) {
	// s4 and s5 are registered by the subtests under names of their own (a
	// second registration of s1-s3 would be refused as DuplicateCluster).
	extra := []string{"s4", "s5"}
	e := startEnvWith(t, envOptions{unregistered: extra, withoutCNPG: extra}, "s1", "s2", "s3", "s4", "s5")
	for _, m := range []string{"s1", "s2", "s3", "s4", "s5"} {
		e.sim.enable(m, true)
	}
	t.Run("credentials are recovered from a placed member only when told to", func(t *testing.T) { testCredentialsToldTo(t, e) })
	t.Run("a copy in an unplaced member is never taken", func(t *testing.T) { testCredentialsUnplaced(t, e) })
	t.Run("a planted released copy is never taken by a Database that never ran", func(t *testing.T) { testCredentialsPlantedReleased(t, e) })
	t.Run("another Database's password in a member is never overwritten", func(t *testing.T) { testCredentialsGuard(t, e) })
	t.Run("a Database recreated on retained data gets its password back", func(t *testing.T) { testCredentialsRetained(t, e) })
	t.Run("a retained password goes only to a Database this hub recorded it for", func(t *testing.T) { testRetainedOtherHub(t, e) })
	t.Run("retained claims no record vouches for are not started on", func(t *testing.T) { testRetainedClaimsUnvouched(t, e) })
	t.Run("retained CloudNativePG claims of another UID than the record's are not started on", func(t *testing.T) { testRetainedClaimsOtherRecord(t, e) })
	t.Run("dropping a member keeps its data by default", func(t *testing.T) { testPlacementRemoval(t, e) })
	t.Run("a PVC is never deleted in the pass that deletes its StatefulSet", func(t *testing.T) { testPVCAfterStatefulSet(t, e) })
	t.Run("a member removed from the registry is left alone and reported", func(t *testing.T) { testMemberRemoved(t, e) })
	t.Run("namespaces place only on the members that admit them", func(t *testing.T) { testTenancy(t, e) })
	t.Run("forbidden from a member is terminal for it", func(t *testing.T) { testForbidden(t, e) })
	t.Run("two hubs on one member never touch each other's objects", func(t *testing.T) { testTwoHubs(t, e) })
	t.Run("the sweep collects only what the hub recorded as gone, by its own policy", func(t *testing.T) { testSweepTombstones(t, e) })
	// These cut a member off: later subtests would wait for its caches.
	t.Run("missing credentials wait for an unreachable member", func(t *testing.T) { testCredentialsWait(t, e) })
	t.Run("slow members do not starve a fast one", func(t *testing.T) { testFairness(t, e) })
}

func (e *env) waitPhase(g Gomega, ns, name string, phase fleetv1alpha1.Phase) {
	g.Eventually(func(g Gomega) {
		db := e.getDB(ns, name)
		g.Expect(db.Status.Phase).To(Equal(phase), "%s/%s: %+v", ns, name, db.Status)
	}).WithTimeout(eventually).WithPolling(poll).Should(Succeed())
}

func (e *env) secretIn(member, ns, name string) (*corev1.Secret, error) {
	var s corev1.Secret
	err := e.member(member).Get(e.ctx, client.ObjectKey{Namespace: ns, Name: name}, &s)
	return &s, err
}

// forget removes a Database from the hub without any teardown and deletes
// its hub credentials Secret: what a hub restored from an older backup (or a
// Git repository without Secrets) looks like. Its member objects stay.
func (e *env) forget(g Gomega, ns, name string) {
	db := e.getDB(ns, name)
	patch := client.MergeFrom(db.DeepCopy())
	db.Finalizers = nil
	g.Expect(e.hub.Patch(e.ctx, db, patch)).To(Succeed())
	g.Expect(client.IgnoreNotFound(e.hub.Delete(e.ctx, db))).To(Succeed())
	g.Expect(client.IgnoreNotFound(e.hub.Delete(e.ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name + "-credentials"}}))).To(Succeed())
	g.Eventually(func() bool {
		return apierrors.IsNotFound(e.hub.Get(e.ctx, client.ObjectKey{Namespace: ns, Name: name}, &fleetv1alpha1.Database{}))
	}).WithTimeout(eventually).WithPolling(poll).Should(BeTrue())
}

// testCredentialsToldTo (item 1; issue 42 item 1): a Database recreated
// from Git after its hub Secret was lost takes the password its data was
// initialised with only when told to (fleetdb.io/adopt-credentials-of naming
// the earlier UID), and only from a member it is placed on. Untold, it gets
// a new password, and the member holding the earlier one shows Conflict
// (its Secret never replaced); told, with its hub Secret deleted, it
// recovers the earlier password.
func testCredentialsToldTo(t *testing.T, e *env) {
	g := NewWithT(t)
	ns := e.namespace("creds-any")
	g.Expect(e.hub.Create(e.ctx, newDB(ns, "keys", "s1", "s2"))).To(Succeed())
	e.waitPhase(g, ns, "keys", fleetv1alpha1.PhaseReady)
	orig, err := e.secretIn("s1", ns, "keys-credentials")
	g.Expect(err).NotTo(HaveOccurred())
	oldUID := orig.Labels[fleetv1alpha1.LabelDatabaseUID]
	g.Expect(oldUID).NotTo(BeEmpty())
	e.forget(g, ns, "keys")

	// Untold: a new password, s1's Secret untouched (Conflict there).
	g.Expect(e.hub.Create(e.ctx, newDB(ns, "keys", "s1"))).To(Succeed())
	hubKey := client.ObjectKey{Namespace: ns, Name: "keys-credentials"}
	g.Eventually(func(g Gomega) {
		var hubSecret corev1.Secret
		g.Expect(e.hub.Get(e.ctx, hubKey, &hubSecret)).To(Succeed())
		g.Expect(bytes.Equal(hubSecret.Data["password"], orig.Data["password"])).To(BeFalse(), "taken without being told to")
		db := e.getDB(ns, "keys")
		g.Expect(clusterEntry(db, "s1").Phase).To(Equal(fleetv1alpha1.ClusterPhaseConflict))
		g.Expect(clusterEntry(db, "s1").Message).To(ContainSubstring(fleetv1alpha1.AnnotationAdoptCredentials))
	}).WithTimeout(eventually).WithPolling(poll).Should(Succeed())
	g.Eventually(e.eventSeen(ns, "CredentialsNotAdopted", "s1")).WithTimeout(eventually).WithPolling(poll).Should(Succeed())
	s1, err := e.secretIn("s1", ns, "keys-credentials")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(s1.ResourceVersion).To(Equal(orig.ResourceVersion), "the earlier Database's Secret was written to")

	// Told: the annotation, and the hub Secret deleted (the documented steps).
	db := e.getDB(ns, "keys")
	patch := client.MergeFrom(db.DeepCopy())
	db.Annotations = map[string]string{fleetv1alpha1.AnnotationAdoptCredentials: oldUID}
	g.Expect(e.hub.Patch(e.ctx, db, patch)).To(Succeed())
	g.Expect(e.hub.Delete(e.ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "keys-credentials"}})).To(Succeed())
	g.Eventually(func(g Gomega) {
		var hubSecret corev1.Secret
		g.Expect(e.hub.Get(e.ctx, hubKey, &hubSecret)).To(Succeed())
		g.Expect(bytes.Equal(hubSecret.Data["password"], orig.Data["password"])).To(BeTrue(), "the password the data was initialised with")
		g.Expect(clusterEntry(e.getDB(ns, "keys"), "s1").Phase).NotTo(Equal(fleetv1alpha1.ClusterPhaseConflict))
	}).WithTimeout(eventually).WithPolling(poll).Should(Succeed())
	g.Eventually(e.eventSeen(ns, "CredentialsRecovered", "s1")).WithTimeout(eventually).WithPolling(poll).Should(Succeed())
	e.waitPhase(g, ns, "keys", fleetv1alpha1.PhaseReady)
	s1, err = e.secretIn("s1", ns, "keys-credentials")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(s1.Data["password"]).To(Equal(orig.Data["password"]))
}

// testCredentialsUnplaced (issue 42 item 1): a credentials Secret labelled
// for the Database's name (and this hub) in a member the Database is not
// placed on is never taken: the hub generates a new password.
func testCredentialsUnplaced(t *testing.T, e *env) {
	g := NewWithT(t)
	ns := e.namespace("creds-unplaced")
	g.Expect(e.member("s3").Create(e.ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})).To(Succeed())
	planted := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "fresh-credentials", Labels: map[string]string{
			fleetv1alpha1.LabelManagedBy: fleetv1alpha1.ManagedByValue, fleetv1alpha1.LabelDatabaseNamespace: ns,
			fleetv1alpha1.LabelDatabaseName: "fresh", fleetv1alpha1.LabelDatabaseUID: "an-earlier-uid",
			fleetv1alpha1.LabelHubID: e.hubID(g),
		}},
		Data: map[string][]byte{"username": []byte("app"), "password": []byte("chosen-by-s3s-admin")},
	}
	g.Expect(e.member("s3").Create(e.ctx, planted)).To(Succeed())

	g.Expect(e.hub.Create(e.ctx, newDB(ns, "fresh", "s1"))).To(Succeed())
	e.waitPhase(g, ns, "fresh", fleetv1alpha1.PhaseReady)
	var hubSecret corev1.Secret
	g.Expect(e.hub.Get(e.ctx, client.ObjectKey{Namespace: ns, Name: "fresh-credentials"}, &hubSecret)).To(Succeed())
	g.Expect(string(hubSecret.Data["password"]) == "chosen-by-s3s-admin").To(BeFalse(), "the password came from an unplaced member")
	s1, err := e.secretIn("s1", ns, "fresh-credentials")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(s1.Data["password"]).To(Equal(hubSecret.Data["password"]))
}

// testCredentialsPlantedReleased (issue 42 item 1): an unlabelled Secret
// that looks released by a Retain teardown (the deletion-policy annotation,
// even a released UID) in a placed member, for a Database that never ran
// and that the hub has no Retain record of, is never taken: a new password,
// and the member shows Conflict with its Secret untouched.
func testCredentialsPlantedReleased(t *testing.T, e *env) {
	g := NewWithT(t)
	ns := e.namespace("creds-planted")
	g.Expect(e.member("s2").Create(e.ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})).To(Succeed())
	planted := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "novel-credentials", Annotations: map[string]string{
			fleetv1alpha1.AnnotationDeletionPolicy: "Retain", fleetv1alpha1.AnnotationReleasedUID: "an-earlier-uid",
		}},
		Data: map[string][]byte{"username": []byte("app"), "password": []byte("chosen-by-s2s-admin")},
	}
	g.Expect(e.member("s2").Create(e.ctx, planted)).To(Succeed())

	g.Expect(e.hub.Create(e.ctx, newDB(ns, "novel", "s1", "s2"))).To(Succeed())
	g.Eventually(func(g Gomega) {
		var hubSecret corev1.Secret
		g.Expect(e.hub.Get(e.ctx, client.ObjectKey{Namespace: ns, Name: "novel-credentials"}, &hubSecret)).To(Succeed())
		g.Expect(string(hubSecret.Data["password"]) == "chosen-by-s2s-admin").To(BeFalse(), "the planted password was taken")
		db := e.getDB(ns, "novel")
		g.Expect(clusterEntry(db, "s2").Phase).To(Equal(fleetv1alpha1.ClusterPhaseConflict))
		g.Expect(clusterEntry(db, "s1").Phase).To(Equal(fleetv1alpha1.ClusterPhaseReady))
		s1, err := e.secretIn("s1", ns, "novel-credentials")
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(s1.Data["password"]).To(Equal(hubSecret.Data["password"]))
	}).WithTimeout(eventually).WithPolling(poll).Should(Succeed())
	s2, err := e.secretIn("s2", ns, "novel-credentials")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(s2.ResourceVersion).To(Equal(planted.ResourceVersion), "the planted Secret was written to")
}

// testCredentialsWait (item 1): with the hub Secret gone and the only member
// that holds the password unreachable, the Database waits (no new password)
// and goes on by itself once the member is back.
func testCredentialsWait(t *testing.T, e *env) {
	g := NewWithT(t)
	ns := e.namespace("creds-wait")
	g.Expect(e.hub.Create(e.ctx, newDB(ns, "vault", "s2"))).To(Succeed())
	e.waitPhase(g, ns, "vault", fleetv1alpha1.PhaseReady)
	orig, err := e.secretIn("s2", ns, "vault-credentials")
	g.Expect(err).NotTo(HaveOccurred())
	e.forget(g, ns, "vault")
	told := newDB(ns, "vault", "s2") // restored from Git, told to adopt the earlier password
	told.Annotations = map[string]string{fleetv1alpha1.AnnotationAdoptCredentials: orig.Labels[fleetv1alpha1.LabelDatabaseUID]}

	e.proxies["s2"].Cut()
	restored := false
	defer func() {
		if !restored {
			_ = e.proxies["s2"].Restore()
		}
	}()
	g.Eventually(func(g Gomega) {
		var mc fleetv1alpha1.MemberCluster
		g.Expect(e.hub.Get(e.ctx, client.ObjectKey{Name: "s2"}, &mc)).To(Succeed())
		g.Expect(condition(mc.Status.Conditions, fleetv1alpha1.MemberConditionReady).Status).NotTo(Equal(metav1.ConditionTrue))
	}).WithTimeout(eventually).WithPolling(poll).Should(Succeed())

	g.Expect(e.hub.Create(e.ctx, told)).To(Succeed())
	g.Eventually(func(g Gomega) {
		db := e.getDB(ns, "vault")
		ready := condition(db.Status.Conditions, fleetv1alpha1.ConditionReady)
		g.Expect(ready.Reason).To(Equal(fleetv1alpha1.ReasonWaitingForCredentials))
		g.Expect(ready.Message).To(ContainSubstring("s2"))
		g.Expect(condition(db.Status.Conditions, fleetv1alpha1.ConditionStalled).Status).NotTo(Equal(metav1.ConditionTrue))
	}).WithTimeout(eventually).WithPolling(poll).Should(Succeed())
	g.Consistently(func() bool {
		return apierrors.IsNotFound(e.hub.Get(e.ctx, client.ObjectKey{Namespace: ns, Name: "vault-credentials"}, &corev1.Secret{}))
	}).WithTimeout(3*time.Second).WithPolling(poll).Should(BeTrue(), "no new password while s2 may hold one")

	g.Expect(e.proxies["s2"].Restore()).To(Succeed())
	restored = true
	e.waitPhase(g, ns, "vault", fleetv1alpha1.PhaseReady)
	var hubSecret corev1.Secret
	g.Expect(e.hub.Get(e.ctx, client.ObjectKey{Namespace: ns, Name: "vault-credentials"}, &hubSecret)).To(Succeed())
	g.Expect(hubSecret.Data["password"]).To(Equal(orig.Data["password"]))
	s2, err := e.secretIn("s2", ns, "vault-credentials")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(s2.Data["password"]).To(Equal(orig.Data["password"]))
}

// hubID is the test hub's identity, from its ConfigMap.
func (e *env) hubID(g Gomega) string {
	var cm corev1.ConfigMap
	g.Expect(e.hub.Get(e.ctx, client.ObjectKey{Namespace: hubNS, Name: fleetv1alpha1.HubIdentityConfigMap}, &cm)).To(Succeed())
	id := cm.Data[fleetv1alpha1.HubIdentityKey]
	g.Expect(id).NotTo(BeEmpty())
	return id
}

// testCredentialsGuard (item 1): a member Secret of an earlier Database of
// the same name, with another password, is not overwritten when the
// placement grows onto that member: Conflict there, the Secret untouched.
func testCredentialsGuard(t *testing.T, e *env) {
	g := NewWithT(t)
	ns := e.namespace("creds-guard")
	g.Expect(e.hub.Create(e.ctx, newDB(ns, "guard", "s1"))).To(Succeed())
	e.waitPhase(g, ns, "guard", fleetv1alpha1.PhaseReady)

	g.Expect(e.member("s3").Create(e.ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})).To(Succeed())
	planted := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "guard-credentials", Labels: map[string]string{
			fleetv1alpha1.LabelManagedBy: fleetv1alpha1.ManagedByValue, fleetv1alpha1.LabelDatabaseNamespace: ns,
			fleetv1alpha1.LabelDatabaseName: "guard", fleetv1alpha1.LabelDatabaseUID: "an-earlier-uid",
			fleetv1alpha1.LabelHubID: e.hubID(g),
		}},
		Data: map[string][]byte{"username": []byte("app"), "password": []byte("the-password-its-data-uses")},
	}
	g.Expect(e.member("s3").Create(e.ctx, planted)).To(Succeed())

	db := e.getDB(ns, "guard")
	db.Spec.Placement.ClusterNames = []string{"s1", "s3"}
	g.Expect(e.hub.Update(e.ctx, db)).To(Succeed())
	g.Eventually(func(g Gomega) {
		db := e.getDB(ns, "guard")
		g.Expect(clusterEntry(db, "s3").Phase).To(Equal(fleetv1alpha1.ClusterPhaseConflict))
		g.Expect(clusterEntry(db, "s3").Message).To(ContainSubstring("password"))
	}).WithTimeout(eventually).WithPolling(poll).Should(Succeed())
	s3, err := e.secretIn("s3", ns, "guard-credentials")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(s3.ResourceVersion).To(Equal(planted.ResourceVersion), "the Secret was written to")
	g.Expect(string(s3.Data["password"])).To(Equal("the-password-its-data-uses"))
}

// testCredentialsRetained (item 1, the workaround in docs/data-safety.md): a Database deleted
// with Retain and created again runs on the retained data with the retained
// password once the released Secret is labelled as this hub's again.
func testCredentialsRetained(t *testing.T, e *env) {
	g := NewWithT(t)
	ns := e.namespace("creds-retained")
	db := newDB(ns, "kept", "s1")
	db.Spec.DeletionPolicy = fleetv1alpha1.DeletionPolicyRetain
	g.Expect(e.hub.Create(e.ctx, db)).To(Succeed())
	e.waitPhase(g, ns, "kept", fleetv1alpha1.PhaseReady)
	orig, err := e.secretIn("s1", ns, "kept-credentials")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(e.hub.Delete(e.ctx, e.getDB(ns, "kept"))).To(Succeed())
	g.Eventually(func() bool {
		return apierrors.IsNotFound(e.hub.Get(e.ctx, client.ObjectKey{Namespace: ns, Name: "kept"}, &fleetv1alpha1.Database{}))
	}).WithTimeout(eventually).WithPolling(poll).Should(BeTrue())
	// What the garbage collector does on a real hub.
	g.Expect(e.hub.Delete(e.ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "kept-credentials"}})).To(Succeed())

	released, err := e.secretIn("s1", ns, "kept-credentials")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(released.Labels).NotTo(HaveKey(fleetv1alpha1.LabelManagedBy))
	patch := client.MergeFrom(released.DeepCopy())
	released.Labels = map[string]string{
		fleetv1alpha1.LabelManagedBy: fleetv1alpha1.ManagedByValue, fleetv1alpha1.LabelDatabaseNamespace: ns,
		fleetv1alpha1.LabelDatabaseName: "kept", fleetv1alpha1.LabelHubID: e.hubID(g),
	}
	g.Expect(e.member("s1").Patch(e.ctx, released, patch)).To(Succeed())

	g.Expect(e.hub.Create(e.ctx, newDB(ns, "kept", "s1"))).To(Succeed())
	e.waitPhase(g, ns, "kept", fleetv1alpha1.PhaseReady)
	now, err := e.secretIn("s1", ns, "kept-credentials")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(now.Data["password"]).To(Equal(orig.Data["password"]))
}

// testRetainedOtherHub (issue 42 item 4): the credentials Secret a Retain
// teardown kept in a member (CloudNativePG backend: its next Cluster of the
// name would start on the retained claims with it) is not adopted by
// another hub's Database of the same namespace/name: that one gets a new
// password and Conflict there, and nothing of it is written to the member.
// This hub's own Database created again under the name still gets the
// retained password (the documented re-create on retained data), by the
// record it wrote at the teardown.
func testRetainedOtherHub(t *testing.T, e *env) {
	g := NewWithT(t)
	ns := e.namespace("retained-hub")
	db := newCNPGDB(ns, "kept", "s1")
	db.Spec.DeletionPolicy = fleetv1alpha1.DeletionPolicyRetain
	g.Expect(e.hub.Create(e.ctx, db)).To(Succeed())
	e.waitPhase(g, ns, "kept", fleetv1alpha1.PhaseReady)
	first := e.getDB(ns, "kept")
	g.Expect(e.hub.Delete(e.ctx, first)).To(Succeed())
	g.Eventually(func() bool {
		return apierrors.IsNotFound(e.hub.Get(e.ctx, client.ObjectKey{Namespace: ns, Name: "kept"}, &fleetv1alpha1.Database{}))
	}).WithTimeout(eventually).WithPolling(poll).Should(BeTrue())
	// What the garbage collector does on a real hub.
	g.Expect(e.hub.Delete(e.ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "kept-credentials"}})).To(Succeed())
	released, err := e.secretIn("s1", ns, "kept-credentials")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(released.Labels).NotTo(HaveKey(fleetv1alpha1.LabelManagedBy))

	h2 := startSecondHub(t, e, "s1")
	g.Expect(h2.hub.Create(e.ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})).To(Succeed())
	g.Expect(h2.hub.Create(e.ctx, newCNPGDB(ns, "kept", "s1"))).To(Succeed())
	g.Eventually(func(g Gomega) {
		var theirs corev1.Secret
		g.Expect(h2.hub.Get(e.ctx, client.ObjectKey{Namespace: ns, Name: "kept-credentials"}, &theirs)).To(Succeed())
		g.Expect(bytes.Equal(theirs.Data["password"], released.Data["password"])).To(BeFalse(), "another hub adopted the retained password")
		var db fleetv1alpha1.Database
		g.Expect(h2.hub.Get(e.ctx, client.ObjectKey{Namespace: ns, Name: "kept"}, &db)).To(Succeed())
		g.Expect(clusterEntry(&db, "s1").Phase).To(Equal(fleetv1alpha1.ClusterPhaseConflict))
	}).WithTimeout(eventually).WithPolling(poll).Should(Succeed())
	now, err := e.secretIn("s1", ns, "kept-credentials")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(now.ResourceVersion).To(Equal(released.ResourceVersion), "the retained Secret was written to")
	g.Expect(clusterInstances(e, "s1", ns, "kept")).To(BeEquivalentTo(-1), "a Cluster would start on the retained claims")

	// This hub's Database created again: the retained password, by its record.
	g.Expect(e.hub.Create(e.ctx, newCNPGDB(ns, "kept", "s1"))).To(Succeed())
	e.waitPhase(g, ns, "kept", fleetv1alpha1.PhaseReady)
	var ours corev1.Secret
	g.Expect(e.hub.Get(e.ctx, client.ObjectKey{Namespace: ns, Name: "kept-credentials"}, &ours)).To(Succeed())
	g.Expect(bytes.Equal(ours.Data["password"], released.Data["password"])).To(BeTrue(), "the retained password")
	now, err = e.secretIn("s1", ns, "kept-credentials")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(bytes.Equal(now.Data["password"], released.Data["password"])).To(BeTrue())
	// The teardown recorded the UID it released the Secret from.
	g.Expect(released.Annotations).To(HaveKeyWithValue(fleetv1alpha1.AnnotationReleasedUID, string(first.UID)))
}

// testPlacementRemoval (item 4): a member dropped from the placement loses
// the workload but keeps PVCs and the credentials Secret by default; with
// onPlacementRemoval: Delete they go too.
func testPlacementRemoval(t *testing.T, e *env) {
	g := NewWithT(t)
	ns := e.namespace("drop")
	for _, policy := range []fleetv1alpha1.PlacementRemovalPolicy{"", fleetv1alpha1.PlacementRemovalDelete} {
		name := "keep"
		if policy != "" {
			name = "purge"
		}
		db := newDB(ns, name, "s1", "s2")
		db.Spec.Teardown.OnPlacementRemoval = policy
		g.Expect(e.hub.Create(e.ctx, db)).To(Succeed())
		e.waitPhase(g, ns, name, fleetv1alpha1.PhaseReady)
		g.Expect(e.member("s2").Create(e.ctx, pvcFor(e, "s2", ns, name))).To(Succeed())

		db = e.getDB(ns, name)
		db.Spec.Placement.ClusterNames = []string{"s1"}
		g.Expect(e.hub.Update(e.ctx, db)).To(Succeed())
		g.Eventually(func(g Gomega) {
			err := e.member("s2").Get(e.ctx, client.ObjectKey{Namespace: ns, Name: name}, &appsv1.StatefulSet{})
			g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "the workload goes")
			db := e.getDB(ns, name)
			g.Expect(db.Status.Clusters).To(HaveLen(1))
			g.Expect(db.Status.Phase).To(Equal(fleetv1alpha1.PhaseReady))
		}).WithTimeout(eventually).WithPolling(poll).Should(Succeed())
		pvcKey := client.ObjectKey{Namespace: ns, Name: "data-" + name + "-0"}
		if policy == "" {
			var pvc corev1.PersistentVolumeClaim
			g.Expect(e.member("s2").Get(e.ctx, pvcKey, &pvc)).To(Succeed(), "Retain by default: the data stays")
			g.Expect(pvc.DeletionTimestamp).To(BeNil())
			_, err := e.secretIn("s2", ns, name+"-credentials")
			g.Expect(err).NotTo(HaveOccurred(), "the credentials stay with the data")
			continue
		}
		g.Eventually(func() bool {
			return apierrors.IsNotFound(e.member("s2").Get(e.ctx, pvcKey, &corev1.PersistentVolumeClaim{}))
		}).WithTimeout(eventually).WithPolling(poll).Should(BeTrue(), "onPlacementRemoval: Delete")
	}
}

// testPVCAfterStatefulSet (item 4): while the StatefulSet is still going,
// its PVCs are not deleted; a switch to Retain made meanwhile keeps them.
func testPVCAfterStatefulSet(t *testing.T, e *env) {
	g := NewWithT(t)
	ns := e.namespace("pvc-order")
	db := newDB(ns, "slow", "s1")
	db.Spec.DeletionPolicy = fleetv1alpha1.DeletionPolicyDelete
	g.Expect(e.hub.Create(e.ctx, db)).To(Succeed())
	e.waitPhase(g, ns, "slow", fleetv1alpha1.PhaseReady)
	g.Expect(e.member("s1").Create(e.ctx, pvcFor(e, "s1", ns, "slow"))).To(Succeed())
	// The StatefulSet does not go at once (its pods would take a while).
	var sts appsv1.StatefulSet
	stsKey := client.ObjectKey{Namespace: ns, Name: "slow"}
	g.Expect(e.member("s1").Get(e.ctx, stsKey, &sts)).To(Succeed())
	patch := client.MergeFrom(sts.DeepCopy())
	sts.Finalizers = append(sts.Finalizers, "test.fleetdb.io/hold")
	g.Expect(e.member("s1").Patch(e.ctx, &sts, patch)).To(Succeed())

	g.Expect(e.hub.Delete(e.ctx, e.getDB(ns, "slow"))).To(Succeed())
	g.Eventually(func(g Gomega) {
		var now appsv1.StatefulSet
		g.Expect(e.member("s1").Get(e.ctx, stsKey, &now)).To(Succeed())
		g.Expect(now.DeletionTimestamp).NotTo(BeNil())
	}).WithTimeout(eventually).WithPolling(poll).Should(Succeed())
	pvcKey := client.ObjectKey{Namespace: ns, Name: "data-slow-0"}
	g.Consistently(func(g Gomega) {
		var pvc corev1.PersistentVolumeClaim
		g.Expect(e.member("s1").Get(e.ctx, pvcKey, &pvc)).To(Succeed())
		g.Expect(pvc.DeletionTimestamp).To(BeNil(), "the PVC was deleted while its StatefulSet was still there")
	}).WithTimeout(3 * time.Second).WithPolling(poll).Should(Succeed())

	// The owner changes their mind before the StatefulSet is gone.
	g.Eventually(func() error {
		db := e.getDB(ns, "slow")
		db.Spec.DeletionPolicy = fleetv1alpha1.DeletionPolicyRetain
		return e.hub.Update(e.ctx, db)
	}).WithTimeout(eventually).WithPolling(poll).Should(Succeed())
	// The next pass releases the claim (Retain) while the StatefulSet still goes.
	g.Eventually(func(g Gomega) {
		var pvc corev1.PersistentVolumeClaim
		g.Expect(e.member("s1").Get(e.ctx, pvcKey, &pvc)).To(Succeed())
		g.Expect(pvc.Labels).NotTo(HaveKey(fleetv1alpha1.LabelManagedBy))
	}).WithTimeout(eventually).WithPolling(poll).Should(Succeed())
	g.Expect(e.member("s1").Get(e.ctx, stsKey, &sts)).To(Succeed())
	patch = client.MergeFrom(sts.DeepCopy())
	sts.Finalizers = nil
	g.Expect(e.member("s1").Patch(e.ctx, &sts, patch)).To(Succeed())
	g.Eventually(func() bool {
		return apierrors.IsNotFound(e.hub.Get(e.ctx, client.ObjectKey{Namespace: ns, Name: "slow"}, &fleetv1alpha1.Database{}))
	}).WithTimeout(eventually).WithPolling(poll).Should(BeTrue())
	var pvc corev1.PersistentVolumeClaim
	g.Expect(e.member("s1").Get(e.ctx, pvcKey, &pvc)).To(Succeed(), "Retain was honoured")
	g.Expect(pvc.DeletionTimestamp).To(BeNil())
	g.Expect(pvc.Labels).NotTo(HaveKey(fleetv1alpha1.LabelManagedBy), "released")
}

// testMemberRemoved (item 4): deleting a MemberCluster while a Database is
// placed on it deletes nothing there, and says so: an Event and status.leftBehind.
func testMemberRemoved(t *testing.T, e *env) {
	g := NewWithT(t)
	ns := e.namespace("removed")
	kc, err := fleetKubeconfigVia(e, "s4")
	g.Expect(err).NotTo(HaveOccurred())
	e.register("s3-alias", kc, map[string]string{"alias": "yes"})
	e.waitMemberReady("s3-alias")
	g.Expect(e.hub.Create(e.ctx, newDB(ns, "stay", "s1", "s3-alias"))).To(Succeed())
	e.waitPhase(g, ns, "stay", fleetv1alpha1.PhaseReady)

	g.Expect(e.hub.Delete(e.ctx, &fleetv1alpha1.MemberCluster{ObjectMeta: metav1.ObjectMeta{Name: "s3-alias"}})).To(Succeed())
	g.Eventually(func(g Gomega) {
		db := e.getDB(ns, "stay")
		g.Expect(db.Status.LeftBehind).To(HaveLen(1))
		g.Expect(db.Status.LeftBehind[0].Cluster).To(Equal("s3-alias"))
		g.Expect(db.Status.LeftBehind[0].Message).To(ContainSubstring("PersistentVolumeClaims"))
		g.Expect(clusterEntry(db, "s3-alias").Name).To(BeEmpty())
	}).WithTimeout(eventually).WithPolling(poll).Should(Succeed())
	g.Eventually(e.eventSeen(ns, fleetv1alpha1.ReasonMemberRemoved, "s3-alias")).WithTimeout(eventually).WithPolling(poll).Should(Succeed())
	g.Consistently(func(g Gomega) {
		g.Expect(e.member("s4").Get(e.ctx, client.ObjectKey{Namespace: ns, Name: "stay"}, &appsv1.StatefulSet{})).To(Succeed())
		_, err := e.secretIn("s4", ns, "stay-credentials")
		g.Expect(err).NotTo(HaveOccurred())
	}).WithTimeout(3*time.Second).WithPolling(poll).Should(Succeed(), "nothing is deleted in a member that left")
}

// testTenancy (item 8): a member admits only the namespaces its
// namespaceSelector selects; naming another is Stalled, a selector skips it.
func testTenancy(t *testing.T, e *env) {
	g := NewWithT(t)
	setSelector := func(sel *metav1.LabelSelector) {
		var mc fleetv1alpha1.MemberCluster
		g.Expect(e.hub.Get(e.ctx, client.ObjectKey{Name: "s3"}, &mc)).To(Succeed())
		patch := client.MergeFrom(mc.DeepCopy())
		mc.Spec.NamespaceSelector = sel
		g.Expect(e.hub.Patch(e.ctx, &mc, patch)).To(Succeed())
	}
	setSelector(&metav1.LabelSelector{MatchLabels: map[string]string{"tenant": "blue"}})
	defer setSelector(&metav1.LabelSelector{})

	red := e.namespace("tenant-red")
	g.Expect(e.hub.Create(e.ctx, newDB(red, "named", "s1", "s3"))).To(Succeed())
	g.Eventually(func(g Gomega) {
		db := e.getDB(red, "named")
		stalled := condition(db.Status.Conditions, fleetv1alpha1.ConditionStalled)
		g.Expect(stalled.Status).To(Equal(metav1.ConditionTrue))
		g.Expect(stalled.Reason).To(Equal(fleetv1alpha1.ReasonNamespaceNotAllowed))
		g.Expect(stalled.Message).To(ContainSubstring("s3"))
	}).WithTimeout(eventually).WithPolling(poll).Should(Succeed())
	anywhere := newDB(red, "anywhere")
	anywhere.Spec.Placement = fleetv1alpha1.PlacementSpec{ClusterSelector: &metav1.LabelSelector{}}
	g.Expect(e.hub.Create(e.ctx, anywhere)).To(Succeed())
	g.Eventually(func(g Gomega) {
		db := e.getDB(red, "anywhere")
		g.Expect(db.Status.Phase).To(Equal(fleetv1alpha1.PhaseReady))
		names := []string{}
		for _, c := range db.Status.Clusters {
			names = append(names, c.Name)
		}
		g.Expect(names).NotTo(ContainElement("s3"))
		g.Expect(names).To(ContainElements("s1", "s2"))
	}).WithTimeout(eventually).WithPolling(poll).Should(Succeed())
	g.Expect(client.IgnoreNotFound(e.member("s3").Get(e.ctx, client.ObjectKey{Namespace: red, Name: "anywhere"}, &appsv1.StatefulSet{}))).To(Succeed())
	err := e.member("s3").Get(e.ctx, client.ObjectKey{Namespace: red, Name: "anywhere"}, &appsv1.StatefulSet{})
	g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "nothing in a member the namespace may not use")

	// The platform team admits the namespace: the stalled Database goes on.
	var nsObj corev1.Namespace
	g.Expect(e.hub.Get(e.ctx, client.ObjectKey{Name: red}, &nsObj)).To(Succeed())
	patch := client.MergeFrom(nsObj.DeepCopy())
	nsObj.Labels = map[string]string{"tenant": "blue"}
	g.Expect(e.hub.Patch(e.ctx, &nsObj, patch)).To(Succeed())
	e.waitPhase(g, red, "named", fleetv1alpha1.PhaseReady)
	g.Expect(e.member("s3").Get(e.ctx, client.ObjectKey{Namespace: red, Name: "named"}, &appsv1.StatefulSet{})).To(Succeed())
	// Members registered by later subtests are none of its business.
	g.Expect(e.hub.Delete(e.ctx, e.getDB(red, "anywhere"))).To(Succeed())
}

// fleetKubeconfigVia is a kubeconfig for member through its test proxy.
func fleetKubeconfigVia(e *env, member string) ([]byte, error) {
	return fleet.KubeconfigVia(e.fleet.Member(member).Kubeconfig, e.proxies[member].Addr())
}

// testForbidden (item 12): a member whose RBAC refuses the hub's writes
// shows Forbidden for that member and is not retried in a loop; a new
// generation syncs it again.
func testForbidden(t *testing.T, e *env) {
	g := NewWithT(t)
	// s4, registered under this name only (testMemberRemoved's registration
	// of it is deleted by then).
	cp := e.fleet.Member("s4")
	// Reads everywhere, writes to everything but StatefulSets.
	role := &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: "fleetdb-test-limited"},
		Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{"", "apps", "policy"}, Resources: []string{"*"}, Verbs: []string{"get", "list", "watch"}},
			{APIGroups: []string{""}, Resources: []string{"namespaces", "secrets", "configmaps", "services", "persistentvolumeclaims"},
				Verbs: []string{"create", "update", "patch", "delete"}},
			{APIGroups: []string{"policy"}, Resources: []string{"poddisruptionbudgets"}, Verbs: []string{"create", "update", "patch", "delete"}},
		},
	}
	g.Expect(cp.Client.Create(e.ctx, role)).To(Succeed())
	g.Expect(cp.Client.Create(e.ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "fleetdb-test-limited"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role.Name},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: "limited-hub"}},
	})).To(Succeed())
	kc, err := cp.AddUser("limited-hub")
	g.Expect(err).NotTo(HaveOccurred())
	e.register("s2-limited", kc, map[string]string{"limited": "yes"})
	e.waitMemberReady("s2-limited")

	ns := e.namespace("forbidden")
	g.Expect(e.hub.Create(e.ctx, newDB(ns, "walled", "s1", "s2-limited"))).To(Succeed())
	g.Eventually(func(g Gomega) {
		db := e.getDB(ns, "walled")
		c := clusterEntry(db, "s2-limited")
		g.Expect(c.Reason).To(Equal(fleetv1alpha1.ReasonForbidden))
		g.Expect(c.Phase).To(Equal(fleetv1alpha1.ClusterPhaseDegraded))
		g.Expect(clusterEntry(db, "s1").Phase).To(Equal(fleetv1alpha1.ClusterPhaseReady))
	}).WithTimeout(eventually).WithPolling(poll).Should(Succeed())
	// No retry storm: the refused member is not written to again.
	countTo := e.writes.Total
	// Once the rollout settled, nothing writes to it again (a retry loop
	// with backoff from 5 ms would).
	last := -1
	g.Eventually(func() int {
		n := countTo("s2-limited")
		d := n - last
		last = n
		return d
	}).WithTimeout(eventually).WithPolling(2 * time.Second).Should(BeZero())
	g.Consistently(func() int { return countTo("s2-limited") }).WithTimeout(5*time.Second).WithPolling(time.Second).
		Should(Equal(last), "writes to a member that refused the hub: %v", func() []string {
			_, all := e.writes.Writes()
			return all
		}())

	// RBAC fixed and the Database changed: it syncs again.
	g.Expect(cp.Client.Get(e.ctx, client.ObjectKey{Name: role.Name}, role)).To(Succeed())
	role.Rules = append(role.Rules, rbacv1.PolicyRule{APIGroups: []string{"apps"}, Resources: []string{"statefulsets"},
		Verbs: []string{"create", "update", "patch", "delete"}})
	g.Expect(cp.Client.Update(e.ctx, role)).To(Succeed())
	db := e.getDB(ns, "walled")
	db.Spec.Rollout.MaxUnavailable = 2 // any spec change (the StatefulSet backend runs one instance)
	g.Expect(e.hub.Update(e.ctx, db)).To(Succeed())
	g.Eventually(func(g Gomega) {
		db := e.getDB(ns, "walled")
		g.Expect(clusterEntry(db, "s2-limited").Reason).To(BeEmpty())
		g.Expect(clusterEntry(db, "s2-limited").Phase).To(Equal(fleetv1alpha1.ClusterPhaseReady))
	}).WithTimeout(eventually).WithPolling(poll).Should(Succeed())
	g.Expect(e.hub.Delete(e.ctx, &fleetv1alpha1.MemberCluster{ObjectMeta: metav1.ObjectMeta{Name: "s2-limited"}})).To(Succeed())
}

// testFairness (item 10): members whose writes hang hold at most part of
// the member-sync workers: a fast member's Database syncs well within one
// member call timeout (half of it here; the hung syncs end after a whole
// one, so a fast member queued behind them would take about that long).
// Two slow members (two clusters: one cluster registered under several
// names is refused, DuplicateCluster) reach the hub's cap on hung syncs
// (per member 8, across members 16 of 32 workers).
func testFairness(t *testing.T, e *env) {
	g := NewWithT(t)
	ns := e.namespace("fair")
	slow := []string{"slow-1", "slow-2"}
	for i, m := range slow {
		kc, err := fleetKubeconfigVia(e, []string{"s4", "s5"}[i])
		g.Expect(err).NotTo(HaveOccurred())
		e.writes.Hang(m, true)
		e.register(m, kc, map[string]string{"speed": "slow"})
	}
	defer func() {
		for _, m := range slow {
			e.writes.Hang(m, false)
		}
	}()
	for _, m := range slow {
		e.waitMemberReady(m)
	}
	// Twenty Databases per slow member: more syncs than a member may run at once.
	for i := 0; i < 40; i++ {
		db := newDB(ns, fmt.Sprintf("crowd-%d", i), slow[i%len(slow)])
		g.Expect(e.hub.Create(e.ctx, db)).To(Succeed())
	}
	// The slow members' writes hang, holding member-sync workers (32).
	// Wait until as many hang as the hub lets hang (no more for a second).
	last := int64(-1)
	g.Eventually(func() bool {
		n := e.writes.Hanging()
		steady := n >= 16 && n == last
		last = n
		return steady
	}).WithTimeout(eventually).WithPolling(time.Second).Should(BeTrue())
	g.Expect(e.hub.Create(e.ctx, newDB(ns, "quick", "s1"))).To(Succeed())
	g.Eventually(func() error {
		return e.member("s1").Get(e.ctx, client.ObjectKey{Namespace: ns, Name: "quick"}, &appsv1.StatefulSet{})
	}).WithTimeout(memberCallTimeout/2).WithPolling(poll).Should(Succeed(), "the fast member waited behind the slow ones")
}
