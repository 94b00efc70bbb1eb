package clusters

import (
	"io"
	"net/http"
	"strings"
	"testing"

	. "github.com/onsi/gomega"

	fleetv1alpha1 "github.com/fleetdb/fleetdb/apis/v1alpha1"
)

// The API server refuses a new kubeconfigSecretRef.namespace (test/crd); the
// provider refuses one other than its own on objects that predate the rule.
func TestSecretKeyStaysInTheHubNamespace(t *testing.T) {
	g := NewWithT(t)
	p := New(Options{SecretNamespace: "hub-ns"})
	ns, problem := p.secretKey(fleetv1alpha1.SecretKeyRef{Name: "k"})
	g.Expect(problem).To(BeNil())
	g.Expect(ns).To(Equal("hub-ns"))
	ns, problem = p.secretKey(fleetv1alpha1.SecretKeyRef{Namespace: "hub-ns", Name: "k"})
	g.Expect(problem).To(BeNil())
	g.Expect(ns).To(Equal("hub-ns"))
	_, problem = p.secretKey(fleetv1alpha1.SecretKeyRef{Namespace: "team-a", Name: "k"})
	g.Expect(problem).NotTo(BeNil())
	g.Expect(problem.reason).To(Equal(fleetv1alpha1.ReasonSecretNamespaceNotAllowed))
}

func TestBoundedBodies(t *testing.T) {
	g := NewWithT(t)
	respond := func(code int, body string) http.RoundTripper {
		return roundTrip(func(*http.Request) (*http.Response, error) {
			return &http.Response{StatusCode: code, Body: io.NopCloser(strings.NewReader(body))}, nil
		})
	}
	read := func(rt http.RoundTripper) (string, error) {
		resp, err := rt.RoundTrip(&http.Request{})
		g.Expect(err).NotTo(HaveOccurred())
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		return string(b), err
	}
	big := strings.Repeat("x", maxErrorBody+1)
	_, err := read(limitErrorBodies(respond(http.StatusInternalServerError, big)))
	g.Expect(err).To(MatchError(errBodyTooLarge))
	body, err := read(limitErrorBodies(respond(http.StatusOK, big)))
	g.Expect(err).NotTo(HaveOccurred(), "success answers of member clients are not cut (lists can be large)")
	g.Expect(body).To(HaveLen(len(big)))
	_, err = read(limitAllBodies(respond(http.StatusOK, strings.Repeat("x", maxProbeBody+1))))
	g.Expect(err).To(MatchError(errBodyTooLarge))
	body, err = read(limitAllBodies(respond(http.StatusOK, strings.Repeat("x", maxProbeBody))))
	g.Expect(err).NotTo(HaveOccurred(), "an answer of exactly the bound is whole")
	g.Expect(body).To(HaveLen(maxProbeBody))
}

type roundTrip func(*http.Request) (*http.Response, error)

func (f roundTrip) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }
