package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/fleetdb/fleetdb/member"
	"github.com/fleetdb/fleetdb/test/fleet"
)

// TestKwokStagesPromotionToken runs the local fleet's kwok, with the Stages
// that play CloudNativePG there (hack/kwok/cnpg-stages.yaml), against a
// member API server: a Cluster whose spec.replica no longer has a
// promotionToken loses status.lastPromotionToken, as CloudNativePG v1.30.0
// clears it (updateResourceStatus, internal/controller/cluster_status.go),
// while one whose spec still has the token keeps it. (The integration
// simulator plays the same rule; TestSwitchoverRaces shows a hub restart
// does not render a used token again.)
func TestKwokStagesPromotionToken(t *testing.T) {
	g := NewWithT(t)
	assets, err := fleet.AssetsDir()
	g.Expect(err).NotTo(HaveOccurred())
	cnpgCRD, err := fleet.CNPGClusterCRD()
	g.Expect(err).NotTo(HaveOccurred())
	ctx := fleet.Context(t)
	stageCRD := filepath.Join(kwokModuleDir(ctx, g), "kustomize", "crd", "bases", "kwok.x-k8s.io_stages.yaml")
	cp, err := fleet.StartControlPlaneWith("kwok-member", assets, []string{cnpgCRD, stageCRD})
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(func() { _ = cp.Stop() })
	g.Expect(fleet.ApplyManifests(ctx, cp.Client, "hack/kwok/cnpg-stages.yaml")).To(Succeed())

	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	g.Expect(os.WriteFile(kubeconfig, cp.Kubeconfig, 0o600)).To(Succeed())
	kwok := exec.CommandContext(ctx, filepath.Join(assets, "kwok"), "--kubeconfig", kubeconfig, "--enable-crds=Stage",
		"--manage-all-nodes=false", "--manage-nodes-with-label-selector=kwok.fleetdb.io/none", "--server-address=")
	var logs bytes.Buffer
	kwok.Stdout, kwok.Stderr = &logs, &logs
	g.Expect(kwok.Start()).To(Succeed())
	t.Cleanup(func() {
		_ = kwok.Process.Kill()
		_ = kwok.Wait()
		if t.Failed() {
			t.Logf("kwok:\n%s", logs.String())
		}
	})

	// Two primaries that took the promotion token "used": "dropped" no
	// longer renders it, "kept" still does.
	for name, token := range map[string]string{"dropped": "", "kept": "used"} {
		u := kwokCluster(name, token)
		g.Expect(cp.Client.Create(ctx, u)).To(Succeed())
		status := map[string]any{"lastPromotionToken": "used"}
		raw, err := json.Marshal(map[string]any{"status": status})
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(cp.Client.Status().Patch(ctx, u, client.RawPatch("application/merge-patch+json", raw))).To(Succeed())
	}
	lastToken := func(name string) func(Gomega) string {
		return func(g Gomega) string {
			u := member.NewCNPGCluster()
			g.Expect(cp.Client.Get(ctx, client.ObjectKey{Namespace: "default", Name: name}, u)).To(Succeed())
			phase, _, _ := unstructured.NestedString(u.Object, "status", "phase")
			g.Expect(phase).To(Equal("Cluster in healthy state"), "kwok plays the Stages")
			token, _, _ := unstructured.NestedString(u.Object, "status", "lastPromotionToken")
			return token
		}
	}
	g.Eventually(lastToken("dropped")).WithTimeout(2 * time.Minute).WithPolling(poll).Should(BeEmpty())
	g.Expect(lastToken("kept")(g)).To(Equal("used"))
}

// kwokCluster is a primary Cluster of a replica-cluster pair (as fleetdb
// renders it), with promotionToken when not empty.
func kwokCluster(name, token string) *unstructured.Unstructured {
	replica := map[string]any{"self": "m1", "primary": "m1", "source": "m2"}
	if token != "" {
		replica["promotionToken"] = token
	}
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "postgresql.cnpg.io/v1", "kind": "Cluster",
		"metadata": map[string]any{"namespace": "default", "name": name},
		"spec": map[string]any{
			"instances": int64(1), "storage": map[string]any{"size": "1Gi"}, "replica": replica,
			"externalClusters": []any{
				map[string]any{"name": "m1", "connectionParameters": map[string]any{"host": "m1.example", "user": "streaming_replica"}},
				map[string]any{"name": "m2", "connectionParameters": map[string]any{"host": "m2.example", "user": "streaming_replica"}},
			},
		},
	}}
}

// kwokModuleDir is sigs.k8s.io/kwok's directory in the module cache, at the
// version test/tools/kwok pins (hack/fleet.sh takes its Stages from there).
func kwokModuleDir(ctx context.Context, g Gomega) string {
	cmd := exec.CommandContext(ctx, "go", "list", "-m", "-f", "{{.Dir}}", "sigs.k8s.io/kwok")
	cmd.Dir = filepath.Join(fleet.RepoRoot(), "test", "tools", "kwok")
	out, err := cmd.Output()
	g.Expect(err).NotTo(HaveOccurred())
	return string(bytes.TrimSpace(out))
}
