package integration

import (
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleetv1alpha1 "github.com/fleetdb/fleetdb/apis/v1alpha1"
	"github.com/fleetdb/fleetdb/test/fleet"
)

// TestForbiddenHeals (issue 42, item 7): a member refuses the hub where its
// admission policy says so (here a namespace made by hand beforehand, without
// fleetdb's label), and the refusal heals once its cause is fixed, with no
// change to the Database or the MemberCluster:
//
//   - the Database shows Forbidden with what to fix (the label's command);
//   - while refused, the hub retries with a capped backoff, not a hot loop
//     (its attempts over a window are counted);
//   - once the namespace is labelled, the Database becomes Ready within the
//     backoff.
func TestForbiddenHeals(t *testing.T) {
	e := startEnvWith(t, envOptions{unregistered: []string{"m1"}}, "m1")
	e.sim.enable("m1", true)
	g := NewWithT(t)
	m := e.fleet.Member("m1")
	admin := m.Client
	installMemberBase(t, e.ctx, admin)
	joinAsHubAgent(t, e, "m1")

	ns := e.namespace("prepared")
	g.Expect(admin.Create(e.ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})).To(Succeed(),
		"the namespace made by hand in the member, unlabelled")
	g.Expect(e.hub.Create(e.ctx, newDB(ns, "orders", "m1"))).To(Succeed())

	label := "kubectl label namespace " + ns + " " + fleetv1alpha1.LabelManagedNamespace + "=" + fleetv1alpha1.ManagedByValue
	g.Eventually(func(g Gomega) {
		db := e.getDB(ns, "orders")
		entry := clusterEntry(db, "m1")
		g.Expect(entry.Reason).To(Equal(fleetv1alpha1.ReasonForbidden), "%+v", db.Status.Clusters)
		g.Expect(entry.Message).To(ContainSubstring(label))
		ready := condition(db.Status.Conditions, fleetv1alpha1.ConditionReady)
		g.Expect(ready.Status).NotTo(Equal(metav1.ConditionTrue))
	}).WithTimeout(eventually).WithPolling(poll).Should(Succeed())
	before := e.getDB(ns, "orders")
	t.Logf("refused: Ready %s/%s %q; m1: %q", condition(before.Status.Conditions, fleetv1alpha1.ConditionReady).Status,
		condition(before.Status.Conditions, fleetv1alpha1.ConditionReady).Reason, condition(before.Status.Conditions, fleetv1alpha1.ConditionReady).Message,
		clusterEntry(before, "m1").Message)
	var mc fleetv1alpha1.MemberCluster
	g.Expect(e.hub.Get(e.ctx, client.ObjectKey{Name: "m1"}, &mc)).To(Succeed())

	// Not a hot loop: each attempt reads the Secret probe of the namespace
	// once (member.SecretAccess.Ensure); with the backoff starting at 30s,
	// a 45s window holds two attempts at most.
	probe := "GET /api/v1/namespaces/" + ns + "/secrets/fleetdb.access-probe"
	start, all := e.reads.sent("m1", probe), e.reads.sent("m1", "/namespaces/"+ns)
	time.Sleep(45 * time.Second)
	attempts, requests := e.reads.sent("m1", probe)-start, e.reads.sent("m1", "/namespaces/"+ns)-all
	t.Logf("while refused for 45s: %d attempts, %d requests in the namespace", attempts, requests)
	g.Expect(attempts).To(BeNumerically("<=", 2), "attempts while refused")
	g.Expect(requests).To(BeNumerically("<=", 10), "requests in the namespace while refused")

	// The member's admin labels the namespace: the Database heals by itself.
	var nsObj corev1.Namespace
	g.Expect(admin.Get(e.ctx, client.ObjectKey{Name: ns}, &nsObj)).To(Succeed())
	g.Expect(admin.Patch(e.ctx, &nsObj, client.RawPatch(types.MergePatchType,
		[]byte(`{"metadata":{"labels":{"`+fleetv1alpha1.LabelManagedNamespace+`":"`+fleetv1alpha1.ManagedByValue+`"}}}`)))).To(Succeed())
	labelled := time.Now()
	g.Eventually(func(g Gomega) {
		db := e.getDB(ns, "orders")
		g.Expect(db.Status.Phase).To(Equal(fleetv1alpha1.PhaseReady), "%+v", db.Status.Clusters)
	}).WithTimeout(150*time.Second).WithPolling(time.Second).Should(Succeed(), "the Database heals within the backoff")
	t.Logf("Ready %s after the label", time.Since(labelled).Round(time.Second))

	after := e.getDB(ns, "orders")
	g.Expect(after.Generation).To(Equal(before.Generation), "the Database was not changed")
	g.Expect(after.Annotations).To(Equal(before.Annotations))
	var mcAfter fleetv1alpha1.MemberCluster
	g.Expect(e.hub.Get(e.ctx, client.ObjectKey{Name: "m1"}, &mcAfter)).To(Succeed())
	g.Expect(mcAfter.Generation).To(Equal(mc.Generation), "the MemberCluster was not changed")
	g.Expect(mcAfter.Labels).To(Equal(mc.Labels))
	g.Expect(admin.Get(e.ctx, client.ObjectKey{Namespace: ns, Name: "orders-credentials"}, &corev1.Secret{})).To(Succeed())
}

// sent counts the requests ("METHOD path") sent to member target that
// contain what, since the log started.
func (l *readLog) sent(target, what string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, r := range l.seq[target] {
		if strings.Contains(r, what) {
			n++
		}
	}
	return n
}

// joinAsHubAgent registers member name on the hub as kubectl fleetdb join
// does: with a token of deploy/member's fleetdb-hub-agent ServiceAccount
// (deploy/member installed beforehand), once the member's admission policy
// acts.
func joinAsHubAgent(t *testing.T, e *env, name string) {
	t.Helper()
	g := NewWithT(t)
	m := e.fleet.Member(name)
	cs, err := kubernetes.NewForConfig(m.Config)
	g.Expect(err).NotTo(HaveOccurred())
	tok, err := cs.CoreV1().ServiceAccounts("fleetdb-system").CreateToken(e.ctx, "fleetdb-hub-agent", &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](3 * 3600)},
	}, metav1.CreateOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	agentCfg := rest.AnonymousClientConfig(m.Config)
	agentCfg.BearerToken = tok.Status.Token
	agent, err := client.New(agentCfg, client.Options{Scheme: fleet.Scheme})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(m.Client.Create(e.ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "policy-probe"}})).To(Succeed())
	g.Eventually(func() bool {
		return apierrors.IsForbidden(agent.Create(e.ctx, configMap("policy-probe", "probe")))
	}).WithTimeout(eventually).WithPolling(poll).Should(BeTrue(), "the admission policy never took effect")

	kc, err := clientcmd.Load(m.Kubeconfig)
	g.Expect(err).NotTo(HaveOccurred())
	for n := range kc.AuthInfos {
		kc.AuthInfos[n] = &clientcmdapi.AuthInfo{Token: tok.Status.Token}
	}
	raw, err := clientcmd.Write(*kc)
	g.Expect(err).NotTo(HaveOccurred())
	raw, err = fleet.KubeconfigVia(raw, e.proxies[name].Addr())
	g.Expect(err).NotTo(HaveOccurred())
	e.register(name, raw, map[string]string{"name": name})
	e.waitMemberReady(name)
}
