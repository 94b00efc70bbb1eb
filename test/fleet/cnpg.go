package fleet

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// cnpgModule is CloudNativePG's Go module, pinned in test/tools/cnpg/go.mod.
const cnpgModule = "github.com/cloudnative-pg/cloudnative-pg"

var (
	cnpgOnce sync.Once
	cnpgDir  string
	cnpgErr  error
)

// CNPGModuleDir returns the module cache folder of the CloudNativePG version
// pinned in test/tools/cnpg, downloading the module on first use (through
// the Go module proxy, like every other dependency).
func CNPGModuleDir() (string, error) {
	cnpgOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, "go", "mod", "download", "-json", cnpgModule)
		cmd.Dir = filepath.Join(RepoRoot(), "test", "tools", "cnpg")
		cmd.Env = append(os.Environ(), "GOFLAGS=-mod=mod")
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			cnpgErr = fmt.Errorf("downloading %s: %w: %s%s", cnpgModule, err, out, stderr.String())
			return
		}
		var info struct{ Dir, Error string }
		if err := json.Unmarshal(out, &info); err != nil {
			cnpgErr = fmt.Errorf("downloading %s: %w", cnpgModule, err)
			return
		}
		if info.Dir == "" {
			cnpgErr = fmt.Errorf("downloading %s: %s", cnpgModule, info.Error)
			return
		}
		cnpgDir = info.Dir
	})
	return cnpgDir, cnpgErr
}

// CNPGClusterCRD is the path of CloudNativePG's Cluster CRD in the module cache.
func CNPGClusterCRD() (string, error) {
	dir, err := CNPGModuleDir()
	if err != nil {
		return "", err
	}
	return filepath.Join(dir, "config", "crd", "bases", "postgresql.cnpg.io_clusters.yaml"), nil
}

// CNPGWebhookPolicy is the admission policy that mirrors CloudNativePG's
// validating webhook on members without the operator (see the file).
const CNPGWebhookPolicy = "hack/kwok/cnpg-webhook-policy.yaml"

// InstallCNPGWebhookPolicy installs CNPGWebhookPolicy and waits until the
// API server enforces it: a Cluster the webhook refuses is refused (dry
// run), and a valid one is accepted (a policy that does not compile would
// refuse every Cluster).
func InstallCNPGWebhookPolicy(ctx context.Context, c client.Client) error {
	if err := ApplyManifests(ctx, c, CNPGWebhookPolicy); err != nil {
		return err
	}
	probe := func(certificates map[string]any) error {
		u := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "postgresql.cnpg.io/v1", "kind": "Cluster",
			"metadata": map[string]any{"namespace": "default", "name": "policy-probe"},
			"spec":     map[string]any{"instances": int64(1), "storage": map[string]any{"size": "1Gi"}},
		}}
		if certificates != nil {
			u.Object["spec"].(map[string]any)["certificates"] = certificates
		}
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		return c.Create(cctx, u, client.DryRunAll)
	}
	deadline := time.Now().Add(time.Minute)
	for {
		refused := probe(map[string]any{"serverTLSSecret": "s", "serverCASecret": "ca", "serverAltDNSNames": []any{"h"}})
		accepted := probe(nil)
		if apierrors.IsInvalid(refused) && accepted == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the CloudNativePG webhook policy is not enforced: a refused Cluster got %s, a valid one %s", fmt.Sprint(refused), fmt.Sprint(accepted))
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}
