package integration

import (
	"context"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	"sigs.k8s.io/yaml"

	fleetv1alpha1 "github.com/fleetdb/fleetdb/apis/v1alpha1"
	"github.com/fleetdb/fleetdb/test/fleet"
)

// TestHubSecretScope (issue 25, item 12) installs deploy/rbac on a real hub
// API server and acts as the hub's identity: it has no Secret rights in a
// tenant namespace until it binds its Secret role there (the RoleBinding
// fleetdb-hub-secrets, as the hub does where a Database lives), and may bind
// only that role, only to itself, never in the hub namespace or kube-*;
// then it writes the Secrets fleetdb owns (labelled
// app.kubernetes.io/managed-by=fleetdb) there, as the hub does for a
// Database's credentials, and is refused creating, patching, updating or
// deleting an unlabelled Secret outside the hub namespace, taking a
// tenant's Secret over by adding the label, dropping the label of its own,
// and any Secret write in the hub namespace (member kubeconfigs). The hub
// running on these rights: TestHubSecretAccess.
func TestHubSecretScope(t *testing.T) {
	cp, ctx := startHubControlPlane(t, "team-a", "payroll")
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
	self := rbacv1.Subject{Kind: "ServiceAccount", Name: hubServiceAccount, Namespace: hubNS}
	binding := func(ns, role string, subject rbacv1.Subject) *rbacv1.RoleBinding {
		return &rbacv1.RoleBinding{ // as the hub makes it: its label on
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: hubSecretRole, Labels: owned},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role},
			Subjects:   []rbacv1.Subject{subject},
		}
	}

	// No Secret rights in a tenant namespace before the binding, none
	// cluster-wide.
	g.Expect(admin.Create(ctx, secret("payroll", "bank-keys", nil))).To(Succeed())
	for _, ns := range []string{"team-a", "payroll", "kube-system"} {
		err := hubClient.Get(ctx, client.ObjectKey{Namespace: ns, Name: "bank-keys"}, &corev1.Secret{})
		g.Expect(apierrors.IsForbidden(err)).To(BeTrue(), "reading a Secret in %s without a binding: want Forbidden, got %v", ns, err)
		err = hubClient.List(ctx, &corev1.SecretList{}, client.InNamespace(ns))
		g.Expect(apierrors.IsForbidden(err)).To(BeTrue(), "listing Secrets in %s without a binding: want Forbidden, got %v", ns, err)
	}
	err = hubClient.List(ctx, &corev1.SecretList{})
	g.Expect(apierrors.IsForbidden(err)).To(BeTrue(), "listing Secrets cluster-wide: want Forbidden, got %v", err)

	// The binding policy takes effect once the API server has loaded it
	// (until then RBAC alone would admit a binding in kube-system).
	g.Eventually(func() bool {
		err := hubClient.Create(ctx, binding("kube-system", hubSecretRole, self))
		if err == nil {
			_ = admin.Delete(ctx, binding("kube-system", hubSecretRole, self))
		}
		return apierrors.IsForbidden(err) || refusedWhereNoDatabase(err)
	}).WithTimeout(eventually).WithPolling(poll).Should(BeTrue(), "the hub's binding policy never took effect")
	refusedBinding := func(rb *rbacv1.RoleBinding, what string) {
		t.Helper()
		err := hubClient.Create(ctx, rb)
		g.Expect(apierrors.IsForbidden(err)).To(BeTrue(), "%s: want Forbidden, got %v", what, err)
	}
	// (No Database there either: either policy may answer first.)
	for _, ns := range []string{hubNS, "kube-public"} {
		err := hubClient.Create(ctx, binding(ns, hubSecretRole, self))
		g.Expect(apierrors.IsForbidden(err) || refusedWhereNoDatabase(err)).To(BeTrue(), "binding the Secret role in %s: got %v", ns, err)
	}

	// Only where a Database lives (issue 42, item 2): payroll has none. The
	// policy takes effect once the API server has loaded it and its
	// Database params. (Its refusal is 422 Invalid, not 403: the API
	// server gives a binding whose params are missing no reason, and that
	// defaults to Invalid: k8s.io/apiserver v0.36.3,
	// pkg/admission/plugin/policy/validating/dispatcher.go.)
	g.Eventually(func() bool {
		err := hubClient.Create(ctx, binding("payroll", hubSecretRole, self))
		if err == nil {
			_ = admin.Delete(ctx, binding("payroll", hubSecretRole, self))
		}
		return refusedWhereNoDatabase(err)
	}).WithTimeout(eventually).WithPolling(poll).Should(BeTrue(),
		"the hub's identity bound its Secret role in a namespace without Databases (a stolen token reaches every namespace)")

	// What the hub does where a Database lives: bind its Secret role to
	// itself; the API server grants it a moment later. (The API server
	// admits the binding once its policy has seen the Database.)
	g.Expect(admin.Create(ctx, &fleetv1alpha1.Database{
		ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "orders"},
		Spec: fleetv1alpha1.DatabaseSpec{Engine: fleetv1alpha1.EnginePostgres, Backend: fleetv1alpha1.BackendStatefulSet, Replicas: 1,
			Storage:   fleetv1alpha1.StorageSpec{Size: resource.MustParse("1Gi")},
			Placement: fleetv1alpha1.PlacementSpec{ClusterNames: []string{"m1"}}},
	})).To(Succeed())
	bound := binding("team-a", hubSecretRole, self)
	g.Eventually(func() error {
		return hubClient.Create(ctx, binding("team-a", hubSecretRole, self))
	}).WithTimeout(eventually).WithPolling(poll).Should(Succeed(), "binding the Secret role to itself where a Database lives")
	g.Expect(admin.Get(ctx, client.ObjectKeyFromObject(bound), bound)).To(Succeed())
	// Where a Database lives, only that binding (the Databases-only policy
	// admits these: the API server has seen the Database).
	refusedBinding(binding("team-a", "admin", self), "binding another role")
	refusedBinding(binding("team-a", hubSecretRole, rbacv1.Subject{Kind: "ServiceAccount", Name: "default", Namespace: "team-a"}),
		"binding the Secret role to another subject")
	other := binding("team-a", "view", self)
	other.Name = "hub-view"
	refusedBinding(other, "another RoleBinding")
	bare := binding("team-a", hubSecretRole, self)
	bare.Labels = nil
	refusedBinding(bare, "its RoleBinding without fleetdb's label (which the Databases-only policy selects)")
	p := client.MergeFrom(bound.DeepCopy())
	bound.Labels = map[string]string{fleetv1alpha1.LabelManagedBy: fleetv1alpha1.ManagedByValue, "changed": "yes"}
	errPatch := hubClient.Patch(ctx, bound, p)
	g.Expect(apierrors.IsForbidden(errPatch)).To(BeTrue(), "changing its RoleBinding: want Forbidden, got %v", errPatch)
	g.Eventually(func() error {
		return hubClient.List(ctx, &corev1.SecretList{}, client.InNamespace("team-a"))
	}).WithTimeout(eventually).WithPolling(poll).Should(Succeed(), "the binding never granted the Secrets of team-a")
	err = hubClient.Get(ctx, client.ObjectKey{Namespace: "payroll", Name: "bank-keys"}, &corev1.Secret{})
	g.Expect(apierrors.IsForbidden(err)).To(BeTrue(), "reading a Secret where it holds no binding: want Forbidden, got %v", err)

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
	g.Expect(hubClient.Get(ctx, client.ObjectKeyFromObject(creds), &corev1.Secret{})).To(Succeed(), "reading it back")
	patch := client.MergeFrom(creds.DeepCopy())
	creds.Data["password"] = []byte("rotated")
	g.Expect(hubClient.Patch(ctx, creds, patch)).To(Succeed(), "a patch that keeps fleetdb's label")

	// No ServiceAccount token, labelled or not (issue 42, item 2): the
	// token controller would fill one in with a tenant ServiceAccount's token.
	const tokenText = "never writes a ServiceAccount token Secret"
	tokenSecret := secret("team-a", "tenant-token", owned)
	tokenSecret.Type = corev1.SecretTypeServiceAccountToken
	tokenSecret.Annotations = map[string]string{corev1.ServiceAccountNameKey: "default"}
	tokenSecret.Data = nil
	refused(hubClient.Create(ctx, tokenSecret), "creating a labelled ServiceAccount token Secret", tokenText)
	named := secret("team-a", "named", owned)
	named.Annotations = map[string]string{corev1.ServiceAccountNameKey: "default"}
	refused(hubClient.Create(ctx, named), "creating a labelled Secret naming a ServiceAccount", tokenText)
	annotate := creds.DeepCopy()
	p = client.MergeFrom(annotate.DeepCopy())
	annotate.Annotations = map[string]string{corev1.ServiceAccountNameKey: "default"}
	refused(hubClient.Patch(ctx, annotate, p), "naming a ServiceAccount on its own Secret", tokenText)

	// A tenant's own Secret, unlabelled.
	tenant := secret("team-a", "tenant-tls", nil)
	g.Expect(admin.Create(ctx, tenant)).To(Succeed())
	refused(hubClient.Create(ctx, secret("team-a", "planted", nil)), "creating an unlabelled Secret", unlabelled)
	p = client.MergeFrom(tenant.DeepCopy())
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

	// The hub namespace: member kubeconfigs, read only (the Role there
	// grants no write; the policy would refuse one too).
	kubeconfig := secret(hubNS, "m1-kubeconfig", nil)
	g.Expect(admin.Create(ctx, kubeconfig)).To(Succeed())
	p = client.MergeFrom(kubeconfig.DeepCopy())
	kubeconfig.Data["kubeconfig"] = []byte("server: https://elsewhere")
	refused(hubClient.Patch(ctx, kubeconfig, p), "patching a member kubeconfig", "")
	refused(hubClient.Create(ctx, secret(hubNS, "labelled", owned)), "creating a labelled Secret in the hub namespace", "")

	var got corev1.Secret
	g.Expect(admin.Get(ctx, client.ObjectKeyFromObject(tenant), &got)).To(Succeed())
	g.Expect(got.Labels).To(BeEmpty(), "the tenant's Secret is unchanged")
	g.Expect(string(got.Data["password"])).To(Equal("pw"))
	g.Expect(admin.Get(ctx, client.ObjectKeyFromObject(kubeconfig), &got)).To(Succeed())
	g.Expect(got.Data).NotTo(HaveKey("kubeconfig"), "the member kubeconfig is unchanged")

	// The hub removes its binding when the namespace's last Database goes:
	// only that one.
	theirs := binding("payroll", "view", rbacv1.Subject{Kind: "ServiceAccount", Name: "default", Namespace: "payroll"})
	theirs.Name = "tenant-view"
	g.Expect(admin.Create(ctx, theirs)).To(Succeed())
	err = hubClient.Delete(ctx, theirs)
	g.Expect(apierrors.IsForbidden(err)).To(BeTrue(), "deleting a tenant's RoleBinding: want Forbidden, got %v", err)
	g.Expect(hubClient.Delete(ctx, bound)).To(Succeed(), "removing its own binding")
}

