package e2e

import (
	"cmp"
	"context"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega" //nolint:staticcheck // ST1001: gomega's DSL reads as assertions, as in Cluster API's test/framework
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleetv1alpha1 "github.com/fleetdb/fleetdb/apis/v1alpha1"
	"github.com/fleetdb/fleetdb/member"
)

// ExpectMemberCluster is ExpectMemberWorkload for the CloudNativePG backend:
// the member's Cluster is fleetdb's, written for the Database's current
// generation with in.Replicas instances, and CloudNativePG (the operator on
// kind, kwok Stages in the local fleet) reports it healthy with every
// instance ready and a primary; the client Service and the basic-auth
// credentials Secret are there.
func ExpectMemberCluster(ctx context.Context, in ExpectMemberWorkloadInput) {
	in.T.Helper()
	key := client.ObjectKeyFromObject(in.DB)
	c := in.Member.Client
	NewWithT(in.T).Eventually(func(g Gomega) {
		u := member.NewCNPGCluster()
		g.Expect(c.Get(ctx, key, u)).To(Succeed())
		g.Expect(u.GetLabels()).To(HaveKeyWithValue(fleetv1alpha1.LabelDatabaseUID, string(in.DB.UID)))
		g.Expect(u.GetAnnotations()).To(HaveKeyWithValue(fleetv1alpha1.AnnotationGeneration, strconv.FormatInt(in.DB.Generation, 10)))
		instances, _, _ := unstructured.NestedInt64(u.Object, "spec", "instances")
		g.Expect(instances).To(BeEquivalentTo(in.Replicas), "spec.instances")
		phase, _, _ := unstructured.NestedString(u.Object, "status", "phase")
		ready, _, _ := unstructured.NestedInt64(u.Object, "status", "readyInstances")
		primary, _, _ := unstructured.NestedString(u.Object, "status", "currentPrimary")
		g.Expect(phase).To(Equal("Cluster in healthy state"))
		g.Expect(ready).To(BeEquivalentTo(in.Replicas), "readyInstances")
		g.Expect(primary).NotTo(BeEmpty())
		if in.Version != "" {
			image, _, _ := unstructured.NestedString(u.Object, "spec", "imageName")
			tag, ok := member.CNPGImageTag(in.Version)
			g.Expect(ok).To(BeTrue(), "a pinned image for postgres %s", in.Version)
			g.Expect(image).To(HaveSuffix(":" + tag))
		}
		g.Expect(c.Get(ctx, key, &corev1.Service{})).To(Succeed(), "client Service")
		s := &corev1.Secret{}
		g.Expect(c.Get(ctx, types.NamespacedName{Namespace: key.Namespace, Name: key.Name + "-credentials"}, s)).To(Succeed())
		g.Expect(s.Type).To(Equal(corev1.SecretTypeBasicAuth))
	}).WithContext(ctx).WithTimeout(in.Fleet.Intervals.Ready).WithPolling(in.Fleet.Intervals.Poll).Should(Succeed(), "member %s", in.Member.Name)
}

// CNPGInput is the input of the CloudNativePG specs.
type CNPGInput struct {
	T     testing.TB
	Fleet *Fleet
	// HubServer replaces the hub kubeconfig's server in CNPGMissingSpec, for
	// a hub that runs inside the hub cluster (https://kubernetes.default.svc).
	HubServer string
	// HubNamespace holds the kubeconfig Secrets on the hub; default fleetdb-system.
	HubNamespace string
}

