package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	memberdeploy "github.com/fleetdb/fleetdb/deploy/member"
)

// TestJoinUnjoinSafety (issue 42, item 6) runs join and unjoin against real
// API servers. join refuses a member kubeconfig that skips TLS verification
// (and writes nothing in the member) unless --allow-insecure-skip-tls-verify
// is given. unjoin removes the token and the bindings before the admission
// policies: a member admission policy refuses the ClusterRole's deletion,
// so unjoin stops in the middle, and by then the token Secret and the
// ClusterRoleBinding must be gone while the policies still stand.
func TestJoinUnjoinSafety(t *testing.T) {
	f, ctx, _, member := startJoinFleet(t)
	dir := t.TempDir()
	hubKC, memberKC, insecureKC := filepath.Join(dir, "hub"), filepath.Join(dir, "member"), filepath.Join(dir, "insecure")
	raw, err := clientcmd.Load(f.Member("m1").Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range raw.Clusters {
		c.InsecureSkipTLSVerify, c.CertificateAuthorityData, c.CertificateAuthority = true, nil, ""
	}
	insecure, err := clientcmd.Write(*raw)
	if err != nil {
		t.Fatal(err)
	}
	for path, data := range map[string][]byte{hubKC: f.Hub.Kubeconfig, memberKC: f.Member("m1").Kubeconfig, insecureKC: insecure} {
		if err := os.WriteFile(path, data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	run := func(args ...string) (int, string) {
		var out bytes.Buffer
		code := Execute(append(args, "--kubeconfig", hubKC), genericiooptions.IOStreams{In: strings.NewReader(""), Out: &out, ErrOut: &out})
		return code, out.String()
	}
	sa := &corev1.ServiceAccount{}
	saKey := types.NamespacedName{Namespace: memberdeploy.Namespace, Name: memberdeploy.ServiceAccount}

	// join: an insecure member kubeconfig is refused before anything is written.
	code, out := run("join", "m1", "--member-kubeconfig", insecureKC, "--wait=false", "--timeout", "60")
	if code == exitOK || !strings.Contains(out, "insecure-skip-tls-verify") {
		t.Fatalf("join with an insecure-skip-tls-verify member kubeconfig: want refused, got exit %d:\n%s", code, out)
	}
	if err := member.Get(ctx, saKey, sa); !apierrors.IsNotFound(err) {
		t.Fatalf("the refused join wrote the hub's identity in the member: %v", err)
	}
	if code, out := run("join", "m1", "--member-kubeconfig", insecureKC, "--allow-insecure-skip-tls-verify", "--wait=false", "--timeout", "60"); code != exitOK {
		t.Fatalf("join --allow-insecure-skip-tls-verify: exit %d\n%s", code, out)
	}
	if err := member.Get(ctx, saKey, sa); err != nil {
		t.Fatalf("join --allow-insecure-skip-tls-verify installed no identity: %v", err)
	}

	// unjoin, stopped in the middle by a refused delete of the ClusterRole.
	block := &admissionregistrationv1.ValidatingAdmissionPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: "test-keep-cluster-role"},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicySpec{
			FailurePolicy: ptr(admissionregistrationv1.Fail),
			MatchConstraints: &admissionregistrationv1.MatchResources{ResourceRules: []admissionregistrationv1.NamedRuleWithOperations{{
				RuleWithOperations: admissionregistrationv1.RuleWithOperations{
					Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Delete},
					Rule: admissionregistrationv1.Rule{APIGroups: []string{"rbac.authorization.k8s.io"}, APIVersions: []string{"*"},
						Resources: []string{"clusterroles"}},
				},
			}}},
			Validations: []admissionregistrationv1.Validation{{Expression: "oldObject.metadata.name != 'fleetdb-hub-agent'", Message: "test: kept"}},
		},
	}
	blockBinding := &admissionregistrationv1.ValidatingAdmissionPolicyBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "test-keep-cluster-role"},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicyBindingSpec{PolicyName: block.Name,
			ValidationActions: []admissionregistrationv1.ValidationAction{admissionregistrationv1.Deny}},
	}
	for _, o := range []client.Object{block, blockBinding} {
		if err := member.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	role := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "fleetdb-hub-agent"}}
	deadline := time.Now().Add(time.Minute)
	for err := member.Delete(ctx, role, client.DryRunAll); !apierrors.IsForbidden(err) && !apierrors.IsInvalid(err); err = member.Delete(ctx, role, client.DryRunAll) {
		if time.Now().After(deadline) {
			t.Fatalf("the test's policy never took effect: %v", err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	code, out = run("unjoin", "m1", "--member-kubeconfig", memberKC, "--force")
	if code == exitOK {
		t.Fatalf("unjoin deleted a ClusterRole the member refuses to delete:\n%s", out)
	}
	var token corev1.Secret
	if err := member.Get(ctx, types.NamespacedName{Namespace: memberdeploy.Namespace, Name: memberdeploy.TokenSecret}, &token); !apierrors.IsNotFound(err) {
		t.Errorf("unjoin stopped with the token Secret still there (it must go first): %v\n%s", err, out)
	}
	if err := member.Get(ctx, client.ObjectKey{Name: "fleetdb-hub-agent"}, &rbacv1.ClusterRoleBinding{}); !apierrors.IsNotFound(err) {
		t.Errorf("unjoin stopped with the ClusterRoleBinding still there (it must go before the policies): %v\n%s", err, out)
	}
	for _, name := range []string{"fleetdb-hub-agent-scope", "fleetdb-hub-agent-pods"} {
		if err := member.Get(ctx, client.ObjectKey{Name: name}, &admissionregistrationv1.ValidatingAdmissionPolicy{}); err != nil {
			t.Errorf("unjoin stopped with the admission policy %s removed (policies go last): %v\n%s", name, err, out)
		}
		if err := member.Get(ctx, client.ObjectKey{Name: name}, &admissionregistrationv1.ValidatingAdmissionPolicyBinding{}); err != nil {
			t.Errorf("unjoin stopped with the admission policy binding %s removed (policies go last): %v\n%s", name, err, out)
		}
	}

	// Once the member lets it, unjoin run again finishes.
	if err := member.Delete(ctx, blockBinding); err != nil {
		t.Fatal(err)
	}
	deadline = time.Now().Add(time.Minute)
	for {
		code, out = run("unjoin", "m1", "--member-kubeconfig", memberKC, "--force")
		if code == exitOK {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("unjoin run again: exit %d\n%s", code, out)
		}
		time.Sleep(500 * time.Millisecond)
	}
	if err := member.Get(ctx, client.ObjectKey{Name: "fleetdb-hub-agent-scope"}, &admissionregistrationv1.ValidatingAdmissionPolicy{}); !apierrors.IsNotFound(err) {
		t.Errorf("unjoin left the scope policy: %v", err)
	}
}

func ptr[T any](v T) *T { return &v }