// refusedWhereNoDatabase reports whether err is the API server refusing the
// hub's RoleBinding in a namespace without a Database
// (hubsecret.BindingPolicy, deploy/rbac/secrets_policy.yaml).
func refusedWhereNoDatabase(err error) bool {
	return err != nil && (apierrors.IsInvalid(err) || apierrors.IsForbidden(err)) &&
		strings.Contains(err.Error(), "fleetdb-hub-binds-only-where-databases-live") &&
		strings.Contains(err.Error(), "no params found")
}

// startHubControlPlane starts a hub API server with fleetdb's CRDs and the
// hub namespace and namespaces given, for a test of the hub's identity
// without a fleet; it skips in -short mode.
func startHubControlPlane(t *testing.T, namespaces ...string) (*fleet.ControlPlane, context.Context) {
	t.Helper()
	return fleet.StartTestControlPlane(t, true, append([]string{hubNS}, namespaces...)...)
}

// TestHubSecretAccess (issue 25, item 12): the hub runs as deploy/rbac's
// ServiceAccount (every 403 it gets fails the test) and holds Secret rights
// in the hub cluster only where a Database lives:
//
//   - its identity cannot read or list a Secret in a namespace without
//     Databases, nor list Secrets cluster-wide;
//   - a Database in a tenant namespace becomes Ready, its credentials Secret
//     written, after the hub bound its Secret role there (the RoleBinding
//     fleetdb-hub-secrets, to itself);
//   - the hub's own Secret requests name only that namespace and its own
//     (no cluster-wide Secret list or watch);
//   - the binding stays while a Database is left in the namespace, and goes
//     once its last Database's deletion completed; its identity is refused
//     there again.
func TestHubSecretAccess(t *testing.T) {
	secretCalls, dbLists := &secretRequests{}, &databaseLists{}
	wrap := func(rt http.RoundTripper) http.RoundTripper { return secretCalls.wrap(dbLists.wrap(rt)) }
	e := startEnvWith(t, envOptions{hubWrap: wrap}, "m1")
	e.sim.enable("m1", true)
	g := NewWithT(t)

	impersonated := rest.CopyConfig(e.fleet.Hub.Config)
	impersonated.Impersonate = rest.ImpersonationConfig{
		UserName: "system:serviceaccount:" + hubNS + ":" + hubServiceAccount,
		Groups:   []string{"system:serviceaccounts", "system:serviceaccounts:" + hubNS, "system:authenticated"},
	}
	hubClient, err := client.New(impersonated, client.Options{Scheme: fleet.Scheme})
	g.Expect(err).NotTo(HaveOccurred())
	refused := func(ns, what string) {
		t.Helper()
		err := hubClient.Get(e.ctx, client.ObjectKey{Namespace: ns, Name: what}, &corev1.Secret{})
		g.Expect(apierrors.IsForbidden(err)).To(BeTrue(), "the hub's identity reading Secret %s/%s: want Forbidden, got %v", ns, what, err)
		err = hubClient.List(e.ctx, &corev1.SecretList{}, client.InNamespace(ns))
		g.Expect(apierrors.IsForbidden(err)).To(BeTrue(), "the hub's identity listing Secrets in %s: want Forbidden, got %v", ns, err)
	}

	// A tenant's Secret in a namespace without Databases.
	vault := e.namespace("vault")
	g.Expect(e.hub.Create(e.ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: vault, Name: "bank-keys"},
		Data: map[string][]byte{"key": []byte("s3cret")}})).To(Succeed())
	refused(vault, "bank-keys")
	err = hubClient.List(e.ctx, &corev1.SecretList{})
	g.Expect(apierrors.IsForbidden(err)).To(BeTrue(), "the hub's identity listing Secrets cluster-wide: want Forbidden, got %v", err)

	ns := e.namespace("ledger")
	rbKey := client.ObjectKey{Namespace: ns, Name: hubSecretRole}
	refused(ns, "orders-credentials")
	for _, name := range []string{"orders", "invoices"} {
		g.Expect(e.hub.Create(e.ctx, newDB(ns, name, "m1"))).To(Succeed())
	}
	for _, name := range []string{"orders", "invoices"} {
		g.Eventually(func(g Gomega) {
			db := e.getDB(ns, name)
			g.Expect(db.Status.Phase).To(Equal(fleetv1alpha1.PhaseReady), "%+v", db.Status.Clusters)
		}).WithTimeout(eventually).WithPolling(poll).Should(Succeed())
	}
	var creds corev1.Secret
	g.Expect(e.hub.Get(e.ctx, client.ObjectKey{Namespace: ns, Name: "orders-credentials"}, &creds)).To(Succeed())
	g.Expect(creds.Data["password"]).NotTo(BeEmpty(), "the credentials Secret was written")
	var memberCreds corev1.Secret
	g.Expect(e.member("m1").Get(e.ctx, client.ObjectKeyFromObject(&creds), &memberCreds)).To(Succeed())
	g.Expect(memberCreds.Data["password"]).To(Equal(creds.Data["password"]))

	var rb rbacv1.RoleBinding
	g.Expect(e.hub.Get(e.ctx, rbKey, &rb)).To(Succeed(), "the hub bound its Secret role where its Databases live")
	g.Expect(rb.RoleRef).To(Equal(rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: hubSecretRole}))
	g.Expect(rb.Subjects).To(ConsistOf(rbacv1.Subject{Kind: "ServiceAccount", Name: hubServiceAccount, Namespace: hubNS}))
	g.Expect(hubClient.Get(e.ctx, client.ObjectKeyFromObject(&creds), &corev1.Secret{})).To(Succeed(),
		"the hub's identity reads the Secrets of a namespace where a Database lives")
	refused(vault, "bank-keys")

	t.Run("the hub sends Secret requests only for its namespace and the Databases'", func(t *testing.T) {
		g := NewWithT(t)
		reqs := secretCalls.all()
		g.Expect(reqs).NotTo(BeEmpty(), "the request log names the hub's Secret requests")
		for _, r := range reqs {
			g.Expect(r.url.Path).To(Or(HavePrefix("/api/v1/namespaces/"+ns+"/secrets"), HavePrefix("/api/v1/namespaces/"+hubNS+"/secrets")),
				"a Secret request outside %s and %s: %s", ns, hubNS, r.method)
		}
	})

	t.Run("the binding stays while a Database is left, and goes with the last one", func(t *testing.T) {
		g := NewWithT(t)
		gone := func(name string) {
			t.Helper()
			g.Expect(e.hub.Delete(e.ctx, e.getDB(ns, name))).To(Succeed())
			g.Eventually(func() bool {
				return apierrors.IsNotFound(e.hub.Get(e.ctx, client.ObjectKey{Namespace: ns, Name: name}, &fleetv1alpha1.Database{}))
			}).WithTimeout(eventually).WithPolling(poll).Should(BeTrue(), "the deletion of %s never completed", name)
		}
		gone("orders")
		g.Expect(e.hub.Get(e.ctx, rbKey, &rbacv1.RoleBinding{})).To(Succeed(), "the binding stays while invoices is left")
		g.Expect(e.getDB(ns, "invoices").Status.Phase).To(Equal(fleetv1alpha1.PhaseReady))
		g.Expect(hubClient.Get(e.ctx, client.ObjectKey{Namespace: ns, Name: "invoices-credentials"}, &corev1.Secret{})).To(Succeed())

		gone("invoices")
		g.Eventually(func() bool {
			return apierrors.IsNotFound(e.hub.Get(e.ctx, rbKey, &rbacv1.RoleBinding{}))
		}).WithTimeout(eventually).WithPolling(poll).Should(BeTrue(), "the binding outlived the namespace's last Database")
		g.Eventually(func() bool {
			return apierrors.IsForbidden(hubClient.List(e.ctx, &corev1.SecretList{}, client.InNamespace(ns)))
		}).WithTimeout(eventually).WithPolling(poll).Should(BeTrue(), "the hub's identity still reads Secrets in %s", ns)
		g.Expect(e.member("m1").Get(e.ctx, client.ObjectKeyFromObject(&creds), &corev1.Secret{})).To(
			WithTransform(apierrors.IsNotFound, BeTrue()), "the teardown removed the member's credentials Secret")

		// A new Database there binds again.
		g.Expect(e.hub.Create(e.ctx, newDB(ns, "receipts", "m1"))).To(Succeed())
		g.Eventually(func(g Gomega) {
			g.Expect(e.getDB(ns, "receipts").Status.Phase).To(Equal(fleetv1alpha1.PhaseReady))
		}).WithTimeout(eventually).WithPolling(poll).Should(Succeed())
		g.Expect(e.hub.Get(e.ctx, rbKey, &rbacv1.RoleBinding{})).To(Succeed(), "bound again for a new Database")
	})

	t.Run("Databases of a namespace deleted at once read the namespace's Databases live once, and the binding goes with the last", func(t *testing.T) {
		g := NewWithT(t)
		batch := e.namespace("batch")
		names := []string{"b1", "b2", "b3", "b4", "b5", "b6", "b7", "b8", "b9", "b10"}
		for _, name := range names {
			g.Expect(e.hub.Create(e.ctx, newDB(batch, name, "m1"))).To(Succeed())
		}
		g.Eventually(func(g Gomega) {
			for _, name := range names {
				g.Expect(e.getDB(batch, name).Status.Phase).To(Equal(fleetv1alpha1.PhaseReady))
			}
		}).WithTimeout(eventually).WithPolling(poll).Should(Succeed())
		before := dbLists.in(batch)
		for _, name := range names {
			g.Expect(e.hub.Delete(e.ctx, e.getDB(batch, name))).To(Succeed())
		}
		g.Eventually(func() bool {
			return apierrors.IsNotFound(e.hub.Get(e.ctx, client.ObjectKey{Namespace: batch, Name: hubSecretRole}, &rbacv1.RoleBinding{}))
		}).WithTimeout(eventually).WithPolling(poll).Should(BeTrue(), "the binding outlived the namespace's last Database")
		var left fleetv1alpha1.DatabaseList
		g.Expect(e.hub.List(e.ctx, &left, client.InNamespace(batch))).To(Succeed())
		g.Expect(left.Items).To(BeEmpty(), "the binding went while a Database was left")
		// Before: two live lists per Database (its finalizer's release and
		// its deletion's reconcile), one after the other behind the
		// namespace's lock. Now only what the cache cannot settle: the last.
		g.Expect(dbLists.in(batch)-before).To(BeNumerically("<=", 2),
			"live lists of the namespace's Databases while %d of them were deleted at once", len(names))
	})

	t.Run("a binding a platform team made under that name is used and kept when the last Database goes", func(t *testing.T) {
		g := NewWithT(t)
		team := e.namespace("granted")
		mine := &rbacv1.RoleBinding{
			ObjectMeta: metav1.ObjectMeta{Namespace: team, Name: hubSecretRole},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: hubSecretRole},
			Subjects:   []rbacv1.Subject{{Kind: "ServiceAccount", Name: hubServiceAccount, Namespace: hubNS}},
		}
		g.Expect(e.hub.Create(e.ctx, mine)).To(Succeed())
		g.Expect(e.hub.Create(e.ctx, newDB(team, "audit", "m1"))).To(Succeed())
		g.Eventually(func(g Gomega) {
			g.Expect(e.getDB(team, "audit").Status.Phase).To(Equal(fleetv1alpha1.PhaseReady))
		}).WithTimeout(eventually).WithPolling(poll).Should(Succeed())
		g.Expect(e.hub.Delete(e.ctx, e.getDB(team, "audit"))).To(Succeed())
		g.Eventually(func() bool {
			return apierrors.IsNotFound(e.hub.Get(e.ctx, client.ObjectKey{Namespace: team, Name: "audit"}, &fleetv1alpha1.Database{}))
		}).WithTimeout(eventually).WithPolling(poll).Should(BeTrue())
		g.Consistently(func() error {
			return e.hub.Get(e.ctx, client.ObjectKeyFromObject(mine), &rbacv1.RoleBinding{})
		}).WithTimeout(3*time.Second).WithPolling(poll).Should(Succeed(), "the hub deleted a RoleBinding it did not make")
	})

	t.Run("a restarted hub removes a binding left where no Database is, and keeps the others", func(t *testing.T) {
		g := NewWithT(t)
		// As a hub that stopped between releasing a namespace's last
		// Database and removing its binding leaves it.
		attic := e.namespace("attic")
		left := &rbacv1.RoleBinding{
			ObjectMeta: metav1.ObjectMeta{Namespace: attic, Name: hubSecretRole,
				Labels: map[string]string{fleetv1alpha1.LabelManagedBy: fleetv1alpha1.ManagedByValue}},
			RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: hubSecretRole},
			Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Name: hubServiceAccount, Namespace: hubNS}},
		}
		// (Created unlabelled, then labelled: the API server admits the
		// labelled binding only where a Database lives.)
		labels := left.Labels
		left.Labels = nil
		g.Expect(e.hub.Create(e.ctx, left)).To(Succeed())
		patch := client.MergeFrom(left.DeepCopy())
		left.Labels = labels
		g.Expect(e.hub.Patch(e.ctx, left, patch)).To(Succeed())
		e.stopHub()
		e.startHub(envOptions{hubWrap: wrap})
		g.Eventually(func() bool {
			return apierrors.IsNotFound(e.hub.Get(e.ctx, client.ObjectKeyFromObject(left), &rbacv1.RoleBinding{}))
		}).WithTimeout(eventually).WithPolling(poll).Should(BeTrue(), "the restarted hub left the binding of a namespace without Databases")
		g.Expect(e.hub.Get(e.ctx, rbKey, &rbacv1.RoleBinding{})).To(Succeed(), "the binding where receipts lives stays")

		// The restarted hub works on with the binding it finds.
		g.Expect(e.hub.Create(e.ctx, newDB(ns, "refunds", "m1"))).To(Succeed())
		g.Eventually(func(g Gomega) {
			g.Expect(e.getDB(ns, "refunds").Status.Phase).To(Equal(fleetv1alpha1.PhaseReady))
			g.Expect(e.getDB(ns, "receipts").Status.Phase).To(Equal(fleetv1alpha1.PhaseReady))
		}).WithTimeout(eventually).WithPolling(poll).Should(Succeed())
		g.Expect(e.member("m1").Get(e.ctx, client.ObjectKey{Namespace: ns, Name: "refunds-credentials"}, &corev1.Secret{})).To(Succeed())
	})
}

