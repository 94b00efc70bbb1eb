package clusters

import (
	"context"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"
	"unicode/utf8"

	. "github.com/onsi/gomega"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/rest"

	fleetv1alpha1 "github.com/fleetdb/fleetdb/apis/v1alpha1"
)

func TestClassify(t *testing.T) {
	refused := &url.Error{Op: "Get", URL: "https://127.0.0.1:1/readyz", Err: &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}}
	tests := []struct {
		name   string
		err    error
		code   int
		reason string
	}{
		{"401", apierrors.NewUnauthorized("Unauthorized"), http.StatusUnauthorized, fleetv1alpha1.ReasonUnauthorized},
		{"403", apierrors.NewForbidden(schema.GroupResource{}, "", errors.New("no")), http.StatusForbidden, fleetv1alpha1.ReasonUnauthorized},
		{"unknown authority", &url.Error{Op: "Get", URL: "https://x", Err: x509.UnknownAuthorityError{}}, 0, fleetv1alpha1.ReasonTLSError},
		{"hostname mismatch", fmt.Errorf("wrapped: %w", x509.HostnameError{Certificate: &x509.Certificate{}, Host: "x"}), 0, fleetv1alpha1.ReasonTLSError},
		{"flattened tls text", errors.New("remote error: tls: bad certificate"), 0, fleetv1alpha1.ReasonTLSError},
		{"connection refused", refused, 0, fleetv1alpha1.ReasonUnreachable},
		{"dns", &net.DNSError{Err: "no such host", Name: "nope.invalid", IsNotFound: true}, 0, fleetv1alpha1.ReasonUnreachable},
		{"readyz 500", apierrors.NewInternalError(errors.New("[-]etcd failed")), http.StatusInternalServerError, fleetv1alpha1.ReasonNotReady},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			f := classify(tt.err, tt.code)
			g.Expect(f.reason).To(Equal(tt.reason))
			g.Expect(f.message).NotTo(BeEmpty())
		})
	}
}

func TestTruncate(t *testing.T) {
	g := NewWithT(t)
	g.Expect(truncate("short")).To(Equal("short"))
	long := strings.Repeat("x", 5000)
	g.Expect(truncate(long)).To(HaveLen(maxMessageLength))
}

func TestRestConfigRefusesUnsafeKubeconfigs(t *testing.T) {
	const header = `apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:6443"}}]
contexts: [{name: c, context: {cluster: c, user: u}}]
current-context: c
`
	tests := []struct {
		name, kubeconfig, wantErr string
	}{
		{"garbage", "secret-token-xyz not a kubeconfig", "cannot be parsed"},
		{"empty", "apiVersion: v1\nkind: Config\n", "not usable"},
		{"exec plugin", header + "users: [{name: u, user: {exec: {apiVersion: client.authentication.k8s.io/v1, command: /bin/sh}}}]\n", "exec"},
		{"token file", header + "users: [{name: u, user: {tokenFile: /var/run/secrets/kubernetes.io/serviceaccount/token}}]\n", "refers to files"},
	}
	p := New(Options{QPS: 7, Burst: 9})
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			_, err := p.restConfig("m", []byte(tt.kubeconfig))
			g.Expect(err).To(MatchError(ContainSubstring(tt.wantErr)))
			g.Expect(err.Error()).NotTo(ContainSubstring("secret-token-xyz"), "no part of the Secret in messages")
		})
	}

	t.Run("valid", func(t *testing.T) {
		g := NewWithT(t)
		cfg, err := p.restConfig("m", []byte(header+"users: [{name: u, user: {token: abc}}]\n"))
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(cfg.QPS).To(Equal(float32(7)))
		g.Expect(cfg.Burst).To(Equal(9))
		g.Expect(cfg.Timeout).To(BeZero(), "a client timeout would end every watch")
	})
}

// TestProbeCutsTheReportedVersion: a member is not trusted; what its
// /version reports is stored cut to status.kubernetesVersion's bound.
func TestProbeCutsTheReportedVersion(t *testing.T) {
	g := NewWithT(t)
	huge := "v1.36.0-" + strings.Repeat("é", 10000)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/readyz":
			_, _ = w.Write([]byte("ok"))
		case "/version":
			_ = json.NewEncoder(w).Encode(map[string]string{"gitVersion": huge})
		default:
			http.NotFound(w, r)
		}
	}))
	defer srv.Close()
	rc, err := newProber(&rest.Config{Host: srv.URL}, 5*time.Second)
	g.Expect(err).NotTo(HaveOccurred())
	res := probe(context.Background(), rc, 5*time.Second)
	g.Expect(res.err).To(BeNil())
	g.Expect(len(res.version)).To(BeNumerically("<=", fleetv1alpha1.MaxKubernetesVersionLength))
	g.Expect(res.version).To(HavePrefix("v1.36.0-"))
	g.Expect(utf8.ValidString(res.version)).To(BeTrue())
	g.Expect(memberVersion("v1.36.3")).To(Equal("v1.36.3"))
}
