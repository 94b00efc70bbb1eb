package integration

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"testing"

	. "github.com/onsi/gomega"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	certutil "k8s.io/client-go/util/cert"
	"k8s.io/utils/ptr"

	"github.com/fleetdb/fleetdb/hub"
)

// TestMetricsSecure (issue 25, item 12) runs the hub as deploy/rbac's
// identity with its metrics endpoint secured (--metrics-secure, the
// deployment's setting) and a serving certificate from --metrics-cert-dir:
// a scrape without a token is refused (401), so is one by an identity that
// may not get /metrics (403), and one by an identity bound to deploy/rbac's
// ClusterRole fleetdb-hub-metrics-reader gets the metrics. The hub's own
// TokenReviews and SubjectAccessReviews go through its identity, so a
// permission the markers lack fails the test (hubIdentity).
func TestMetricsSecure(t *testing.T) {
	cp, ctx := startHubControlPlane(t, "monitoring")
	g := NewWithT(t)
	admin := cp.Client
	hubCfg := hubIdentity(t, ctx, cp.Config, admin)

	// A serving certificate of our own, so the scrapes verify it.
	certDir := t.TempDir()
	crt, key, err := certutil.GenerateSelfSignedCertKey("localhost", []net.IP{{127, 0, 0, 1}}, nil)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(os.WriteFile(filepath.Join(certDir, "tls.crt"), crt, 0o600)).To(Succeed())
	g.Expect(os.WriteFile(filepath.Join(certDir, "tls.key"), key, 0o600)).To(Succeed())
	roots := x509.NewCertPool()
	g.Expect(roots.AppendCertsFromPEM(crt)).To(BeTrue())

	addr := freeAddr(t)
	mgr, _, err := hub.NewManager(ctx, hub.Config{
		Hub:                          hubCfg,
		Options:                      hub.Options{HubNamespace: hubNS, MemberCallTimeout: memberCallTimeout},
		MetricsAddr:                  addr,
		MetricsSecure:                true,
		MetricsCertDir:               certDir,
		Logger:                       hubLogger(nil),
		SkipControllerNameValidation: true,
	})
	g.Expect(err).NotTo(HaveOccurred())
	mctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := mgr.Start(mctx); err != nil {
			t.Errorf("hub manager: %v", err)
		}
	}()
	t.Cleanup(func() { cancel(); <-done })

	// Two scrapers: one bound to the metrics reader role, one not.
	cs, err := kubernetes.NewForConfig(cp.Config)
	g.Expect(err).NotTo(HaveOccurred())
	token := func(sa string) string {
		_, err := cs.CoreV1().ServiceAccounts("monitoring").Create(ctx,
			&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: sa}}, metav1.CreateOptions{})
		g.Expect(err).NotTo(HaveOccurred())
		tok, err := cs.CoreV1().ServiceAccounts("monitoring").CreateToken(ctx, sa, &authenticationv1.TokenRequest{
			Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](3600)},
		}, metav1.CreateOptions{})
		g.Expect(err).NotTo(HaveOccurred())
		return tok.Status.Token
	}
	prometheus, nosy := token("prometheus"), token("nosy")
	g.Expect(admin.Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "prometheus-fleetdb-hub-metrics"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "fleetdb-hub-metrics-reader"},
		Subjects:   []rbacv1.Subject{{Kind: "ServiceAccount", Namespace: "monitoring", Name: "prometheus"}},
	})).To(Succeed())

	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12}}}
	scrape := func(g Gomega, scheme, bearer string) (int, string) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, scheme+"://"+addr+"/metrics", nil)
		g.Expect(err).NotTo(HaveOccurred())
		if bearer != "" {
			req.Header.Set("Authorization", "Bearer "+bearer)
		}
		resp, err := client.Do(req)
		g.Expect(err).NotTo(HaveOccurred())
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		g.Expect(err).NotTo(HaveOccurred())
		return resp.StatusCode, string(body)
	}
	g.Eventually(func(g Gomega) {
		code, body := scrape(g, "https", prometheus)
		g.Expect(code).To(Equal(http.StatusOK), body)
		g.Expect(body).To(ContainSubstring("controller_runtime_"), "the metrics themselves")
	}).WithTimeout(eventually).WithPolling(poll).Should(Succeed(), "an authorized scrape gets the metrics")

	code, body := scrape(g, "https", "")
	g.Expect(code).To(Equal(http.StatusUnauthorized), "a scrape without a token: %s", body)
	g.Expect(body).NotTo(ContainSubstring("controller_runtime_"))
	// controller-runtime answers a token the API server's TokenReview
	// reports an error for with 500 (pkg/metrics/filters/filters.go): refused.
	code, body = scrape(g, "https", "not-a-token")
	g.Expect(code).To(BeElementOf(http.StatusUnauthorized, http.StatusInternalServerError), "a scrape with a token the API server does not know: %s", body)
	g.Expect(body).NotTo(ContainSubstring("controller_runtime_"))
	code, body = scrape(g, "https", nosy)
	g.Expect(code).To(Equal(http.StatusForbidden), "a scrape by an identity that may not get /metrics: %s", body)
	g.Expect(body).NotTo(ContainSubstring("controller_runtime_"))
	// Plain HTTP is not served (Go's TLS server answers 400 or resets).
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/metrics", nil)
	g.Expect(err).NotTo(HaveOccurred())
	req.Header.Set("Authorization", "Bearer "+prometheus)
	if resp, err := client.Do(req); err == nil {
		plain, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		g.Expect(resp.StatusCode).NotTo(Equal(http.StatusOK), "plain HTTP is not served: %s", plain)
		g.Expect(string(plain)).NotTo(ContainSubstring("controller_runtime_"))
	}
}
