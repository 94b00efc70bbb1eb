package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleetv1alpha1 "github.com/fleetdb/fleetdb/apis/v1alpha1"
	memberdeploy "github.com/fleetdb/fleetdb/deploy/member"
	"github.com/fleetdb/fleetdb/test/fleet"
)

// TestJoinAgainKeepsTenancy runs join against real API servers (a hub with
// fleetdb's CRDs, one member; a stand-in for the member's token controller
// fills the token): join run again without the tenancy flags, the
// documented way to hand the hub a rotated token, keeps the MemberCluster's
// labels, namespace selector and replication address; only flags given
// change them, and --labels "", --no-namespace-selector and
// --replication-host-template "" remove them (issue 25, item 10).
func TestJoinAgainKeepsTenancy(t *testing.T) {
	f, ctx, hub, _ := startJoinFleet(t)
	dir := t.TempDir()
	hubKubeconfig, memberKC := filepath.Join(dir, "hub"), filepath.Join(dir, "member")
	for path, data := range map[string][]byte{hubKubeconfig: f.Hub.Kubeconfig, memberKC: f.Member("m1").Kubeconfig} {
		if err := os.WriteFile(path, data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	join := func(args ...string) {
		t.Helper()
		var out, errOut bytes.Buffer
		base := []string{"join", "m1", "--member-kubeconfig", memberKC, "--kubeconfig", hubKubeconfig, "--wait=false", "--timeout", "60"}
		if code := Execute(append(base, args...), genericiooptions.IOStreams{In: strings.NewReader(""), Out: &out, ErrOut: &errOut}); code != exitOK {
			t.Fatalf("join %q: exit %d\n%s%s", args, code, out.String(), errOut.String())
		}
	}
	get := func() fleetv1alpha1.MemberCluster {
		t.Helper()
		var mc fleetv1alpha1.MemberCluster
		if err := hub.Get(ctx, types.NamespacedName{Name: "m1"}, &mc); err != nil {
			t.Fatal(err)
		}
		return mc
	}
	const host = "$(DATABASE)-rw.$(NAMESPACE).eu-1.example.net"
	join("--labels", "region=eu,tier=gold", "--namespace-labels", "team=a", "--replication-host-template", host, "--replication-port", "15432")
	// A platform admin labels the member too (not join's label).
	mc := get()
	patch := client.MergeFrom(mc.DeepCopy())
	mc.Labels["owner"] = "platform"
	if err := hub.Patch(ctx, &mc, patch, client.FieldOwner("platform-admin")); err != nil {
		t.Fatal(err)
	}

	// The token rotation: join with only what names the member.
	join()
	mc = get()
	if mc.Labels["region"] != "eu" || mc.Labels["tier"] != "gold" || mc.Labels["owner"] != "platform" {
		t.Fatalf("join run again without --labels changed the labels: %v", mc.Labels)
	}
	if sel := mc.Spec.NamespaceSelector; sel == nil || len(sel.MatchLabels) != 1 || sel.MatchLabels["team"] != "a" {
		t.Fatalf("join run again without --namespace-labels changed the namespace selector: %+v (the Databases placed by it would be torn down)", sel)
	}
	if r := mc.Spec.Replication; r == nil || r.HostTemplate != host || r.Port != 15432 {
		t.Fatalf("join run again without the replication flags changed spec.replication: %+v", r)
	}

	// Flags given change exactly their part.
	join("--labels", "region=us", "--replication-port", "6432")
	mc = get()
	if mc.Labels["region"] != "us" || mc.Labels["owner"] != "platform" || mc.Labels["tier"] != "" {
		t.Fatalf("--labels region=us: want region=us, owner kept, tier removed: %v", mc.Labels)
	}
	if sel := mc.Spec.NamespaceSelector; sel == nil || sel.MatchLabels["team"] != "a" {
		t.Fatalf("--labels changed the namespace selector: %+v", sel)
	}
	if r := mc.Spec.Replication; r == nil || r.HostTemplate != host || r.Port != 6432 {
		t.Fatalf("--replication-port 6432: %+v", r)
	}
	join("--all-namespaces")
	if sel := get().Spec.NamespaceSelector; sel == nil || len(sel.MatchLabels) != 0 || len(sel.MatchExpressions) != 0 {
		t.Fatalf("--all-namespaces: want the empty selector, got %+v", sel)
	}

	// Removing is explicit.
	join("--no-namespace-selector", "--replication-host-template", "", "--labels", "")
	mc = get()
	if mc.Spec.NamespaceSelector != nil || mc.Spec.Replication != nil {
		t.Fatalf("--no-namespace-selector --replication-host-template '': want both removed: %+v %+v", mc.Spec.NamespaceSelector, mc.Spec.Replication)
	}
	if mc.Labels["region"] != "" || mc.Labels["owner"] != "platform" {
		t.Fatalf("--labels '': want join's labels removed, the admin's kept: %v", mc.Labels)
	}
}

// fillToken stands in for the member's token controller (envtest runs no
// kube-controller-manager): it fills the hub agent's token Secret when join
// creates it.
func fillToken(ctx context.Context, t *testing.T, member client.Client) {
	key := types.NamespacedName{Namespace: memberdeploy.Namespace, Name: memberdeploy.TokenSecret}
	for ctx.Err() == nil {
		var s corev1.Secret
		if err := member.Get(ctx, key, &s); err == nil {
			if len(s.Data[corev1.ServiceAccountTokenKey]) > 0 {
				return
			}
			s.Data = map[string][]byte{corev1.ServiceAccountTokenKey: []byte("test-token"), corev1.ServiceAccountRootCAKey: []byte("test-ca")}
			if err := member.Update(ctx, &s, client.FieldOwner("token-controller")); err != nil {
				t.Logf("filling the token: %v", err)
			}
		}
		select {
		case <-ctx.Done():
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// startJoinFleet starts a hub and one member without CloudNativePG, creates
// the hub namespace join writes to, and fills the member's token as its
// token controller would.
func startJoinFleet(t *testing.T) (*fleet.Fleet, context.Context, client.Client, client.Client) {
	t.Helper()
	if testing.Short() {
		t.Skip("starts kube-apiservers")
	}
	f := fleet.Start(t, fleet.Options{Members: []string{"m1"}, WithoutCNPG: []string{"m1"}})
	ctx := fleet.Context(t)
	hub, member := f.Hub.Client, f.Member("m1").Client
	if err := hub.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "fleetdb-system"}}); err != nil {
		t.Fatal(err)
	}
	go fillToken(ctx, t, member)
	return f, ctx, hub, member
}
