// Package fleet starts real control planes for tests: one hub and N member
// kube-apiservers (each with its own etcd) in the test process, through
// controller-runtime's envtest, with fleetdb's CRDs installed on the hub.
//
// The binaries come from KUBEBUILDER_ASSETS, or, when that is unset, from the
// pinned toolchain that hack/toolchain.sh builds (and caches) on first use.
package fleet

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	fleetv1alpha1 "github.com/fleetdb/fleetdb/apis/v1alpha1"
	"github.com/fleetdb/fleetdb/test/repo"
)

// Scheme knows the built-in types and fleetdb's API.
var Scheme = newScheme()

func newScheme() *k8sruntime.Scheme {
	s := k8sruntime.NewScheme()
	if err := clientgoscheme.AddToScheme(s); err != nil {
		panic(err)
	}
	if err := fleetv1alpha1.AddToScheme(s); err != nil {
		panic(err)
	}
	return s
}

// ControlPlane is one running kube-apiserver with etcd.
type ControlPlane struct {
	// Name is "hub" or the member's name.
	Name string
	// Config is an admin REST config.
	Config *rest.Config
	// Client is an uncached admin client with Scheme.
	Client client.Client
	// Kubeconfig is an admin kubeconfig for Config.
	Kubeconfig []byte

	env *envtest.Environment
}

// AddUser adds a user authenticated by a client certificate, in groups, and
// returns an admin-less kubeconfig for it: what it may do is up to the RBAC
// the test grants (the API servers authorize with RBAC).
func (c *ControlPlane) AddUser(name string, groups ...string) ([]byte, error) {
	if c.env == nil {
		return nil, errors.New("control plane stopped")
	}
	user, err := c.env.ControlPlane.AddUser(envtest.User{Name: name, Groups: groups}, nil)
	if err != nil {
		return nil, fmt.Errorf("user %s for %s: %w", name, c.Name, err)
	}
	return user.KubeConfig()
}

// Stop stops the control plane; it is safe to call more than once.
func (c *ControlPlane) Stop() error {
	if c.env == nil {
		return nil
	}
	env := c.env
	c.env = nil
	return env.Stop()
}

// Fleet is a hub and its members.
type Fleet struct {
	Hub     *ControlPlane
	Members []*ControlPlane
}

// Member returns the member with the given name, or nil.
func (f *Fleet) Member(name string) *ControlPlane {
	for _, m := range f.Members {
		if m.Name == name {
			return m
		}
	}
	return nil
}

// Stop stops every control plane of the fleet.
func (f *Fleet) Stop() error {
	var errs []error
	for _, m := range append([]*ControlPlane{f.Hub}, f.Members...) {
		if m != nil {
			errs = append(errs, m.Stop())
		}
	}
	return errors.Join(errs...)
}

// Options tune Start.
type Options struct {
	// Members are the member names; default member-1..member-3.
	Members []string
	// AssetsDir holds kube-apiserver, etcd and kubectl; default from
	// KUBEBUILDER_ASSETS or the pinned toolchain.
	AssetsDir string
	// WithoutCNPG are members that do not get CloudNativePG's Cluster CRD
	// (every other member does, from the module pinned in test/tools/cnpg,
	// so the API server validates every Cluster fleetdb writes).
	WithoutCNPG []string
}

// Start starts a hub (with fleetdb's CRDs) and the members in parallel, and
// registers t.Cleanup to stop them all, also when the test fails.
func Start(t testing.TB, opts Options) *Fleet {
	t.Helper()
	if len(opts.Members) == 0 {
		opts.Members = []string{"member-1", "member-2", "member-3"}
	}
	assets := opts.AssetsDir
	if assets == "" {
		var err error
		if assets, err = AssetsDir(); err != nil {
			t.Fatalf("fleet: %v", err)
		}
	}
	f := &Fleet{Members: make([]*ControlPlane, len(opts.Members))}
	t.Cleanup(func() {
		if err := f.Stop(); err != nil {
			t.Logf("fleet: stopping control planes: %v", err)
		}
	})
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs []error
	)
	cnpgCRD, err := CNPGClusterCRD()
	if err != nil {
		t.Fatalf("fleet: %v", err)
	}
	start := func(name string, crds []string, put func(*ControlPlane)) {
		defer wg.Done()
		cp, err := StartControlPlaneWith(name, assets, crds)
		mu.Lock()
		defer mu.Unlock()
		if err != nil {
			errs = append(errs, err)
		}
		if cp != nil {
			put(cp)
		}
	}
	wg.Add(1 + len(opts.Members))
	go start("hub", []string{filepath.Join(RepoRoot(), "deploy", "crds")}, func(cp *ControlPlane) { f.Hub = cp })
	for i, name := range opts.Members {
		crds := []string{cnpgCRD}
		if slices.Contains(opts.WithoutCNPG, name) {
			crds = nil
		}
		go start(name, crds, func(cp *ControlPlane) { f.Members[i] = cp })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatalf("fleet: %v", err)
	}
	return f
}