// databaseLists counts the hub's list requests for the Databases of one
// namespace (the informer lists them cluster-wide: a namespaced list is a
// live read, hubsecret.Access.Release's).
type databaseLists struct {
	mu sync.Mutex
	n  map[string]int
}

func (d *databaseLists) wrap(rt http.RoundTripper) http.RoundTripper {
	return roundTripper(func(req *http.Request) (*http.Response, error) {
		const prefix = "/apis/fleetdb.io/v1alpha1/namespaces/"
		if p := req.URL.Path; req.Method == http.MethodGet && strings.HasPrefix(p, prefix) && strings.HasSuffix(p, "/databases") {
			d.mu.Lock()
			if d.n == nil {
				d.n = map[string]int{}
			}
			d.n[strings.TrimSuffix(strings.TrimPrefix(p, prefix), "/databases")]++
			d.mu.Unlock()
		}
		return rt.RoundTrip(req)
	})
}

func (d *databaseLists) in(ns string) int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.n[ns]
}

// secretBytes counts what the hub receives from its API server for the
// Secrets of one namespace (response bodies, watches included), and the
// names it reads one by one there.
type secretBytes struct {
	ns string

	mu    sync.Mutex
	n     int64
	names map[string]int
}

func (b *secretBytes) wrap(rt http.RoundTripper) http.RoundTripper {
	return roundTripper(func(req *http.Request) (*http.Response, error) {
		prefix := "/api/v1/namespaces/" + b.ns + "/secrets"
		if !strings.HasPrefix(req.URL.Path, prefix) {
			return rt.RoundTrip(req)
		}
		if name := strings.TrimPrefix(strings.TrimPrefix(req.URL.Path, prefix), "/"); name != "" && req.Method == http.MethodGet {
			b.mu.Lock()
			if b.names == nil {
				b.names = map[string]int{}
			}
			b.names[name]++
			b.mu.Unlock()
		}
		resp, err := rt.RoundTrip(req)
		if err == nil && resp.Body != nil {
			resp.Body = &countingBody{ReadCloser: resp.Body, add: b.add}
		}
		return resp, err
	})
}

