package integration

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleetv1alpha1 "github.com/fleetdb/fleetdb/apis/v1alpha1"
	"github.com/fleetdb/fleetdb/test/fleet"
)

// TestHub runs the hub core's behaviours (SPEC 4.1–4.6) on one fleet of a
// hub and three members; each subtest uses its own namespace.
func TestHub(t *testing.T) {
	e := startEnvWith(t, envOptions{withoutCNPG: []string{"m3"}}, "m1", "m2", "m3")
	for _, m := range []string{"m1", "m2", "m3"} {
		e.sim.enable(m, true)
	}

	t.Run("create places objects in exactly the placed members", func(t *testing.T) { testCreate(t, e) })
	t.Run("ready only when every member is ready on the current generation", func(t *testing.T) { testReadiness(t, e) })
	t.Run("overrides apply to the named member only", func(t *testing.T) { testOverrides(t, e) })
	t.Run("relabelling moves the placement and tears down the dropped member", func(t *testing.T) { testRelabel(t, e) })
	t.Run("an unowned object is never overwritten and shows Conflict", func(t *testing.T) { testConflict(t, e) })
	t.Run("drift in a member is put back", func(t *testing.T) { testDrift(t, e) })
	t.Run("lost hub credentials are recovered, never regenerated", func(t *testing.T) { testCredentialsRecovered(t, e) })
	t.Run("protected namespaces are refused", func(t *testing.T) { testProtected(t, e) })
	t.Run("a Database deleted and created again under its name runs again", func(t *testing.T) { testRecreate(t, e) })
	t.Run("a fleet at rest makes no writes", func(t *testing.T) { testAtRest(t, e) })
	t.Run("a restarted hub writes only what changed to the members", func(t *testing.T) { testRestartWrites(t, e) })
	t.Run("a change writes what it changes, once", func(t *testing.T) { testChangeCost(t, e) })
	t.Run("delete removes everything per deletionPolicy", func(t *testing.T) { testDelete(t, e) })
	t.Run("a bad kubeconfig does not disturb the fleet", func(t *testing.T) { testBadMember(t, e) })
	t.Run("delete with an unreachable member", func(t *testing.T) { testDeleteUnreachable(t, e) })
	t.Run("the CloudNativePG backend: Ready, a member without it, Delete, Retain and create again", func(t *testing.T) { testCNPG(t, e) })
	t.Run("a CloudNativePG Cluster is read from the member cache", func(t *testing.T) { testCNPGClusterFromCache(t, e) })
	t.Run("a member sync reads the member credentials Secret once, a new Database's not at all", func(t *testing.T) { testMemberSecretReadOnce(t, e) })
	t.Run("a Database from before backends stays on the StatefulSet backend", func(t *testing.T) { testLegacyBackend(t, e) })
	t.Run("the backend never flips when the annotation is removed", func(t *testing.T) { testBackendNeverFlips(t, e) })
	t.Run("a changed backend annotation is not followed", func(t *testing.T) { testBackendAnnotationPinned(t, e) })
	t.Run("PrimaryStandby wiring: replica, peers, certificates per member", func(t *testing.T) { testTopologyWiring(t, e) })
}

