package clusters_test

import (
	"encoding/json"
	"encoding/pem"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	fleetv1alpha1 "github.com/fleetdb/fleetdb/apis/v1alpha1"
	"github.com/fleetdb/fleetdb/test/fleet"
)

// TestUntrustedKubeconfigs proves, on a real hub and member, that the
// provider refuses kubeconfigs that weaken the connection unless the
// MemberCluster opts in, that what a member answers is read only up to a
// bound, and that the tenant-facing Health message carries no address.
func TestUntrustedKubeconfigs(t *testing.T) {
	if testing.Short() {
		t.Skip("starts control planes")
	}
	f := fleet.Start(t, fleet.Options{Members: []string{"m1"}})
	h := startHarness(t, f)
	m1 := f.Member("m1")

	refused := []struct {
		name   string
		mutate func(*clientcmdapi.Cluster)
		optIn  func(*fleetv1alpha1.ConnectionPolicy)
		want   string
	}{
		{"insecure", func(c *clientcmdapi.Cluster) { c.InsecureSkipTLSVerify, c.CertificateAuthorityData = true, nil },
			func(p *fleetv1alpha1.ConnectionPolicy) { p.AllowInsecureSkipTLSVerify = true }, "insecure-skip-tls-verify"},
		{"proxied", func(c *clientcmdapi.Cluster) { c.ProxyURL = "http://" + closedAddress(t) },
			func(p *fleetv1alpha1.ConnectionPolicy) { p.AllowProxyURL = true }, "proxy-url"},
		{"plain", func(c *clientcmdapi.Cluster) { c.Server = strings.Replace(c.Server, "https://", "http://", 1) },
			func(p *fleetv1alpha1.ConnectionPolicy) { p.AllowHTTP = true }, "not https"},
	}
	for _, tc := range refused {
		t.Run("refuses a "+tc.name+" kubeconfig without the opt-in", func(t *testing.T) {
			g := NewWithT(t)
			h.register(t, tc.name, rewrite(t, m1.Kubeconfig, func(c *clientcmdapi.Config) {
				for _, cl := range c.Clusters {
					tc.mutate(cl)
				}
			}))
			mc := h.eventuallyConditions(t, tc.name, cond(fleetv1alpha1.MemberConditionJoined, metav1.ConditionFalse, fleetv1alpha1.ReasonInsecureKubeconfig))
			g.Expect(meta.FindStatusCondition(mc.Status.Conditions, fleetv1alpha1.MemberConditionJoined).Message).To(ContainSubstring(tc.want))
			g.Expect(h.provider.Health(tc.name).Engaged).To(BeFalse())

			// The opt-in is acted on like a new kubeconfig: the refusal goes.
			tc.optIn(&mc.Spec.Connection)
			g.Expect(h.hub.Update(h.ctx, mc)).To(Succeed())
			g.Eventually(func(g Gomega) {
				g.Expect(h.hub.Get(h.ctx, types.NamespacedName{Name: tc.name}, mc)).To(Succeed())
				c := meta.FindStatusCondition(mc.Status.Conditions, fleetv1alpha1.MemberConditionJoined)
				g.Expect(c).NotTo(BeNil())
				g.Expect(c.Reason).NotTo(Equal(fleetv1alpha1.ReasonInsecureKubeconfig))
			}).WithTimeout(timeout).WithPolling(poll).Should(Succeed())
		})
	}

	t.Run("an insecure kubeconfig that opted in joins", func(t *testing.T) {
		h.eventuallyConditions(t, "insecure", cond(fleetv1alpha1.MemberConditionJoined, metav1.ConditionTrue, fleetv1alpha1.ReasonJoined))
	})

	t.Run("a member's oversized answers are cut short and no address reaches Health", func(t *testing.T) {
		g := NewWithT(t)
		huge := strings.Repeat("x", 1<<20)
		srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			switch r.URL.Path {
			case "/readyz":
				_, _ = w.Write([]byte("ok"))
			case "/version":
				_ = json.NewEncoder(w).Encode(map[string]string{"gitVersion": huge})
			default:
				w.WriteHeader(http.StatusInternalServerError)
				_, _ = w.Write([]byte(huge))
			}
		}))
		t.Cleanup(srv.Close)
		kc := rewrite(t, m1.Kubeconfig, func(c *clientcmdapi.Config) {
			for _, cl := range c.Clusters {
				cl.Server = srv.URL
				cl.CertificateAuthorityData = pemOf(srv)
			}
		})
		h.register(t, "chatty", kc)
		mc := &fleetv1alpha1.MemberCluster{}
		g.Eventually(func(g Gomega) {
			g.Expect(h.hub.Get(h.ctx, types.NamespacedName{Name: "chatty"}, mc)).To(Succeed())
			joined := meta.FindStatusCondition(mc.Status.Conditions, fleetv1alpha1.MemberConditionJoined)
			g.Expect(joined).NotTo(BeNil())
			g.Expect(joined.Status).To(Equal(metav1.ConditionFalse))
			g.Expect(joined.Message).To(ContainSubstring("larger than the hub reads"))
		}).WithTimeout(timeout).WithPolling(poll).Should(Succeed())
		g.Expect(mc.Status.KubernetesVersion).To(BeEmpty(), "a megabyte of version is not taken")

		health := h.provider.Health("chatty")
		g.Expect(health.Ready).To(BeFalse())
		host := strings.TrimPrefix(srv.URL, "https://")
		g.Expect(health.Message).NotTo(BeEmpty())
		g.Expect(health.Message).NotTo(Or(ContainSubstring(host), ContainSubstring("127.0.0.1"), ContainSubstring("xxx")),
			"the tenant-facing message names no address and quotes no answer")
	})

	t.Run("an unreachable member's Health names no address", func(t *testing.T) {
		g := NewWithT(t)
		addr := closedAddress(t)
		h.register(t, "gone", withServer(t, m1.Kubeconfig, "https://"+addr))
		mc := h.eventuallyConditions(t, "gone", cond(fleetv1alpha1.MemberConditionJoined, metav1.ConditionFalse, fleetv1alpha1.ReasonUnreachable))
		g.Expect(meta.FindStatusCondition(mc.Status.Conditions, fleetv1alpha1.MemberConditionJoined).Message).To(ContainSubstring(addr),
			"the platform-visible MemberCluster keeps the details")
		g.Expect(h.provider.Health("gone").Message).NotTo(ContainSubstring(addr))
	})
}

// pemOf is the PEM of the test server's certificate, its own CA.
func pemOf(srv *httptest.Server) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})
}