func (b *secretBytes) add(n int) {
	b.mu.Lock()
	b.n += int64(n)
	b.mu.Unlock()
}

func (b *secretBytes) received() int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.n
}

func (b *secretBytes) read() map[string]int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return maps.Clone(b.names)
}

type countingBody struct {
	io.ReadCloser
	add func(int)
}

func (c *countingBody) Read(p []byte) (int, error) {
	n, err := c.ReadCloser.Read(p)
	c.add(n)
	return n, err
}

// TestHubSecretCache (issue 42, item 4): a tenant plants many large Secrets
// labelled app.kubernetes.io/managed-by=fleetdb in a namespace where the hub
// holds Secret access (the label is no trust boundary: anyone who may write
// Secrets there sets it). Their data never reaches the hub, neither while it
// runs (its watch of the namespace) nor when it starts again (its first
// list), and it reads by name only the Secrets of its Databases; its
// Databases work on.
func TestHubSecretCache(t *testing.T) {
	const ns = "hoard"
	counted := &secretBytes{ns: ns}
	e := startEnvWith(t, envOptions{hubWrap: counted.wrap}, "m1")
	e.sim.enable("m1", true)
	g := NewWithT(t)
	e.namespace(ns)
	ready := func(name string) {
		t.Helper()
		g.Eventually(func(g Gomega) {
			g.Expect(e.getDB(ns, name).Status.Phase).To(Equal(fleetv1alpha1.PhaseReady))
		}).WithTimeout(eventually).WithPolling(poll).Should(Succeed())
	}
	g.Expect(e.hub.Create(e.ctx, newDB(ns, "orders", "m1"))).To(Succeed())
	ready("orders")

	// The tenant's hoard: 24 Secrets of 512 KiB, fleetdb's label on each.
	const planted, size = 24, 512 << 10
	before := counted.received()
	junk := make([]byte, size)
	for i := range junk {
		junk[i] = byte('a' + i%26)
	}
	for i := range planted {
		g.Expect(e.hub.Create(e.ctx, &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("hoard-%d", i),
				Labels: map[string]string{fleetv1alpha1.LabelManagedBy: fleetv1alpha1.ManagedByValue}},
			Data: map[string][]byte{"blob": junk},
		})).To(Succeed())
	}
	// The hub works on in the namespace meanwhile.
	g.Expect(e.hub.Create(e.ctx, newDB(ns, "invoices", "m1"))).To(Succeed())
	ready("invoices")

	// And starts again: its first list of the namespace.
	e.stopHub()
	e.startHub(envOptions{hubWrap: counted.wrap})
	g.Expect(e.hub.Create(e.ctx, newDB(ns, "receipts", "m1"))).To(Succeed())
	ready("receipts")
	for _, name := range []string{"orders", "invoices", "receipts"} {
		var hubCreds, memberCreds corev1.Secret
		key := client.ObjectKey{Namespace: ns, Name: name + "-credentials"}
		g.Expect(e.hub.Get(e.ctx, key, &hubCreds)).To(Succeed())
		g.Eventually(func() error { return e.member("m1").Get(e.ctx, key, &memberCreds) }).
			WithTimeout(eventually).WithPolling(poll).Should(Succeed())
		g.Expect(memberCreds.Data["password"]).To(Equal(hubCreds.Data["password"]), "%s's credentials reached the member", name)
	}

	got := counted.received() - before
	t.Logf("the hub received %d bytes of Secrets of %s while %d bytes were planted there (twice over: its watch, then its first list after a restart)",
		got, ns, planted*size)
	g.Expect(got).To(BeNumerically("<", size), "the hub received the planted Secrets' data (%d bytes)", got)
	for name := range counted.read() {
		g.Expect(name).To(SatisfyAny(HaveSuffix("-credentials"), HaveSuffix("-topology-pki"), HaveSuffix("-instance-pki")), "the hub read a Secret not of a Database by name")
		g.Expect(name).NotTo(HavePrefix("hoard-"), "the hub read a planted Secret")
	}
}