func testCreate(t *testing.T, e *env) {
	g := NewWithT(t)
	ns := e.namespace("create")
	db := newDB(ns, "orders", "m1", "m2")
	// Watch every status the hub writes on the way to Ready: a healthy
	// creation never passes through Degraded.
	wc, err := client.NewWithWatch(e.fleet.Hub.Config, client.Options{Scheme: fleet.Scheme})
	g.Expect(err).NotTo(HaveOccurred())
	w, err := wc.Watch(e.ctx, &fleetv1alpha1.DatabaseList{}, client.InNamespace(ns))
	g.Expect(err).NotTo(HaveOccurred())
	defer w.Stop()
	g.Expect(e.hub.Create(e.ctx, db)).To(Succeed())
	var phases []fleetv1alpha1.Phase
	g.Eventually(func() fleetv1alpha1.Phase {
		for {
			select {
			case ev := <-w.ResultChan():
				if d, ok := ev.Object.(*fleetv1alpha1.Database); ok && d.Status.Phase != "" {
					phases = append(phases, d.Status.Phase)
					if d.Status.Phase == fleetv1alpha1.PhaseReady {
						return d.Status.Phase
					}
				}
			default:
				return ""
			}
		}
	}).WithTimeout(eventually).WithPolling(poll).Should(Equal(fleetv1alpha1.PhaseReady))
	g.Expect(phases).NotTo(ContainElement(fleetv1alpha1.PhaseDegraded), "phases on the way to Ready: %v", phases)

	for _, m := range []string{"m1", "m2"} {
		g.Eventually(func(g Gomega) {
			var sts appsv1.StatefulSet
			g.Expect(e.member(m).Get(e.ctx, client.ObjectKey{Namespace: ns, Name: "orders"}, &sts)).To(Succeed())
			g.Expect(*sts.Spec.Replicas).To(BeEquivalentTo(1))
			g.Expect(sts.Labels).To(HaveKeyWithValue(fleetv1alpha1.LabelManagedBy, fleetv1alpha1.ManagedByValue))
			g.Expect(sts.Labels).To(HaveKeyWithValue(fleetv1alpha1.LabelDatabaseName, "orders"))
			g.Expect(sts.Labels).To(HaveKeyWithValue(fleetv1alpha1.LabelDatabaseUID, string(e.getDB(ns, "orders").UID)))
			g.Expect(sts.Spec.Template.Spec.Containers[0].Image).To(ContainSubstring("postgres:17"))
			g.Expect(sts.Spec.VolumeClaimTemplates[0].Spec.Resources.Requests.Storage().String()).To(Equal("1Gi"))
			for _, obj := range []client.Object{&corev1.Service{}, &corev1.ConfigMap{}, &corev1.Secret{}} {
				var list client.ObjectList
				switch obj.(type) {
				case *corev1.Service:
					list = &corev1.ServiceList{}
				case *corev1.ConfigMap:
					list = &corev1.ConfigMapList{}
				case *corev1.Secret:
					list = &corev1.SecretList{}
				default:
					list = &policyv1.PodDisruptionBudgetList{}
				}
				g.Expect(e.member(m).List(e.ctx, list, client.InNamespace(ns), client.MatchingLabels{fleetv1alpha1.LabelDatabaseName: "orders"})).To(Succeed())
				g.Expect(meta(list)).NotTo(BeZero(), "%T in %s", obj, m)
			}
		}).WithTimeout(eventually).WithPolling(poll).Should(Succeed())
	}
	// The credentials are the same in every member, generated once on the hub.
	var hubSecret, s1, s2 corev1.Secret
	g.Expect(e.hub.Get(e.ctx, client.ObjectKey{Namespace: ns, Name: "orders-credentials"}, &hubSecret)).To(Succeed())
	g.Expect(e.member("m1").Get(e.ctx, client.ObjectKey{Namespace: ns, Name: "orders-credentials"}, &s1)).To(Succeed())
	g.Expect(e.member("m2").Get(e.ctx, client.ObjectKey{Namespace: ns, Name: "orders-credentials"}, &s2)).To(Succeed())
	g.Expect(s1.Data["password"]).To(Equal(hubSecret.Data["password"]))
	g.Expect(s2.Data["password"]).To(Equal(hubSecret.Data["password"]))
	g.Expect(len(hubSecret.Data["password"])).To(BeNumerically(">=", 24))

	// Nothing reaches the member that is not placed.
	g.Consistently(func(g Gomega) {
		var list appsv1.StatefulSetList
		g.Expect(e.member("m3").List(e.ctx, &list, client.InNamespace(ns))).To(Succeed())
		g.Expect(list.Items).To(BeEmpty())
	}).WithTimeout(2 * time.Second).WithPolling(poll).Should(Succeed())

	g.Eventually(func(g Gomega) {
		db := e.getDB(ns, "orders")
		g.Expect(db.Finalizers).To(ContainElement(fleetv1alpha1.TeardownFinalizer))
		g.Expect(condition(db.Status.Conditions, fleetv1alpha1.ConditionReady).Status).To(Equal(metav1.ConditionTrue))
		g.Expect(db.Status.Phase).To(Equal(fleetv1alpha1.PhaseReady))
		g.Expect(db.Status.ReadyClusters).To(BeEquivalentTo(2))
		g.Expect(db.Status.TargetClusters).To(BeEquivalentTo(2))
		g.Expect(db.Status.ObservedGeneration).To(Equal(db.Generation))
		g.Expect(db.Status.Clusters).To(HaveLen(2))
		for _, c := range db.Status.Clusters {
			g.Expect(c.Phase).To(Equal(fleetv1alpha1.ClusterPhaseReady))
			g.Expect(c.ReadyReplicas).To(BeEquivalentTo(1))
			g.Expect(c.Backend).To(Equal(fleetv1alpha1.BackendStatefulSet))
			g.Expect(c.ObservedGeneration).To(Equal(db.Generation))
			g.Expect(c.Endpoint).To(Equal("orders." + ns + ".svc:5432"))
		}
	}).WithTimeout(eventually).WithPolling(poll).Should(Succeed())
}

func meta(list client.ObjectList) int {
	switch l := list.(type) {
	case *corev1.ServiceList:
		return len(l.Items)
	case *corev1.ConfigMapList:
		return len(l.Items)
	case *corev1.SecretList:
		return len(l.Items)
	case *policyv1.PodDisruptionBudgetList:
		return len(l.Items)
	}
	return 0
}