// StartControlPlane starts one kube-apiserver with etcd; with crds it installs fleetdb's CRDs.
func StartControlPlane(name, assets string, crds bool) (*ControlPlane, error) {
	var paths []string
	if crds {
		paths = []string{filepath.Join(RepoRoot(), "deploy", "crds")}
	}
	return StartControlPlaneWith(name, assets, paths)
}

// StartControlPlaneWith starts one kube-apiserver with etcd and installs the
// CRDs of crdPaths (folders or files).
func StartControlPlaneWith(name, assets string, crdPaths []string) (*ControlPlane, error) {
	env := &envtest.Environment{
		BinaryAssetsDirectory: assets,
		Scheme:                Scheme,
		ErrorIfCRDPathMissing: true,
		// A busy 2-core machine starting several control planes at once needs time.
		ControlPlaneStartTimeout: 3 * time.Minute,
		ControlPlaneStopTimeout:  time.Minute,
	}
	env.CRDDirectoryPaths = crdPaths
	cfg, err := env.Start()
	if err != nil {
		_ = env.Stop()
		return nil, fmt.Errorf("starting control plane %s: %w", name, err)
	}
	// A fleet hub talks to many members; client-go's default of 5 QPS is far too low for tests too.
	cfg.QPS, cfg.Burst = 200, 400
	cp := &ControlPlane{Name: name, Config: cfg, env: env}
	if cp.Client, err = client.New(cfg, client.Options{Scheme: Scheme}); err != nil {
		_ = env.Stop()
		return nil, fmt.Errorf("client for %s: %w", name, err)
	}
	user, err := env.ControlPlane.AddUser(envtest.User{Name: "fleetdb-admin", Groups: []string{"system:masters"}}, nil)
	if err != nil {
		_ = env.Stop()
		return nil, fmt.Errorf("admin user for %s: %w", name, err)
	}
	if cp.Kubeconfig, err = user.KubeConfig(); err != nil {
		_ = env.Stop()
		return nil, fmt.Errorf("kubeconfig for %s: %w", name, err)
	}
	// A hub (it gets fleetdb's CRDs) gets the hub's admission policies too.
	if slices.Contains(crdPaths, filepath.Join(RepoRoot(), "deploy", "crds")) {
		if err := ApplyManifests(context.Background(), cp.Client, HubPolicies...); err != nil {
			_ = env.Stop()
			return nil, fmt.Errorf("admission policies for %s: %w", name, err)
		}
	}
	// A member with CloudNativePG's CRD gets the policy that plays its webhook.
	if slices.ContainsFunc(crdPaths, func(p string) bool { return strings.Contains(p, "postgresql.cnpg.io_") }) {
		if err := InstallCNPGWebhookPolicy(context.Background(), cp.Client); err != nil {
			_ = env.Stop()
			return nil, fmt.Errorf("CloudNativePG webhook policy for %s: %w", name, err)
		}
	}
	return cp, nil
}

// StartTestControlPlane starts one kube-apiserver for test t (fleetdb's
// CRDs installed when crds is set), stopped when t ends, with namespaces
// created; it skips in -short mode and fails t when the start fails.
func StartTestControlPlane(t testing.TB, crds bool, namespaces ...string) (*ControlPlane, context.Context) {
	t.Helper()
	if testing.Short() {
		t.Skip("starts a kube-apiserver")
	}
	assets, err := AssetsDir()
	if err != nil {
		t.Fatal(err)
	}
	cp, err := StartControlPlane("hub", assets, crds)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cp.Stop() })
	ctx := Context(t)
	for _, ns := range namespaces {
		if err := cp.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
			t.Fatal(err)
		}
	}
	return cp, ctx
}

// Context returns a context that ends with the test.
func Context(t testing.TB) context.Context {
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	return ctx
}

var (
	assetsOnce sync.Once
	assetsDir  string
	assetsErr  error
)

// AssetsDir returns the folder with the control-plane binaries: KUBEBUILDER_ASSETS
// when set, else the output of hack/toolchain.sh (which builds them on first use).
func AssetsDir() (string, error) {
	assetsOnce.Do(func() {
		if dir := os.Getenv("KUBEBUILDER_ASSETS"); dir != "" {
			assetsDir = dir
			return
		}
		// The first build takes ~15 minutes on 2 cores; later calls return at once.
		ctx, cancel := context.WithTimeout(context.Background(), 45*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, filepath.Join(RepoRoot(), "hack", "toolchain.sh"))
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			assetsErr = fmt.Errorf("building the control-plane toolchain: %w: %s", err, stderr.String())
			return
		}
		assetsDir = strings.TrimSpace(string(out))
	})
	return assetsDir, assetsErr
}

// RepoRoot is the root of the fleetdb module (test/repo.Root); outside the
// checkout it panics: no test of this repository runs there.
func RepoRoot() string {
	root, err := repo.Root()
	if err != nil {
		panic(err)
	}
	return root
}
