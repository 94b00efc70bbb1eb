package integration

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"testing"

	. "github.com/onsi/gomega"
	authenticationv1 "k8s.io/api/authentication/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	"sigs.k8s.io/yaml"

	"github.com/fleetdb/fleetdb/test/fleet"
)

// hubServiceAccount is the hub's ServiceAccount in deploy/rbac.
const hubServiceAccount = "fleetdb-hub"

// hubSecretRole is deploy/rbac's ClusterRole of the hub's Secret rights in a
// tenant namespace, and the name of the RoleBinding by which the hub binds it
// there (hubsecret.Role).
const hubSecretRole = "fleetdb-hub-secrets"

// hubIdentity gives a hub the identity it has when deployed: it installs
// deploy/rbac (kustomize build: the ServiceAccount, the generated
// ClusterRole and the leader-election Role, with their bindings) on the hub
// control plane through the admin client, and returns a rest config that
// authenticates with a token of that ServiceAccount (TokenRequest), not as
// admin. The tests' own calls keep the admin config.
//
// A missing permission fails the test: every 403 the hub gets from its API
// server is logged when it happens and fails the test in its cleanup.
func hubIdentity(t *testing.T, ctx context.Context, admin *rest.Config, adminClient client.Client) *rest.Config {
	t.Helper()
	g := NewWithT(t)
	for _, obj := range buildKustomization(t, filepath.Join(fleet.RepoRoot(), "deploy", "rbac")) {
		g.Expect(obj.GetNamespace()).To(BeElementOf("", hubNS), "deploy/rbac's namespace is the tests' hub namespace")
		if err := adminClient.Create(ctx, obj); !apierrors.IsAlreadyExists(err) { // a restarted hub
			g.Expect(err).NotTo(HaveOccurred(), "%s %s", obj.GetKind(), obj.GetName())
		}
	}
	cs, err := kubernetes.NewForConfig(admin)
	g.Expect(err).NotTo(HaveOccurred())
	tok, err := cs.CoreV1().ServiceAccounts(hubNS).CreateToken(ctx, hubServiceAccount, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](3 * 3600)},
	}, metav1.CreateOptions{})
	g.Expect(err).NotTo(HaveOccurred(), "a token of the hub's ServiceAccount")

	cfg := rest.AnonymousClientConfig(admin)
	cfg.BearerToken = tok.Status.Token
	cfg.QPS, cfg.Burst = admin.QPS, admin.Burst
	rec := &forbiddenRecorder{name: t.Name()}
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper { rec.next = rt; return rec })
	t.Cleanup(func() {
		if denied := rec.denied(); len(denied) > 0 {
			t.Errorf("the hub's ServiceAccount lacks permissions (deploy/rbac, +kubebuilder:rbac markers): %d forbidden hub API calls: %v", len(denied), denied)
		}
	})
	return cfg
}

// buildKustomization renders a kustomize folder as kubectl apply -k would.
func buildKustomization(t *testing.T, dir string) []*unstructured.Unstructured {
	t.Helper()
	g := NewWithT(t)
	m, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(filesys.MakeFsOnDisk(), dir)
	g.Expect(err).NotTo(HaveOccurred(), "kustomize build %s", dir)
	var out []*unstructured.Unstructured
	for _, r := range m.Resources() {
		y, err := r.AsYAML()
		g.Expect(err).NotTo(HaveOccurred())
		obj := map[string]any{}
		g.Expect(yaml.Unmarshal(y, &obj)).To(Succeed())
		out = append(out, &unstructured.Unstructured{Object: obj})
	}
	return out
}

// forbiddenRecorder is the hub's transport's last layer: it notes every 403
// (the call, and the API server's message in the log).
type forbiddenRecorder struct {
	name string
	next http.RoundTripper

	mu    sync.Mutex
	calls []string
}

func (f *forbiddenRecorder) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := f.next.RoundTrip(req)
	if err == nil && resp.StatusCode == http.StatusForbidden {
		call := fmt.Sprintf("%s %s", req.Method, req.URL.Path)
		// Loud, and safe from the hub's goroutines at any time (t.Logf is not).
		_, _ = fmt.Fprintf(os.Stderr, "FORBIDDEN (%s): the hub's ServiceAccount may not %s\n", f.name, call)
		f.mu.Lock()
		if len(f.calls) < 50 {
			f.calls = append(f.calls, call)
		}
		f.mu.Unlock()
	}
	return resp, err
}

func (f *forbiddenRecorder) denied() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.calls...)
}