func testReadiness(t *testing.T, e *env) {
	g := NewWithT(t)
	ns := e.namespace("readiness")
	// m3's "StatefulSet controller" is off: its member never becomes ready.
	e.sim.enable("m3", false)
	defer e.sim.enable("m3", true)
	g.Expect(e.hub.Create(e.ctx, newDB(ns, "pay", "m1", "m3"))).To(Succeed())

	g.Eventually(func(g Gomega) {
		db := e.getDB(ns, "pay")
		g.Expect(clusterEntry(db, "m1").Phase).To(Equal(fleetv1alpha1.ClusterPhaseReady))
		g.Expect(clusterEntry(db, "m3").Phase).To(Equal(fleetv1alpha1.ClusterPhaseProvisioning))
		g.Expect(db.Status.ReadySummary).To(Equal("1/2"))
	}).WithTimeout(eventually).WithPolling(poll).Should(Succeed())
	g.Consistently(func(g Gomega) {
		db := e.getDB(ns, "pay")
		g.Expect(condition(db.Status.Conditions, fleetv1alpha1.ConditionReady).Status).To(Equal(metav1.ConditionFalse))
		g.Expect(condition(db.Status.Conditions, fleetv1alpha1.ConditionReconciling).Status).To(Equal(metav1.ConditionTrue))
	}).WithTimeout(2 * time.Second).WithPolling(poll).Should(Succeed())

	// kubectl wait --for=condition=Ready returns once the last member is ready.
	assets, err := fleet.AssetsDir()
	g.Expect(err).NotTo(HaveOccurred())
	kubeconfig := filepath.Join(t.TempDir(), "hub.kubeconfig")
	g.Expect(writeFile(kubeconfig, e.fleet.Hub.Kubeconfig)).To(Succeed())
	wait := exec.CommandContext(e.ctx, filepath.Join(assets, "kubectl"), "--kubeconfig", kubeconfig, "-n", ns,
		"wait", "--for=condition=Ready", "database/pay", "--timeout=60s")
	out := make(chan error, 1)
	go func() {
		b, err := wait.CombinedOutput()
		if err != nil {
			t.Logf("kubectl wait: %s", b)
		}
		out <- err
	}()
	select {
	case err := <-out:
		t.Fatalf("kubectl wait returned before every member was ready: %v", err)
	case <-time.After(2 * time.Second):
	}
	e.sim.enable("m3", true)
	g.Eventually(out).WithTimeout(70 * time.Second).Should(Receive(BeNil()))

	// A spec change: Ready turns False until the members run the new generation.
	db := e.getDB(ns, "pay")
	db.Spec.Resources = cpuRequest("300m")
	e.sim.enable("m1", false)
	e.sim.enable("m3", false)
	g.Expect(e.hub.Update(e.ctx, db)).To(Succeed())
	g.Eventually(func(g Gomega) {
		db := e.getDB(ns, "pay")
		g.Expect(condition(db.Status.Conditions, fleetv1alpha1.ConditionReady).Status).To(Equal(metav1.ConditionFalse))
		g.Expect(condition(db.Status.Conditions, fleetv1alpha1.ConditionReady).ObservedGeneration).To(Equal(db.Generation))
	}).WithTimeout(eventually).WithPolling(poll).Should(Succeed())
	e.sim.enable("m1", true)
	e.sim.enable("m3", true)
	g.Eventually(func(g Gomega) {
		db := e.getDB(ns, "pay")
		g.Expect(condition(db.Status.Conditions, fleetv1alpha1.ConditionReady).Status).To(Equal(metav1.ConditionTrue))
		for _, c := range db.Status.Clusters {
			g.Expect(c.ObservedGeneration).To(Equal(db.Generation))
		}
	}).WithTimeout(eventually).WithPolling(poll).Should(Succeed())
}

func testOverrides(t *testing.T, e *env) {
	g := NewWithT(t)
	ns := e.namespace("overrides")
	db := newCNPGDB(ns, "inventory", "m1", "m2")
	db.Spec.Replicas = 3
	db.Spec.Overrides = []fleetv1alpha1.OverrideSpec{{ClusterNames: []string{"m2"}, Replicas: ptr.To[int32](1)}}
	g.Expect(e.hub.Create(e.ctx, db)).To(Succeed())
	want := map[string]int64{"m1": 3, "m2": 1}
	for m, n := range want {
		g.Eventually(func(g Gomega) {
			g.Expect(clusterInstances(e, m, ns, "inventory")).To(Equal(n), "instances in %s", m)
		}).WithTimeout(eventually).WithPolling(poll).Should(Succeed())
	}
	g.Eventually(func(g Gomega) {
		db := e.getDB(ns, "inventory")
		g.Expect(clusterEntry(db, "m2").Replicas).To(BeEquivalentTo(1))
		g.Expect(clusterEntry(db, "m1").Replicas).To(BeEquivalentTo(3))
		g.Expect(db.Status.Phase).To(Equal(fleetv1alpha1.PhaseReady))
	}).WithTimeout(eventually).WithPolling(poll).Should(Succeed())
}

func setLabels(t *testing.T, e *env, member string, labels map[string]string) {
	g := NewWithT(t)
	var mc fleetv1alpha1.MemberCluster
	g.Expect(e.hub.Get(e.ctx, client.ObjectKey{Name: member}, &mc)).To(Succeed())
	patch := client.MergeFrom(mc.DeepCopy())
	for k, v := range labels {
		if v == "" {
			delete(mc.Labels, k)
		} else {
			mc.Labels[k] = v
		}
	}
	g.Expect(e.hub.Patch(e.ctx, &mc, patch)).To(Succeed())
}