// CNPGOverrideSpec creates a 3-instance Database on the CloudNativePG
// backend everywhere (the sample of docs/local-fleet.md: READY n/n, 3 instances
// per member), then scales one member to 1 instance with an override: that
// member's Cluster follows, the others keep 3, and the hub is Ready again.
func CNPGOverrideSpec(ctx context.Context, in CNPGInput) {
	t, f := in.T, in.Fleet
	g := NewWithT(t)
	ns := CreateNamespace(ctx, CreateNamespaceInput{T: t, Fleet: f, Prefix: "e2e-cnpg"})
	DumpOnFailure(t, f, ns)
	members := f.MemberNames()
	db := NewDatabase(ns, "orders", 3, members)
	g.Expect(f.Hub.Client.Create(ctx, db)).To(Succeed())
	key := client.ObjectKeyFromObject(db)
	ready := WaitForDatabaseReady(ctx, WaitForDatabaseReadyInput{T: t, Fleet: f, Key: key, Members: members, Replicas: 3, Version: "17"})
	g.Expect(ready.EffectiveBackend()).To(Equal(fleetv1alpha1.BackendCloudNativePG))
	for _, m := range f.Members {
		ExpectMemberWorkload(ctx, ExpectMemberWorkloadInput{T: t, Fleet: f, Member: m, DB: ready, Replicas: 3, Version: "17"})
	}

	scaled := members[len(members)-1]
	UpdateDatabase(ctx, t, f, key, func(d *fleetv1alpha1.Database) {
		d.Spec.Overrides = []fleetv1alpha1.OverrideSpec{{ClusterNames: []string{scaled}, Replicas: new(int32(1))}}
	})
	var final *fleetv1alpha1.Database
	g.Eventually(func(g Gomega) {
		final = GetDatabase(ctx, g, f, key)
		g.Expect(final.Status.ObservedGeneration).To(Equal(final.Generation))
		g.Expect(final.Status.Phase).To(Equal(fleetv1alpha1.PhaseReady))
		for _, m := range members {
			want := int32(3)
			if m == scaled {
				want = 1
			}
			e := clusterStatus(final, m)
			g.Expect(e.Replicas).To(Equal(want), m)
			g.Expect(e.ReadyReplicas).To(Equal(want), m)
			g.Expect(e.ObservedGeneration).To(Equal(final.Generation), m)
			g.Expect(e.Primary).NotTo(BeEmpty(), m)
		}
	}).WithContext(ctx).WithTimeout(f.Intervals.Ready).WithPolling(f.Intervals.Poll).Should(Succeed())
	for _, m := range f.Members {
		want := int32(3)
		if m.Name == scaled {
			want = 1
		}
		ExpectMemberWorkload(ctx, ExpectMemberWorkloadInput{T: t, Fleet: f, Member: m, DB: final, Replicas: want})
	}
}

func clusterStatus(db *fleetv1alpha1.Database, name string) fleetv1alpha1.ClusterStatus {
	for _, c := range db.Status.Clusters {
		if c.Name == name {
			return c
		}
	}
	return fleetv1alpha1.ClusterStatus{}
}

// CNPGDeleteSpec deletes a Ready Database on the CloudNativePG backend with
// each deletion policy:
//
//   - Delete: the Cluster and the credentials Secret are gone from every member;
//   - Retain: the Cluster is gone, its volume claims (where CloudNativePG made
//     any: on kind) are kept without owner, and a Database created again under
//     the name is Ready, its new Cluster owning the same claims (CloudNativePG
//     restores it from them);
//   - Orphan: the Cluster keeps running without fleetdb's labels.
func CNPGDeleteSpec(ctx context.Context, in CNPGInput) {
	for _, policy := range []fleetv1alpha1.DeletionPolicy{fleetv1alpha1.DeletionPolicyDelete, fleetv1alpha1.DeletionPolicyRetain, fleetv1alpha1.DeletionPolicyOrphan} {
		in.T.(*testing.T).Run(string(policy), func(t *testing.T) {
			cnpgDelete(ctx, t, in.Fleet, policy)
		})
	}
}

