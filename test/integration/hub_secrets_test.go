package integration

import (
	"context"
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleetv1alpha1 "github.com/fleetdb/fleetdb/apis/v1alpha1"
	"github.com/fleetdb/fleetdb/test/fleet"
)

// TestHubSecretScope (issue 25, item 12) installs deploy/rbac on a real hub
// API server and acts as the hub's identity: it writes the Secrets fleetdb
// owns (labelled app.kubernetes.io/managed-by=fleetdb) in a tenant
// namespace, as the hub does for a Database's credentials, and is refused
// creating, patching, updating or deleting an unlabelled Secret outside the
// hub namespace, taking a tenant's Secret over by adding the label,
// dropping the label of its own, and any Secret write in the hub namespace
// (member kubeconfigs). RBAC still lets it read them: see docs/security.md.
func TestHubSecretScope(t *testing.T) {
	cp, ctx := startHubControlPlane(t, "team-a")
	g := NewWithT(t)
	admin := cp.Client
	for _, obj := range buildKustomization(t, fleet.RepoRoot()+"/deploy/rbac") {
		g.Expect(admin.Create(ctx, obj)).To(Succeed(), "%s %s", obj.GetKind(), obj.GetName())
	}
	impersonated := rest.CopyConfig(cp.Config)
	impersonated.Impersonate = rest.ImpersonationConfig{
		UserName: "system:serviceaccount:" + hubNS + ":" + hubServiceAccount,
		Groups:   []string{"system:serviceaccounts", "system:serviceaccounts:" + hubNS, "system:authenticated"},
	}
	hubClient, err := client.New(impersonated, client.Options{Scheme: fleet.Scheme})
	g.Expect(err).NotTo(HaveOccurred())

	owned := map[string]string{fleetv1alpha1.LabelManagedBy: fleetv1alpha1.ManagedByValue}
	secret := func(ns, name string, labels map[string]string) *corev1.Secret {
		return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: labels},
			Data: map[string][]byte{"password": []byte("pw")}}
	}
	// Admission policies take effect once the API server has loaded them.
	g.Eventually(func() bool {
		err := hubClient.Create(ctx, secret("team-a", "probe", nil))
		if err == nil {
			_ = admin.Delete(ctx, secret("team-a", "probe", nil))
		}
		return apierrors.IsForbidden(err)
	}).WithTimeout(eventually).WithPolling(poll).Should(BeTrue(), "the hub's Secret policy never took effect")
	refused := func(err error, what, text string) {
		t.Helper()
		g.Expect(err).To(HaveOccurred(), "%s was allowed", what)
		g.Expect(apierrors.IsForbidden(err)).To(BeTrue(), "%s: want Forbidden, got %v", what, err)
		g.Expect(err.Error()).To(ContainSubstring(text), what)
	}
	const unlabelled = "writes only Secrets labelled app.kubernetes.io/managed-by=fleetdb"

	// What the hub does: create a Database's credentials Secret, labelled,
	// in the Database's namespace, and patch it (rotation, adoption).
	creds := secret("team-a", "orders-credentials", owned)
	g.Expect(hubClient.Create(ctx, creds)).To(Succeed(), "a credentials Secret as the hub writes it")
	patch := client.MergeFrom(creds.DeepCopy())
	creds.Data["password"] = []byte("rotated")
	g.Expect(hubClient.Patch(ctx, creds, patch)).To(Succeed(), "a patch that keeps fleetdb's label")

	// A tenant's own Secret, unlabelled.
	tenant := secret("team-a", "tenant-tls", nil)
	g.Expect(admin.Create(ctx, tenant)).To(Succeed())
	refused(hubClient.Create(ctx, secret("team-a", "planted", nil)), "creating an unlabelled Secret", unlabelled)
	p := client.MergeFrom(tenant.DeepCopy())
	tenant.Data["password"] = []byte("stolen")
	refused(hubClient.Patch(ctx, tenant, p), "patching a tenant's Secret", unlabelled)
	take := secret("team-a", "tenant-tls", nil)
	g.Expect(admin.Get(ctx, client.ObjectKeyFromObject(take), take)).To(Succeed())
	p = client.MergeFrom(take.DeepCopy())
	take.Labels = owned
	refused(hubClient.Patch(ctx, take, p), "taking a tenant's Secret over by adding fleetdb's label", unlabelled)
	// (RBAC grants no delete: the garbage collector removes a Database's Secret.)
	refused(hubClient.Delete(ctx, secret("team-a", "tenant-tls", nil)), "deleting a tenant's Secret", "")
	drop := creds.DeepCopy()
	p = client.MergeFrom(drop.DeepCopy())
	drop.Labels = map[string]string{fleetv1alpha1.LabelManagedBy: "someone-else"}
	refused(hubClient.Patch(ctx, drop, p), "dropping fleetdb's label from its own Secret", unlabelled)

	// The hub namespace: member kubeconfigs, read only.
	kubeconfig := secret(hubNS, "m1-kubeconfig", nil)
	g.Expect(admin.Create(ctx, kubeconfig)).To(Succeed())
	p = client.MergeFrom(kubeconfig.DeepCopy())
	kubeconfig.Data["kubeconfig"] = []byte("server: https://elsewhere")
	refused(hubClient.Patch(ctx, kubeconfig, p), "patching a member kubeconfig", "never writes Secrets in its own namespace")
	refused(hubClient.Create(ctx, secret(hubNS, "labelled", owned)), "creating a labelled Secret in the hub namespace",
		"never writes Secrets in its own namespace")

	var got corev1.Secret
	g.Expect(admin.Get(ctx, client.ObjectKeyFromObject(tenant), &got)).To(Succeed())
	g.Expect(got.Labels).To(BeEmpty(), "the tenant's Secret is unchanged")
	g.Expect(string(got.Data["password"])).To(Equal("pw"))
	g.Expect(admin.Get(ctx, client.ObjectKeyFromObject(kubeconfig), &got)).To(Succeed())
	g.Expect(got.Data).NotTo(HaveKey("kubeconfig"), "the member kubeconfig is unchanged")
}

// startHubControlPlane starts a hub API server with fleetdb's CRDs and the
// hub namespace and namespaces given, for a test of the hub's identity
// without a fleet; it skips in -short mode.
func startHubControlPlane(t *testing.T, namespaces ...string) (*fleet.ControlPlane, context.Context) {
	t.Helper()
	if testing.Short() {
		t.Skip("starts a control plane")
	}
	g := NewWithT(t)
	assets, err := fleet.AssetsDir()
	g.Expect(err).NotTo(HaveOccurred())
	cp, err := fleet.StartControlPlane("hub", assets, true)
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(func() { _ = cp.Stop() })
	ctx := fleet.Context(t)
	for _, ns := range append([]string{hubNS}, namespaces...) {
		g.Expect(cp.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})).To(Succeed())
	}
	return cp, ctx
}