func testRelabel(t *testing.T, e *env) {
	g := NewWithT(t)
	ns := e.namespace("relabel")
	setLabels(t, e, "m1", map[string]string{"tier": "prod"})
	defer setLabels(t, e, "m1", map[string]string{"tier": ""})
	defer setLabels(t, e, "m3", map[string]string{"tier": ""})
	db := newDB(ns, "ledger")
	db.Spec.Placement = fleetv1alpha1.PlacementSpec{ClusterSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"tier": "prod"}}}
	g.Expect(e.hub.Create(e.ctx, db)).To(Succeed())
	stsIn := func(m string) func(g Gomega) bool {
		return func(g Gomega) bool {
			var sts appsv1.StatefulSet
			err := e.member(m).Get(e.ctx, client.ObjectKey{Namespace: ns, Name: "ledger"}, &sts)
			g.Expect(client.IgnoreNotFound(err)).To(Succeed())
			return err == nil
		}
	}
	g.Eventually(stsIn("m1")).WithTimeout(eventually).WithPolling(poll).Should(BeTrue())
	g.Eventually(func(g Gomega) {
		g.Expect(e.getDB(ns, "ledger").Status.Phase).To(Equal(fleetv1alpha1.PhaseReady))
	}).WithTimeout(eventually).WithPolling(poll).Should(Succeed())

	// Move "prod" from m1 to m3 at run time.
	setLabels(t, e, "m3", map[string]string{"tier": "prod"})
	setLabels(t, e, "m1", map[string]string{"tier": "dev"})
	g.Eventually(stsIn("m3")).WithTimeout(eventually).WithPolling(poll).Should(BeTrue())
	g.Eventually(stsIn("m1")).WithTimeout(eventually).WithPolling(poll).Should(BeFalse())
	g.Eventually(func(g Gomega) {
		var list corev1.ConfigMapList
		g.Expect(e.member("m1").List(e.ctx, &list, client.InNamespace(ns), client.MatchingLabels{fleetv1alpha1.LabelDatabaseName: "ledger"})).To(Succeed())
		g.Expect(list.Items).To(BeEmpty())
		db := e.getDB(ns, "ledger")
		g.Expect(db.Status.Clusters).To(HaveLen(1))
		g.Expect(clusterEntry(db, "m3").Phase).To(Equal(fleetv1alpha1.ClusterPhaseReady))
		g.Expect(db.Status.Phase).To(Equal(fleetv1alpha1.PhaseReady))
	}).WithTimeout(eventually).WithPolling(poll).Should(Succeed())

	// A selector that matches nothing: Placed=False with NoMatchingClusters.
	db = e.getDB(ns, "ledger")
	db.Spec.Placement.ClusterSelector.MatchLabels = map[string]string{"tier": "nowhere"}
	g.Expect(e.hub.Update(e.ctx, db)).To(Succeed())
	g.Eventually(func(g Gomega) {
		db := e.getDB(ns, "ledger")
		placed := condition(db.Status.Conditions, fleetv1alpha1.ConditionPlaced)
		g.Expect(placed.Status).To(Equal(metav1.ConditionFalse))
		g.Expect(placed.Reason).To(Equal(fleetv1alpha1.ReasonNoMatchingClusters))
		g.Expect(db.Status.Clusters).To(BeEmpty())
	}).WithTimeout(eventually).WithPolling(poll).Should(Succeed())
	g.Eventually(stsIn("m3")).WithTimeout(eventually).WithPolling(poll).Should(BeFalse())
}

func testConflict(t *testing.T, e *env) {
	g := NewWithT(t)
	ns := e.namespace("conflict")
	// Someone else's StatefulSet of the same name already lives in m2.
	g.Expect(e.member("m2").Create(e.ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})).To(Succeed())
	foreign := &appsv1.StatefulSet{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "billing", Labels: map[string]string{"app": "theirs"}},
		Spec: appsv1.StatefulSetSpec{
			Replicas: ptr.To[int32](1),
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "theirs"}},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "theirs"}},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "theirs:1"}}},
			},
		},
	}
	g.Expect(e.member("m2").Create(e.ctx, foreign)).To(Succeed())
	before := foreign.ResourceVersion

	g.Expect(e.hub.Create(e.ctx, newDB(ns, "billing", "m1", "m2"))).To(Succeed())
	g.Eventually(func(g Gomega) {
		db := e.getDB(ns, "billing")
		g.Expect(clusterEntry(db, "m2").Phase).To(Equal(fleetv1alpha1.ClusterPhaseConflict))
		g.Expect(clusterEntry(db, "m1").Phase).To(Equal(fleetv1alpha1.ClusterPhaseReady))
		deg := condition(db.Status.Conditions, fleetv1alpha1.ConditionDegraded)
		g.Expect(deg.Status).To(Equal(metav1.ConditionTrue))
		g.Expect(deg.Message).To(ContainSubstring("m2"))
		g.Expect(db.Status.Phase).To(Equal(fleetv1alpha1.PhaseDegraded))
	}).WithTimeout(eventually).WithPolling(poll).Should(Succeed())
	var after appsv1.StatefulSet
	g.Expect(e.member("m2").Get(e.ctx, client.ObjectKeyFromObject(foreign), &after)).To(Succeed())
	g.Expect(after.ResourceVersion).To(Equal(before), "the unowned StatefulSet was written to")
	g.Expect(after.Spec.Template.Spec.Containers[0].Image).To(Equal("theirs:1"))
}

func testDrift(t *testing.T, e *env) {
	g := NewWithT(t)
	ns := e.namespace("drift")
	g.Expect(e.hub.Create(e.ctx, newDB(ns, "audit", "m1"))).To(Succeed())
	key := client.ObjectKey{Namespace: ns, Name: "audit"}
	var sts appsv1.StatefulSet
	g.Eventually(func() error { return e.member("m1").Get(e.ctx, key, &sts) }).WithTimeout(eventually).WithPolling(poll).Should(Succeed())

	// Edited by hand: put back.
	patch := client.MergeFrom(sts.DeepCopy())
	sts.Spec.Replicas = ptr.To[int32](7)
	g.Expect(e.member("m1").Patch(e.ctx, &sts, patch)).To(Succeed())
	g.Eventually(func(g Gomega) {
		var now appsv1.StatefulSet
		g.Expect(e.member("m1").Get(e.ctx, key, &now)).To(Succeed())
		g.Expect(*now.Spec.Replicas).To(BeEquivalentTo(1))
	}).WithTimeout(eventually).WithPolling(poll).Should(Succeed())

	// Deleted by hand: recreated.
	uid := sts.UID
	g.Expect(e.member("m1").Delete(e.ctx, &sts)).To(Succeed())
	g.Eventually(func(g Gomega) {
		var now appsv1.StatefulSet
		g.Expect(e.member("m1").Get(e.ctx, key, &now)).To(Succeed())
		g.Expect(now.UID).NotTo(Equal(uid))
	}).WithTimeout(eventually).WithPolling(poll).Should(Succeed())
	var cm corev1.ConfigMap
	g.Expect(e.member("m1").Get(e.ctx, client.ObjectKey{Namespace: ns, Name: "audit-config"}, &cm)).To(Succeed())
	g.Expect(e.member("m1").Delete(e.ctx, &cm)).To(Succeed())
	g.Eventually(func() error { return e.member("m1").Get(e.ctx, client.ObjectKeyFromObject(&cm), &corev1.ConfigMap{}) }).
		WithTimeout(eventually).WithPolling(poll).Should(Succeed())

	// The change is reported as an Event on the Database.
	g.Eventually(e.eventSeen(ns, "DriftCorrected", "m1")).WithTimeout(eventually).WithPolling(poll).Should(Succeed())
}