func cnpgDelete(ctx context.Context, t *testing.T, f *Fleet, policy fleetv1alpha1.DeletionPolicy) {
	g := NewWithT(t)
	ns := CreateNamespace(ctx, CreateNamespaceInput{T: t, Fleet: f, Prefix: "e2e-cnpg-" + strings.ToLower(string(policy))})
	DumpOnFailure(t, f, ns)
	members := f.MemberNames()
	db := NewDatabase(ns, "ledger", 2, members)
	db.Spec.DeletionPolicy = policy
	g.Expect(f.Hub.Client.Create(ctx, db)).To(Succeed())
	key := client.ObjectKeyFromObject(db)
	WaitForDatabaseReady(ctx, WaitForDatabaseReadyInput{T: t, Fleet: f, Key: key, Members: members, Replicas: 2})
	claims := map[string][]corev1.PersistentVolumeClaim{}
	for _, m := range f.Members {
		var list corev1.PersistentVolumeClaimList
		g.Expect(m.Client.List(ctx, &list, client.InNamespace(ns), client.MatchingLabels{"cnpg.io/cluster": key.Name})).To(Succeed())
		claims[m.Name] = list.Items
	}

	DeleteDatabaseAndWait(ctx, DeleteDatabaseAndWaitInput{T: t, Fleet: f, Key: key})
	for _, m := range f.Members {
		u := member.NewCNPGCluster()
		err := m.Client.Get(ctx, key, u)
		switch policy {
		case fleetv1alpha1.DeletionPolicyOrphan:
			g.Expect(err).NotTo(HaveOccurred(), "the Cluster keeps running in %s", m.Name)
			g.Expect(u.GetDeletionTimestamp()).To(BeNil())
			g.Expect(u.GetLabels()).NotTo(HaveKey(fleetv1alpha1.LabelManagedBy))
			g.Expect(m.Client.Delete(ctx, u)).To(Succeed()) // the spec's own cleanup
		default:
			g.Expect(apierrors.IsNotFound(err) || (err == nil && u.GetDeletionTimestamp() != nil)).To(BeTrue(), "the Cluster goes in %s: %v", m.Name, err)
		}
		err = m.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: key.Name + "-credentials"}, &corev1.Secret{})
		g.Expect(apierrors.IsNotFound(err)).To(Equal(policy == fleetv1alpha1.DeletionPolicyDelete), "credentials in %s: %v", m.Name, err)
	}
	if policy != fleetv1alpha1.DeletionPolicyRetain {
		return
	}
	for _, m := range f.Members {
		for _, c := range claims[m.Name] {
			var pvc corev1.PersistentVolumeClaim
			g.Expect(m.Client.Get(ctx, client.ObjectKeyFromObject(&c), &pvc)).To(Succeed(), "claim %s kept in %s", c.Name, m.Name)
			g.Expect(pvc.UID).To(Equal(c.UID))
		}
	}
	again := NewDatabase(ns, "ledger", 2, members)
	g.Expect(f.Hub.Client.Create(ctx, again)).To(Succeed())
	WaitForDatabaseReady(ctx, WaitForDatabaseReadyInput{T: t, Fleet: f, Key: key, Members: members, Replicas: 2})
	for _, m := range f.Members {
		u := member.NewCNPGCluster()
		g.Expect(m.Client.Get(ctx, key, u)).To(Succeed())
		for _, c := range claims[m.Name] {
			var pvc corev1.PersistentVolumeClaim
			g.Expect(m.Client.Get(ctx, client.ObjectKeyFromObject(&c), &pvc)).To(Succeed())
			g.Expect(pvc.UID).To(Equal(c.UID), "the same claim %s in %s", c.Name, m.Name)
			owner := metav1.GetControllerOf(&pvc)
			g.Expect(owner).NotTo(BeNil(), "CloudNativePG restored the Cluster from claim %s in %s", c.Name, m.Name)
			g.Expect(owner.UID).To(Equal(u.GetUID()))
		}
	}
}

// CNPGMissingSpec registers the hub cluster itself as a member without
// CloudNativePG (its API server has no Cluster CRD) and places a Database on
// it and on the fleet's first member: that member is Ready, the bare one
// reports BackendMissing, and the MemberCluster lists only StatefulSet.
func CNPGMissingSpec(ctx context.Context, in CNPGInput) {
	t, f := in.T, in.Fleet
	g := NewWithT(t)
	const bare = "e2e-no-cnpg"
	kubeconfig, err := os.ReadFile(f.Hub.Kubeconfig)
	g.Expect(err).NotTo(HaveOccurred())
	if in.HubServer != "" {
		cfg, err := clientcmd.Load(kubeconfig)
		g.Expect(err).NotTo(HaveOccurred())
		for _, c := range cfg.Clusters {
			c.Server = in.HubServer
		}
		kubeconfig, err = clientcmd.Write(*cfg)
		g.Expect(err).NotTo(HaveOccurred())
	}
	hub := f.Hub.Client
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: cmp.Or(in.HubNamespace, "fleetdb-system"), Name: bare + "-kubeconfig"}, Data: map[string][]byte{"kubeconfig": kubeconfig}}
	g.Expect(hub.Create(ctx, secret)).To(Succeed())
	mc := &fleetv1alpha1.MemberCluster{ObjectMeta: metav1.ObjectMeta{Name: bare}, Spec: fleetv1alpha1.MemberClusterSpec{
		KubeconfigSecretRef: fleetv1alpha1.SecretKeyRef{Name: secret.Name, Key: "kubeconfig"},
		NamespaceSelector:   &metav1.LabelSelector{}, // every test namespace may use it
	}}
	g.Expect(hub.Create(ctx, mc)).To(Succeed())
	t.Cleanup(func() {
		cctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		_ = hub.Delete(cctx, mc)
		_ = hub.Delete(cctx, secret)
	})
	ns := CreateNamespace(ctx, CreateNamespaceInput{T: t, Fleet: f, Prefix: "e2e-cnpg-missing"})
	DumpOnFailure(t, f, ns)
	first := f.Members[0].Name
	db := NewDatabase(ns, "atlas", 2, []string{first, bare})
	g.Expect(hub.Create(ctx, db)).To(Succeed())
	g.Eventually(func(g Gomega) {
		cur := GetDatabase(ctx, g, f, client.ObjectKeyFromObject(db))
		g.Expect(clusterStatus(cur, first).Phase).To(Equal(fleetv1alpha1.ClusterPhaseReady))
		b := clusterStatus(cur, bare)
		g.Expect(b.Phase).To(Equal(fleetv1alpha1.ClusterPhaseDegraded))
		g.Expect(b.Reason).To(Equal(fleetv1alpha1.ReasonBackendMissing))
		g.Expect(cur.Status.ReadySummary).To(Equal("1/2"))
		var got fleetv1alpha1.MemberCluster
		g.Expect(hub.Get(ctx, client.ObjectKey{Name: bare}, &got)).To(Succeed())
		g.Expect(got.Status.Backends).To(Equal([]fleetv1alpha1.Backend{fleetv1alpha1.BackendStatefulSet}))
	}).WithContext(ctx).WithTimeout(f.Intervals.Ready).WithPolling(f.Intervals.Poll).Should(Succeed())
}

// MemberReplicas reads the replicas a member's workload wants and has ready:
// its StatefulSet's, or its CloudNativePG Cluster's instances.
func MemberReplicas(ctx context.Context, g Gomega, m *Cluster, db *fleetv1alpha1.Database) (replicas, ready int32) {
	key := client.ObjectKeyFromObject(db)
	if db.EffectiveBackend() == fleetv1alpha1.BackendCloudNativePG {
		u := member.NewCNPGCluster()
		g.Expect(m.Client.Get(ctx, key, u)).To(Succeed())
		n, _, _ := unstructured.NestedInt64(u.Object, "spec", "instances")
		r, _, _ := unstructured.NestedInt64(u.Object, "status", "readyInstances")
		return int32(n), int32(r)
	}
	sts := &appsv1.StatefulSet{}
	g.Expect(m.Client.Get(ctx, key, sts)).To(Succeed())
	return *sts.Spec.Replicas, sts.Status.ReadyReplicas
}
