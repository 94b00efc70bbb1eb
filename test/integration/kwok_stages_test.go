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
	"k8s.io/client-go/discovery"
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
	ctx := fleet.Context(t)
	cp := startKwokMember(ctx, t, g)

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

// startKwokMember starts a member API server with CloudNativePG's Cluster
// CRD, and kwok with the local fleet's Stages (hack/kwok/cnpg-stages.yaml).
func startKwokMember(ctx context.Context, t *testing.T, g Gomega) *fleet.ControlPlane {
	assets, err := fleet.AssetsDir()
	g.Expect(err).NotTo(HaveOccurred())
	cnpgCRD, err := fleet.CNPGClusterCRD()
	g.Expect(err).NotTo(HaveOccurred())
	stageCRD := filepath.Join(kwokModuleDir(ctx, g), "kustomize", "crd", "bases", "kwok.x-k8s.io_stages.yaml")
	cp, err := fleet.StartControlPlaneWith("kwok-member", assets, []string{cnpgCRD, stageCRD})
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(func() { _ = cp.Stop() })
	g.Expect(fleet.ApplyManifests(ctx, cp.Client, "hack/kwok/cnpg-stages.yaml")).To(Succeed())
	// kwok's Stage controller for Clusters reads their OpenAPI schema once,
	// when it starts, and gives up if the API server does not serve it yet.
	dc, err := discovery.NewDiscoveryClientForConfig(cp.Config)
	g.Expect(err).NotTo(HaveOccurred())
	g.Eventually(func(g Gomega) {
		paths, err := dc.OpenAPIV3().Paths()
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(paths).To(HaveKey("apis/postgresql.cnpg.io/v1"))
	}).WithTimeout(time.Minute).WithPolling(poll).Should(Succeed())

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
	return cp
}

// TestKwokStagesTimeline plays a switchover and a switchover back on the
// kwok Stages (two Clusters of one API server stand for two members; the
// test writes what fleetdb would) and checks the timelines they report
// follow CloudNativePG v1.30.0 and PostgreSQL: the demoted primary publishes
// a demotion token of its system identifier and timeline
// (generateDemotionToken, pkg/reconciler/replicaclusterswitch/shutdown_wal.go),
// the target promotes onto the token's timeline + 1 and reports it at once,
// and the demoted primary keeps reporting its old timeline, its last
// restartpoint's (fillStatusFromReplica, pkg/management/postgres/probes.go),
// until its restartpoint; a standby that never ran a primary publishes no token.
func TestKwokStagesTimeline(t *testing.T) {
	g := NewWithT(t)
	ctx := fleet.Context(t)
	cp := startKwokMember(ctx, t, g)

	a, b := kwokCluster("a", ""), kwokCluster("b", "")
	g.Expect(unstructured.SetNestedField(b.Object, "m2", "spec", "replica", "self")).To(Succeed())
	g.Expect(unstructured.SetNestedField(b.Object, "m1", "spec", "replica", "source")).To(Succeed())
	g.Expect(unstructured.SetNestedField(b.Object, "m1", "spec", "bootstrap", "pg_basebackup", "source")).To(Succeed())
	g.Expect(cp.Client.Create(ctx, a)).To(Succeed())
	g.Expect(cp.Client.Create(ctx, b)).To(Succeed())
	type reported struct {
		primary  bool
		timeline int64
		token    string
		last     string
	}
	read := func(g Gomega, name string) reported {
		u := member.NewCNPGCluster()
		g.Expect(cp.Client.Get(ctx, client.ObjectKey{Namespace: "default", Name: name}, u)).To(Succeed())
		phase, _, _ := unstructured.NestedString(u.Object, "status", "phase")
		g.Expect(phase).To(Equal("Cluster in healthy state"), "kwok plays the Stages")
		var r reported
		r.primary, _, _ = unstructured.NestedBool(u.Object, "status", "instancesReportedState", name+"-1", "isPrimary")
		r.timeline, _, _ = unstructured.NestedInt64(u.Object, "status", "instancesReportedState", name+"-1", "timeLineID")
		r.token, _, _ = unstructured.NestedString(u.Object, "status", "demotionToken")
		r.last, _, _ = unstructured.NestedString(u.Object, "status", "lastPromotionToken")
		return r
	}
	eventually := func(name string, check func(Gomega, reported)) reported {
		var r reported
		g.Eventually(func(g Gomega) {
			r = read(g, name)
			check(g, r)
		}).WithTimeout(2 * time.Minute).WithPolling(poll).Should(Succeed())
		return r
	}
	setReplica := func(u *unstructured.Unstructured, primary, token string) {
		g.Eventually(func() error {
			if err := cp.Client.Get(ctx, client.ObjectKeyFromObject(u), u); err != nil {
				return err
			}
			_ = unstructured.SetNestedField(u.Object, primary, "spec", "replica", "primary")
			if token != "" {
				_ = unstructured.SetNestedField(u.Object, token, "spec", "replica", "promotionToken")
			} else {
				unstructured.RemoveNestedField(u.Object, "spec", "replica", "promotionToken")
			}
			return cp.Client.Update(ctx, u)
		}).WithTimeout(time.Minute).WithPolling(poll).Should(Succeed())
	}
	eventually("a", func(g Gomega, r reported) { g.Expect(r).To(Equal(reported{primary: true, timeline: 1})) })
	// A fresh standby ends its demotion without a token (it never ran a primary).
	eventually("b", func(g Gomega, r reported) { g.Expect(r).To(Equal(reported{timeline: 1})) })

	// a -> b: a demotes and publishes its shutdown checkpoint; b promotes with it.
	setReplica(a, "m2", "")
	ra := eventually("a", func(g Gomega, r reported) { g.Expect(r.token).NotTo(BeEmpty()) })
	system, timeline, ok := member.DemotionTokenCheckpoint(ra.token)
	g.Expect(ok).To(BeTrue(), "a demotion token as CloudNativePG writes it: %q", ra.token)
	g.Expect(timeline).To(Equal(int64(1)))
	g.Expect(system).NotTo(BeEmpty())
	setReplica(b, "m2", ra.token)
	eventually("b", func(g Gomega, r reported) {
		g.Expect(r).To(Equal(reported{primary: true, timeline: 2, last: ra.token}), "promoted onto the token's timeline + 1")
	})
	g.Expect(read(g, "a")).To(Equal(reported{timeline: 1, token: ra.token}), "a reports its last restartpoint's timeline")
	// a's restartpoint.
	eventually("a", func(g Gomega, r reported) { g.Expect(r.timeline).To(Equal(int64(2))) })

	// b -> a (the promotion token dropped from b first, as fleetdb does).
	setReplica(b, "m2", "")
	setReplica(b, "m1", "")
	rb := eventually("b", func(g Gomega, r reported) { g.Expect(r.token).NotTo(BeEmpty()) })
	_, timeline, ok = member.DemotionTokenCheckpoint(rb.token)
	g.Expect(ok).To(BeTrue())
	g.Expect(timeline).To(Equal(int64(2)))
	setReplica(a, "m1", rb.token)
	eventually("a", func(g Gomega, r reported) {
		g.Expect(r).To(Equal(reported{primary: true, timeline: 3, last: rb.token}), "the demotion token is cleared once a is a primary")
	})
	g.Expect(read(g, "b").timeline).To(Equal(int64(2)), "b reports its last restartpoint's timeline")
	eventually("b", func(g Gomega, r reported) { g.Expect(r.timeline).To(Equal(int64(3))) })
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