// testRecreate: the hub credentials Secret of a deleted Database stays until
// the garbage collector removes it (never, on this hub without a controller
// manager); a new Database of the same name takes it over instead of stalling.
func testRecreate(t *testing.T, e *env) {
	g := NewWithT(t)
	ns := e.namespace("recreate")
	g.Expect(e.hub.Create(e.ctx, newDB(ns, "again", "m1"))).To(Succeed())
	g.Eventually(func(g Gomega) {
		g.Expect(e.getDB(ns, "again").Status.Phase).To(Equal(fleetv1alpha1.PhaseReady))
	}).WithTimeout(eventually).WithPolling(poll).Should(Succeed())
	first := e.getDB(ns, "again")
	var old corev1.Secret
	g.Expect(e.hub.Get(e.ctx, client.ObjectKey{Namespace: ns, Name: "again-credentials"}, &old)).To(Succeed())
	g.Expect(e.hub.Delete(e.ctx, first)).To(Succeed())
	// Created again the moment the first is gone: the hub releases its
	// Secret access in the namespace (the last Database went) as the new
	// one needs it again, and no call of the hub's may be refused
	// (TestHub's identity: every 403 fails it).
	g.Eventually(func() bool {
		return apierrors.IsNotFound(e.hub.Get(e.ctx, client.ObjectKey{Namespace: ns, Name: "again"}, &fleetv1alpha1.Database{}))
	}).WithTimeout(eventually).WithPolling(10 * time.Millisecond).Should(BeTrue())
	g.Expect(e.hub.Create(e.ctx, newDB(ns, "again", "m1"))).To(Succeed())
	g.Expect(e.hub.Get(e.ctx, client.ObjectKey{Namespace: ns, Name: "again-credentials"}, &corev1.Secret{})).To(Succeed(), "the leftover this test is about")
	g.Eventually(func(g Gomega) {
		db := e.getDB(ns, "again")
		g.Expect(db.UID).NotTo(Equal(first.UID))
		g.Expect(db.Status.Phase).To(Equal(fleetv1alpha1.PhaseReady), "status: %+v", db.Status.Conditions)
		var s corev1.Secret
		g.Expect(e.hub.Get(e.ctx, client.ObjectKey{Namespace: ns, Name: "again-credentials"}, &s)).To(Succeed())
		g.Expect(metav1.GetControllerOf(&s).UID).To(Equal(db.UID))
		g.Expect(s.OwnerReferences).To(HaveLen(1))
		g.Expect(s.Data).To(Equal(old.Data), "the same credentials")
	}).WithTimeout(eventually).WithPolling(poll).Should(Succeed())
}

func testProtected(t *testing.T, e *env) {
	g := NewWithT(t)
	for _, ns := range []string{"kube-system", hubNS} {
		g.Expect(e.hub.Create(e.ctx, newDB(ns, "sneaky", "m1"))).To(Succeed())
		g.Eventually(func(g Gomega) {
			db := e.getDB(ns, "sneaky")
			stalled := condition(db.Status.Conditions, fleetv1alpha1.ConditionStalled)
			g.Expect(stalled.Status).To(Equal(metav1.ConditionTrue))
			g.Expect(stalled.Reason).To(Equal(fleetv1alpha1.ReasonProtectedNamespace))
			g.Expect(stalled.Message).To(ContainSubstring(ns))
			g.Expect(db.Status.Phase).To(Equal(fleetv1alpha1.PhaseFailed))
			g.Expect(db.Finalizers).To(BeEmpty())
		}).WithTimeout(eventually).WithPolling(poll).Should(Succeed())
		var list appsv1.StatefulSetList
		g.Expect(e.member("m1").List(e.ctx, &list, client.InNamespace(ns))).To(Succeed())
		g.Expect(list.Items).To(BeEmpty())
		g.Expect(e.hub.Delete(e.ctx, e.getDB(ns, "sneaky"))).To(Succeed())
	}
}

// settle waits until the hub has made no write for 3 s.
func (e *env) settle(g Gomega) {
	var last int
	g.Eventually(func() int {
		n, _ := e.writes.Writes()
		d := n - last
		last = n
		return d
	}).WithTimeout(eventually).WithPolling(3 * time.Second).Should(BeZero())
}