// TestHubPoliciesElsewhere (issue 42, item 6): deploy/hub installed in
// another namespace (its namespace: changed, as `kustomize edit set
// namespace` does) binds the hub policies to that namespace's hub identity on
// a real API server: that identity is refused its Secret role in kube-system
// and where no Database lives, and a ServiceAccount token Secret.
func TestHubPoliciesElsewhere(t *testing.T) {
	const elsewhere = "db-operators"
	cp, ctx := fleet.StartTestControlPlane(t, true, elsewhere, "team-b")
	g := NewWithT(t)
	admin := cp.Client

	mem := filesys.MakeFsInMemory()
	root := filepath.Join(fleet.RepoRoot(), "deploy")
	g.Expect(filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		return mem.WriteFile(filepath.Join("/deploy", rel), b)
	})).To(Succeed())
	k, err := mem.ReadFile("/deploy/hub/kustomization.yaml")
	g.Expect(err).NotTo(HaveOccurred())
	k = regexp.MustCompile(`(?m)^namespace: .*$`).ReplaceAll(k, []byte("namespace: "+elsewhere))
	g.Expect(mem.WriteFile("/deploy/hub/kustomization.yaml", k)).To(Succeed())
	m, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(mem, "/deploy/hub")
	g.Expect(err).NotTo(HaveOccurred())
	for _, r := range m.Resources() {
		switch r.GetKind() {
		case "ServiceAccount", "Role", "RoleBinding", "ClusterRole", "ClusterRoleBinding",
			"ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding":
		default:
			continue // the CRDs are there; no Deployment runs here
		}
		y, err := r.AsYAML()
		g.Expect(err).NotTo(HaveOccurred())
		obj := map[string]any{}
		g.Expect(yaml.Unmarshal(y, &obj)).To(Succeed())
		u := &unstructured.Unstructured{Object: obj}
		if err := admin.Create(ctx, u); !apierrors.IsAlreadyExists(err) { // the harness's deletion protection
			g.Expect(err).NotTo(HaveOccurred(), "%s %s", u.GetKind(), u.GetName())
		}
	}

	impersonated := rest.CopyConfig(cp.Config)
	impersonated.Impersonate = rest.ImpersonationConfig{
		UserName: "system:serviceaccount:" + elsewhere + ":" + hubServiceAccount,
		Groups:   []string{"system:serviceaccounts", "system:serviceaccounts:" + elsewhere, "system:authenticated"},
	}
	hubClient, err := client.New(impersonated, client.Options{Scheme: fleet.Scheme})
	g.Expect(err).NotTo(HaveOccurred())
	self := rbacv1.Subject{Kind: "ServiceAccount", Name: hubServiceAccount, Namespace: elsewhere}
	binding := func(ns string) *rbacv1.RoleBinding {
		return &rbacv1.RoleBinding{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: hubSecretRole,
				Labels: map[string]string{fleetv1alpha1.LabelManagedBy: fleetv1alpha1.ManagedByValue}},
			RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: hubSecretRole},
			Subjects: []rbacv1.Subject{self},
		}
	}
	for _, ns := range []string{"kube-system", "team-b", elsewhere} {
		g.Eventually(func() bool {
			err := hubClient.Create(ctx, binding(ns))
			if err == nil {
				_ = admin.Delete(ctx, binding(ns))
			}
			if ns == "team-b" {
				return refusedWhereNoDatabase(err)
			}
			return apierrors.IsForbidden(err) || refusedWhereNoDatabase(err)
		}).WithTimeout(eventually).WithPolling(poll).Should(BeTrue(),
			"the hub installed in %s bound its Secret role in %s: its policies do not bind it", elsewhere, ns)
	}

	// Where a Database lives it binds, and writes fleetdb's Secrets, never
	// a ServiceAccount token.
	g.Expect(admin.Create(ctx, newDB("team-b", "orders", "m1"))).To(Succeed())
	g.Eventually(func() error { return hubClient.Create(ctx, binding("team-b")) }).
		WithTimeout(eventually).WithPolling(poll).Should(Succeed(), "binding where a Database lives")
	owned := map[string]string{fleetv1alpha1.LabelManagedBy: fleetv1alpha1.ManagedByValue}
	g.Eventually(func() error {
		return hubClient.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "team-b", Name: "orders-credentials", Labels: owned},
			Data: map[string][]byte{"password": []byte("pw")}})
	}).WithTimeout(eventually).WithPolling(poll).Should(Succeed(), "the binding never granted the Secrets of team-b")
	g.Eventually(func() bool {
		s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "team-b", Name: "tenant-token", Labels: owned,
			Annotations: map[string]string{corev1.ServiceAccountNameKey: "default"}},
			Type: corev1.SecretTypeServiceAccountToken}
		err := hubClient.Create(ctx, s)
		if err == nil {
			_ = admin.Delete(ctx, s)
		}
		return apierrors.IsForbidden(err)
	}).WithTimeout(eventually).WithPolling(poll).Should(BeTrue(), "the hub installed in %s wrote a ServiceAccount token Secret", elsewhere)
}
