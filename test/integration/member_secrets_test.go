package integration

import (
	"slices"
	"strings"
	"testing"

	. "github.com/onsi/gomega"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleetv1alpha1 "github.com/fleetdb/fleetdb/apis/v1alpha1"
	"github.com/fleetdb/fleetdb/member"
	"github.com/fleetdb/fleetdb/test/fleet"
)

// TestMemberSecretScope (issue 25, item 11): the hub joins a real member API
// server as deploy/member's identity (a token of the fleetdb-hub-agent
// ServiceAccount, the member's RBAC and admission policies installed), and
// that identity reads Secrets only in the namespaces fleetdb manages:
//
//   - a Database placed there becomes Ready and its credentials Secret
//     reaches the member, which took binding the Secret role in the new
//     namespace before the first Secret call (the hub never gets a member
//     Secret it may not read: no cluster-wide Secret list or watch is sent);
//   - the identity reads the Secret there and is refused in kube-system, in
//     a namespace fleetdb does not manage and cluster-wide;
//   - it cannot bind the Secret role anywhere else (kube-system, an
//     unmanaged namespace), to anyone else, or bind another role;
//   - a Secret deleted by hand in the member is put back (the namespace's
//     Secret watch), and the Database's teardown removes its Secret and
//     nothing of the member admins' own.
func TestMemberSecretScope(t *testing.T) {
	e := startEnvWith(t, envOptions{unregistered: []string{"m1"}}, "m1")
	e.sim.enable("m1", true)
	g := NewWithT(t)
	m := e.fleet.Member("m1")
	admin := m.Client
	installMemberBase(t, e.ctx, admin)

	// The member admins' own Secrets: in kube-system and in a namespace
	// fleetdb does not manage.
	g.Expect(admin.Create(e.ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "payroll"}})).To(Succeed())
	theirs := map[string]string{"kube-system": "cluster-signing", "payroll": "bank-keys"}
	for ns, name := range theirs {
		g.Expect(admin.Create(e.ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
			Data: map[string][]byte{"key": []byte("s3cret")}})).To(Succeed())
	}

	// The identity's token, as kubectl fleetdb join hands it to the hub: an
	// expiring one (TokenRequest), bound to a Secret so that the test can
	// invalidate it after a rotation (docs/security.md, "The member token and
	// its rotation").
	cs, err := kubernetes.NewForConfig(m.Config)
	g.Expect(err).NotTo(HaveOccurred())
	issue := func(anchor string) string {
		t.Helper()
		s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "fleetdb-system", Name: anchor}}
		g.Expect(admin.Create(e.ctx, s)).To(Succeed())
		tok, err := cs.CoreV1().ServiceAccounts("fleetdb-system").CreateToken(e.ctx, "fleetdb-hub-agent", &authenticationv1.TokenRequest{
			Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](3 * 3600),
				BoundObjectRef: &authenticationv1.BoundObjectReference{Kind: "Secret", APIVersion: "v1", Name: anchor, UID: s.UID}},
		}, metav1.CreateOptions{})
		g.Expect(err).NotTo(HaveOccurred())
		return tok.Status.Token
	}
	token := issue("hub-token-1")
	kubeconfigWith := func(token string) []byte {
		t.Helper()
		kc, err := clientcmd.Load(m.Kubeconfig)
		g.Expect(err).NotTo(HaveOccurred())
		for name := range kc.AuthInfos {
			kc.AuthInfos[name] = &clientcmdapi.AuthInfo{Token: token}
		}
		raw, err := clientcmd.Write(*kc)
		g.Expect(err).NotTo(HaveOccurred())
		raw, err = fleet.KubeconfigVia(raw, e.proxies["m1"].Addr())
		g.Expect(err).NotTo(HaveOccurred())
		return raw
	}
	agentCfg := rest.AnonymousClientConfig(m.Config)
	agentCfg.BearerToken = token
	agent, err := client.New(agentCfg, client.Options{Scheme: fleet.Scheme})
	g.Expect(err).NotTo(HaveOccurred())
	// The API server loads the admission policies in the background.
	g.Eventually(func() bool {
		return apierrors.IsForbidden(agent.Create(e.ctx, configMap("payroll", "probe")))
	}).WithTimeout(eventually).WithPolling(poll).Should(BeTrue(), "the admission policy never took effect")

	e.register("m1", kubeconfigWith(token), map[string]string{"name": "m1"})
	e.waitMemberReady("m1")

	ns := e.namespace("ledger")
	g.Expect(e.hub.Create(e.ctx, newDB(ns, "orders", "m1"))).To(Succeed())
	g.Eventually(func(g Gomega) {
		db := e.getDB(ns, "orders")
		g.Expect(db.Status.Phase).To(Equal(fleetv1alpha1.PhaseReady), "%+v", db.Status.Clusters)
	}).WithTimeout(eventually).WithPolling(poll).Should(Succeed())
	credKey := client.ObjectKey{Namespace: ns, Name: "orders-credentials"}
	var hubCreds, memberCreds corev1.Secret
	g.Expect(e.hub.Get(e.ctx, credKey, &hubCreds)).To(Succeed())
	g.Expect(admin.Get(e.ctx, credKey, &memberCreds)).To(Succeed(), "the credentials Secret reached the member")
	g.Expect(memberCreds.Data["password"]).To(Equal(hubCreds.Data["password"]))

	var rb rbacv1.RoleBinding
	g.Expect(admin.Get(e.ctx, client.ObjectKey{Namespace: ns, Name: member.SecretAccessRole}, &rb)).To(Succeed(),
		"the hub bound its Secret role in the namespace it created")
	g.Expect(rb.RoleRef.Name).To(Equal(member.SecretAccessRole))
	g.Expect(rb.Subjects).To(ConsistOf(rbacv1.Subject{Kind: "ServiceAccount", Name: "fleetdb-hub-agent", Namespace: "fleetdb-system"}))

	t.Run("the identity reads Secrets only where fleetdb manages", func(t *testing.T) {
		g := NewWithT(t)
		g.Expect(agent.Get(e.ctx, credKey, &corev1.Secret{})).To(Succeed(), "a Secret in a managed namespace")
		for ns, name := range theirs {
			err := agent.Get(e.ctx, client.ObjectKey{Namespace: ns, Name: name}, &corev1.Secret{})
			g.Expect(apierrors.IsForbidden(err)).To(BeTrue(), "reading Secret %s/%s: want Forbidden, got %v", ns, name, err)
			err = agent.List(e.ctx, &corev1.SecretList{}, client.InNamespace(ns))
			g.Expect(apierrors.IsForbidden(err)).To(BeTrue(), "listing Secrets in %s: want Forbidden, got %v", ns, err)
		}
		err := agent.List(e.ctx, &corev1.SecretList{})
		g.Expect(apierrors.IsForbidden(err)).To(BeTrue(), "listing Secrets cluster-wide: want Forbidden, got %v", err)
	})

	t.Run("the identity binds its Secret role only to itself, only where fleetdb manages", func(t *testing.T) {
		g := NewWithT(t)
		binding := func(ns, role string, subject rbacv1.Subject) *rbacv1.RoleBinding {
			return &rbacv1.RoleBinding{
				ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: member.SecretAccessRole},
				RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role},
				Subjects:   []rbacv1.Subject{subject},
			}
		}
		self := rbacv1.Subject{Kind: "ServiceAccount", Name: "fleetdb-hub-agent", Namespace: "fleetdb-system"}
		for _, ns := range []string{"kube-system", "payroll"} {
			err := agent.Create(e.ctx, binding(ns, member.SecretAccessRole, self))
			g.Expect(apierrors.IsForbidden(err)).To(BeTrue(), "binding the Secret role in %s: want Forbidden, got %v", ns, err)
		}
		g.Expect(admin.Create(e.ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "adopted",
			Labels: map[string]string{fleetv1alpha1.LabelManagedNamespace: fleetv1alpha1.ManagedByValue}}})).To(Succeed())
		other := rbacv1.Subject{Kind: "ServiceAccount", Name: "default", Namespace: "adopted"}
		err := agent.Create(e.ctx, binding("adopted", member.SecretAccessRole, other))
		g.Expect(apierrors.IsForbidden(err)).To(BeTrue(), "binding the Secret role to another subject: want Forbidden, got %v", err)
		err = agent.Create(e.ctx, binding("adopted", "admin", self))
		g.Expect(apierrors.IsForbidden(err)).To(BeTrue(), "binding another role: want Forbidden, got %v", err)
		g.Expect(agent.Create(e.ctx, binding("adopted", member.SecretAccessRole, self))).To(Succeed(),
			"binding the Secret role to itself in a managed namespace")
	})

	t.Run("the hub sends no Secret request outside the managed namespace", func(t *testing.T) {
		g := NewWithT(t)
		e.reads.mu.Lock()
		var paths []string
		for k := range e.reads.counts {
			if target, path, _ := strings.Cut(k, " "); target == "m1" && strings.Contains(path, "/secrets") {
				paths = append(paths, path)
			}
		}
		e.reads.mu.Unlock()
		g.Expect(paths).NotTo(BeEmpty(), "the read log names the member's Secret reads")
		for _, p := range paths {
			g.Expect(p).To(HavePrefix("/api/v1/namespaces/"+ns+"/secrets"), "a Secret read outside %s", ns)
		}
		g.Expect(slices.Contains(paths, "/api/v1/secrets")).To(BeFalse(), "a cluster-wide Secret list or watch")
	})

	t.Run("a Secret deleted by hand is put back, the teardown removes only fleetdb's", func(t *testing.T) {
		g := NewWithT(t)
		g.Expect(admin.Delete(e.ctx, &memberCreds)).To(Succeed())
		g.Eventually(func(g Gomega) {
			var now corev1.Secret
			g.Expect(admin.Get(e.ctx, credKey, &now)).To(Succeed())
			g.Expect(now.UID).NotTo(Equal(memberCreds.UID))
			g.Expect(now.Data["password"]).To(Equal(hubCreds.Data["password"]))
		}).WithTimeout(eventually).WithPolling(poll).Should(Succeed(), "the member's Secret watch saw the deletion")

		g.Expect(e.hub.Delete(e.ctx, e.getDB(ns, "orders"))).To(Succeed())
		g.Eventually(func() bool {
			return apierrors.IsNotFound(admin.Get(e.ctx, credKey, &corev1.Secret{}))
		}).WithTimeout(eventually).WithPolling(poll).Should(BeTrue(), "the teardown removed the credentials Secret")
		for ns, name := range theirs {
			g.Expect(admin.Get(e.ctx, client.ObjectKey{Namespace: ns, Name: name}, &corev1.Secret{})).To(Succeed())
		}
	})

	t.Run("a rotated token is taken up without losing the member", func(t *testing.T) {
		g := NewWithT(t)
		// The platform team's rotation: a new token written into the
		// kubeconfig Secret while the old one is still valid ...
		var kcSecret corev1.Secret
		g.Expect(e.hub.Get(e.ctx, client.ObjectKey{Namespace: hubNS, Name: "m1-kubeconfig"}, &kcSecret)).To(Succeed())
		kcSecret.Data["kubeconfig"] = kubeconfigWith(issue("hub-token-2"))
		g.Expect(e.hub.Update(e.ctx, &kcSecret)).To(Succeed())
		e.waitMemberReady("m1")
		// ... then the old one is revoked (its bound Secret deleted): the hub
		// works on with the new one.
		g.Expect(admin.Delete(e.ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "fleetdb-system", Name: "hub-token-1"}})).To(Succeed())
		g.Eventually(func() bool {
			return apierrors.IsUnauthorized(agent.Get(e.ctx, client.ObjectKey{Namespace: ns, Name: "probe"}, &corev1.Secret{}))
		}).WithTimeout(eventually).WithPolling(poll).Should(BeTrue(), "the old token still works")
		g.Expect(e.hub.Create(e.ctx, newDB(ns, "invoices", "m1"))).To(Succeed())
		g.Eventually(func(g Gomega) {
			g.Expect(e.getDB(ns, "invoices").Status.Phase).To(Equal(fleetv1alpha1.PhaseReady))
			g.Expect(admin.Get(e.ctx, client.ObjectKey{Namespace: ns, Name: "invoices-credentials"}, &corev1.Secret{})).To(Succeed())
		}).WithTimeout(eventually).WithPolling(poll).Should(Succeed(), "a Database synced with the rotated token")
	})
}
