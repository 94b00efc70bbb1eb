package main

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/cli-runtime/pkg/genericclioptions"

	fleetv1alpha1 "github.com/fleetdb/fleetdb/apis/v1alpha1"
)

// TestHubCallsHaveADeadline: a hub API server that accepts connections and
// never answers does not hang a command: the client's discovery (which
// controller-runtime runs without the call's context) is bounded by
// the call timeout (--request-timeout, 30 s when 0) like every call.
func TestHubCallsHaveADeadline(t *testing.T) {
	g := NewWithT(t)
	stop := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) {
		select {
		case <-stop:
		case <-r.Context().Done():
		}
	}))
	defer srv.Close()
	defer close(stop)

	flags := genericclioptions.NewConfigFlags(false)
	defer func(d time.Duration) { defaultCallTimeout = d }(defaultCallTimeout)
	defaultCallTimeout = time.Second
	server, timeout := srv.URL, "0"
	flags.APIServer, flags.Timeout = &server, &timeout
	o := &options{flags: flags}
	c, err := o.hubClient()
	g.Expect(err).NotTo(HaveOccurred())

	done := make(chan error, 1)
	go func() {
		var mc fleetv1alpha1.MemberCluster
		done <- o.call(context.Background(), func(ctx context.Context) error {
			return c.Get(ctx, types.NamespacedName{Name: "eu-1"}, &mc)
		})
	}()
	select {
	case err := <-done:
		g.Expect(err).To(HaveOccurred())
	case <-time.After(20 * time.Second):
		t.Fatal("a call to a hub that never answers did not end")
	}
}