// hubWritesIn are the hub's write requests (to hub and members) in namespace
// ns since the last reset, as "target: METHOD path".
func (e *env) hubWritesIn(ns string) []string {
	_, log := e.writes.Writes()
	var out []string
	for _, l := range log {
		if strings.Contains(l, "/namespaces/"+ns+"/") {
			out = append(out, l)
		}
	}
	return out
}

// testChangeCost: a spec change rewrites only the member objects whose
// content it changes, and a delete sends one delete per member object and
// removes the finalizer with one request.
func testChangeCost(t *testing.T, e *env) {
	g := NewWithT(t)
	ns := e.namespace("cost")
	g.Expect(e.hub.Create(e.ctx, newDB(ns, "ledger", "m1", "m2"))).To(Succeed())
	g.Eventually(func(g Gomega) {
		g.Expect(e.getDB(ns, "ledger").Status.Phase).To(Equal(fleetv1alpha1.PhaseReady))
	}).WithTimeout(eventually).WithPolling(poll).Should(Succeed())
	for _, m := range []string{"m1", "m2"} {
		g.Expect(e.member(m).Create(e.ctx, pvcFor(e, m, ns, "ledger"))).To(Succeed())
	}
	e.settle(g)

	// A resources change changes the StatefulSet alone.
	e.writes.Reset()
	db := e.getDB(ns, "ledger")
	db.Spec.Resources = cpuRequest("300m")
	g.Expect(e.hub.Update(e.ctx, db)).To(Succeed())
	g.Eventually(func(g Gomega) {
		db := e.getDB(ns, "ledger")
		g.Expect(condition(db.Status.Conditions, fleetv1alpha1.ConditionReady).Status).To(Equal(metav1.ConditionTrue))
		g.Expect(db.Status.ObservedGeneration).To(Equal(db.Generation))
	}).WithTimeout(eventually).WithPolling(poll).Should(Succeed())
	e.settle(g)
	var memberWrites []string
	for _, w := range e.hubWritesIn(ns) {
		if !strings.HasPrefix(w, "hub: ") {
			memberWrites = append(memberWrites, w)
		}
	}
	g.Expect(memberWrites).To(ConsistOf(
		"m1: PATCH /apis/apps/v1/namespaces/cost/statefulsets/ledger",
		"m2: PATCH /apis/apps/v1/namespaces/cost/statefulsets/ledger",
	), "member writes of a resources change")

	// Delete: every object is deleted once, the finalizer goes in one request.
	e.writes.Reset()
	g.Expect(e.hub.Delete(e.ctx, e.getDB(ns, "ledger"))).To(Succeed())
	g.Eventually(func() bool {
		return apierrors.IsNotFound(e.hub.Get(e.ctx, client.ObjectKey{Namespace: ns, Name: "ledger"}, &fleetv1alpha1.Database{}))
	}).WithTimeout(eventually).WithPolling(poll).Should(BeTrue())
	e.settle(g)
	seen := map[string]int{}
	for _, w := range e.hubWritesIn(ns) {
		seen[w]++
	}
	for _, m := range []string{"m1", "m2"} {
		for _, path := range []string{
			"/apis/apps/v1/namespaces/cost/statefulsets/ledger",
			"/api/v1/namespaces/cost/persistentvolumeclaims/data-ledger-0",
			"/api/v1/namespaces/cost/secrets/ledger-credentials",
		} {
			g.Expect(seen).To(HaveKeyWithValue(m+": DELETE "+path, 1), "deletes sent")
		}
	}
	for w, n := range seen {
		if !strings.HasSuffix(w, "/status") {
			g.Expect(n).To(Equal(1), "%s sent %d times", w, n)
		}
	}
	g.Expect(seen).To(HaveKeyWithValue("hub: PATCH /apis/fleetdb.io/v1alpha1/namespaces/cost/databases/ledger", 1), "finalizer removal")
}

func testAtRest(t *testing.T, e *env) {
	g := NewWithT(t)
	// Everything created so far converges, then the fleet is quiet.
	g.Eventually(func(g Gomega) {
		var list fleetv1alpha1.DatabaseList
		g.Expect(e.hub.List(e.ctx, &list)).To(Succeed())
		for _, db := range list.Items {
			g.Expect(db.Status.ObservedGeneration).To(Equal(db.Generation), db.Name)
		}
	}).WithTimeout(eventually).WithPolling(poll).Should(Succeed())
	// Let in-flight work and the simulator settle, then count.
	e.settle(g)
	e.writes.Reset()
	time.Sleep(5 * time.Second)
	n, log := e.writes.Writes()
	g.Expect(n).To(BeZero(), "writes at rest: %v", log)
}

func testDelete(t *testing.T, e *env) {
	g := NewWithT(t)
	ns := e.namespace("delete")
	for _, policy := range []fleetv1alpha1.DeletionPolicy{fleetv1alpha1.DeletionPolicyDelete, fleetv1alpha1.DeletionPolicyRetain, fleetv1alpha1.DeletionPolicyOrphan} {
		name := "db-" + string(policy[:3]) // db-Del, not a DNS label: lower-case it
		name = lower(name)
		db := newDB(ns, name, "m1", "m2")
		db.Spec.DeletionPolicy = policy
		g.Expect(e.hub.Create(e.ctx, db)).To(Succeed())
		g.Eventually(func(g Gomega) {
			g.Expect(e.getDB(ns, name).Status.Phase).To(Equal(fleetv1alpha1.PhaseReady))
		}).WithTimeout(eventually).WithPolling(poll).Should(Succeed())
		// The PVCs a StatefulSet controller would have made from the claim template.
		for _, m := range []string{"m1", "m2"} {
			g.Expect(e.member(m).Create(e.ctx, pvcFor(e, m, ns, name))).To(Succeed())
		}

		g.Expect(e.hub.Delete(e.ctx, e.getDB(ns, name))).To(Succeed())
		g.Eventually(func() bool {
			err := e.hub.Get(e.ctx, client.ObjectKey{Namespace: ns, Name: name}, &fleetv1alpha1.Database{})
			return apierrors.IsNotFound(err)
		}).WithTimeout(eventually).WithPolling(poll).Should(BeTrue(), "finalizer not removed (%s)", policy)

		for _, m := range []string{"m1", "m2"} {
			c := e.member(m)
			stsErr := c.Get(e.ctx, client.ObjectKey{Namespace: ns, Name: name}, &appsv1.StatefulSet{})
			var pvc corev1.PersistentVolumeClaim
			pvcErr := c.Get(e.ctx, client.ObjectKey{Namespace: ns, Name: "data-" + name + "-0"}, &pvc)
			var secret corev1.Secret
			secretErr := c.Get(e.ctx, client.ObjectKey{Namespace: ns, Name: name + "-credentials"}, &secret)
			var tlsSecret corev1.Secret
			tlsErr := c.Get(e.ctx, client.ObjectKey{Namespace: ns, Name: name + "-instance-tls"}, &tlsSecret)
			switch policy {
			case fleetv1alpha1.DeletionPolicyOrphan:
				g.Expect(tlsErr).NotTo(HaveOccurred(), "%s: the instance TLS Secret is kept in %s", policy, m)
				g.Expect(tlsSecret.Labels).NotTo(HaveKey(fleetv1alpha1.LabelManagedBy))
			default:
				// A private key, issued anew for a new Database.
				g.Expect(apierrors.IsNotFound(tlsErr)).To(BeTrue(), "%s: the instance TLS Secret left in %s", policy, m)
			}
			switch policy {
			case fleetv1alpha1.DeletionPolicyDelete:
				g.Expect(apierrors.IsNotFound(stsErr)).To(BeTrue(), "%s: sts left in %s", policy, m)
				g.Expect(apierrors.IsNotFound(pvcErr)).To(BeTrue(), "%s: pvc left in %s", policy, m)
				g.Expect(apierrors.IsNotFound(secretErr)).To(BeTrue(), "%s: secret left in %s", policy, m)
			case fleetv1alpha1.DeletionPolicyRetain:
				g.Expect(apierrors.IsNotFound(stsErr)).To(BeTrue(), "%s: sts left in %s", policy, m)
				g.Expect(pvcErr).NotTo(HaveOccurred(), "%s: pvc gone in %s", policy, m)
				g.Expect(secretErr).NotTo(HaveOccurred(), "%s: secret gone in %s", policy, m)
				g.Expect(secret.Labels).NotTo(HaveKey(fleetv1alpha1.LabelManagedBy))
			case fleetv1alpha1.DeletionPolicyOrphan:
				var sts appsv1.StatefulSet
				g.Expect(c.Get(e.ctx, client.ObjectKey{Namespace: ns, Name: name}, &sts)).To(Succeed(), "%s: sts gone in %s", policy, m)
				g.Expect(sts.Labels).NotTo(HaveKey(fleetv1alpha1.LabelManagedBy))
				g.Expect(pvcErr).NotTo(HaveOccurred())
				g.Expect(secretErr).NotTo(HaveOccurred())
			}
		}
	}
}

func pvcFor(e *env, member, ns, name string) *corev1.PersistentVolumeClaim {
	var sts appsv1.StatefulSet
	NewWithT(e.t).Expect(e.member(member).Get(e.ctx, client.ObjectKey{Namespace: ns, Name: name}, &sts)).To(Succeed())
	tmpl := sts.Spec.VolumeClaimTemplates[0]
	return &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: tmpl.Name + "-" + name + "-0", Labels: tmpl.Labels},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Resources:   corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}},
		},
	}
}

func testBadMember(t *testing.T, e *env) {
	g := NewWithT(t)
	e.register("broken", []byte("this is not a kubeconfig"), map[string]string{"tier": "broken"})
	g.Eventually(func(g Gomega) {
		var mc fleetv1alpha1.MemberCluster
		g.Expect(e.hub.Get(e.ctx, client.ObjectKey{Name: "broken"}, &mc)).To(Succeed())
		joined := condition(mc.Status.Conditions, fleetv1alpha1.MemberConditionJoined)
		g.Expect(joined.Status).To(Equal(metav1.ConditionFalse))
		g.Expect(joined.Reason).To(Equal(fleetv1alpha1.ReasonInvalidKubeconfig))
	}).WithTimeout(eventually).WithPolling(poll).Should(Succeed())

	// A Database on the broken member and a good one: the good one converges.
	ns := e.namespace("badmember")
	g.Expect(e.hub.Create(e.ctx, newDB(ns, "crm", "m1", "broken"))).To(Succeed())
	g.Eventually(func(g Gomega) {
		db := e.getDB(ns, "crm")
		g.Expect(clusterEntry(db, "m1").Phase).To(Equal(fleetv1alpha1.ClusterPhaseReady))
		g.Expect(clusterEntry(db, "broken").Phase).To(Equal(fleetv1alpha1.ClusterPhaseUnreachable))
		deg := condition(db.Status.Conditions, fleetv1alpha1.ConditionDegraded)
		g.Expect(deg.Status).To(Equal(metav1.ConditionTrue))
		g.Expect(deg.Message).To(ContainSubstring("broken"))
	}).WithTimeout(eventually).WithPolling(poll).Should(Succeed())
	e.waitMemberReady("m2")
	e.waitMemberReady("m3")
}

func testDeleteUnreachable(t *testing.T, e *env) {
	g := NewWithT(t)
	ns := e.namespace("unreachable")
	db := newDB(ns, "events", "m1", "m2", "m3")
	db.Spec.Teardown.UnreachableTimeout = &metav1.Duration{Duration: 3 * time.Second}
	g.Expect(e.hub.Create(e.ctx, db)).To(Succeed())
	g.Eventually(func(g Gomega) {
		g.Expect(e.getDB(ns, "events").Status.Phase).To(Equal(fleetv1alpha1.PhaseReady))
	}).WithTimeout(eventually).WithPolling(poll).Should(Succeed())

	// m3 drops off the network.
	e.proxies["m3"].Cut()
	g.Eventually(func(g Gomega) {
		db := e.getDB(ns, "events")
		g.Expect(clusterEntry(db, "m3").Phase).To(Equal(fleetv1alpha1.ClusterPhaseUnreachable))
		g.Expect(condition(db.Status.Conditions, fleetv1alpha1.ConditionDegraded).Message).To(ContainSubstring("m3"))
	}).WithTimeout(eventually).WithPolling(poll).Should(Succeed())

	g.Eventually(e.eventSeen(ns, "MemberUnreachable", "m3")).WithTimeout(eventually).WithPolling(poll).Should(Succeed())

	g.Expect(e.hub.Delete(e.ctx, e.getDB(ns, "events"))).To(Succeed())
	// The reachable members are cleaned at once.
	for _, m := range []string{"m1", "m2"} {
		g.Eventually(func() bool {
			return apierrors.IsNotFound(e.member(m).Get(e.ctx, client.ObjectKey{Namespace: ns, Name: "events"}, &appsv1.StatefulSet{}))
		}).WithTimeout(eventually).WithPolling(poll).Should(BeTrue())
	}
	// The Database goes after the timeout, with an Event.
	g.Eventually(func() bool {
		return apierrors.IsNotFound(e.hub.Get(e.ctx, client.ObjectKey{Namespace: ns, Name: "events"}, &fleetv1alpha1.Database{}))
	}).WithTimeout(eventually).WithPolling(poll).Should(BeTrue())
	g.Eventually(e.eventSeen(ns, "TeardownSkipped", "m3")).WithTimeout(eventually).WithPolling(poll).Should(Succeed())
	// The leftovers are still in m3 ...
	g.Expect(e.member("m3").Get(e.ctx, client.ObjectKey{Namespace: ns, Name: "events"}, &appsv1.StatefulSet{})).To(Succeed())
	// ... until it is back.
	g.Expect(e.proxies["m3"].Restore()).To(Succeed())
	g.Eventually(func(g Gomega) {
		var list appsv1.StatefulSetList
		g.Expect(e.member("m3").List(e.ctx, &list, client.InNamespace(ns))).To(Succeed())
		g.Expect(list.Items).To(BeEmpty())
		var secrets corev1.SecretList
		g.Expect(e.member("m3").List(e.ctx, &secrets, client.InNamespace(ns), client.MatchingLabels{fleetv1alpha1.LabelManagedBy: fleetv1alpha1.ManagedByValue})).To(Succeed())
		g.Expect(secrets.Items).To(BeEmpty())
	}).WithTimeout(eventually).WithPolling(poll).Should(Succeed())
}

func testCredentialsRecovered(t *testing.T, e *env) {
	g := NewWithT(t)
	ns := e.namespace("credentials")
	g.Expect(e.hub.Create(e.ctx, newDB(ns, "keys", "m1", "m2"))).To(Succeed())
	g.Eventually(func(g Gomega) {
		g.Expect(e.getDB(ns, "keys").Status.Phase).To(Equal(fleetv1alpha1.PhaseReady))
	}).WithTimeout(eventually).WithPolling(poll).Should(Succeed())
	key := client.ObjectKey{Namespace: ns, Name: "keys-credentials"}
	var original corev1.Secret
	g.Expect(e.hub.Get(e.ctx, key, &original)).To(Succeed())

	// Someone deletes the hub copy, then the spec changes.
	g.Expect(e.hub.Delete(e.ctx, &original)).To(Succeed())
	db := e.getDB(ns, "keys")
	db.Spec.Resources = cpuRequest("300m")
	g.Expect(e.hub.Update(e.ctx, db)).To(Succeed())

	g.Eventually(func(g Gomega) {
		var restored corev1.Secret
		g.Expect(e.hub.Get(e.ctx, key, &restored)).To(Succeed())
		g.Expect(restored.UID).NotTo(Equal(original.UID))
		g.Expect(restored.Data["password"]).To(Equal(original.Data["password"]))
		db := e.getDB(ns, "keys")
		g.Expect(db.Status.Phase).To(Equal(fleetv1alpha1.PhaseReady))
		g.Expect(db.Status.ObservedGeneration).To(Equal(db.Generation))
	}).WithTimeout(eventually).WithPolling(poll).Should(Succeed())
	for _, m := range []string{"m1", "m2"} {
		var s corev1.Secret
		g.Expect(e.member(m).Get(e.ctx, key, &s)).To(Succeed())
		g.Expect(s.Data["password"]).To(Equal(original.Data["password"]), "password changed in %s", m)
	}
}
