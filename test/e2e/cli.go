package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	. "github.com/onsi/gomega" //nolint:staticcheck // ST1001: gomega's DSL reads as assertions, as in Cluster API's test/framework
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleetv1alpha1 "github.com/fleetdb/fleetdb/apis/v1alpha1"
	"github.com/fleetdb/fleetdb/test/fleet"
)

// updateGolden rewrites the CLI specs' golden files instead of comparing
// (go test ./test/e2e/ -run 'TestCLI$' -args -update).
var updateGolden = flag.Bool("update", false, "rewrite the golden files of the CLI specs (testdata/cli)")

var cliBuild struct {
	once sync.Once
	path string
	err  error
}

// BuildCLI builds cmd/kubectl-fleetdb once per test process into dir (a
// temporary folder when empty) and returns the binary's path.
func BuildCLI(ctx context.Context, t testing.TB, dir string) string {
	t.Helper()
	cliBuild.once.Do(func() {
		if dir == "" {
			if dir, cliBuild.err = os.MkdirTemp("", "fleetdb-e2e-cli-"); cliBuild.err != nil {
				return
			}
		}
		cliBuild.path = filepath.Join(dir, "kubectl-fleetdb")
		cmd := exec.CommandContext(ctx, "go", "build", "-o", cliBuild.path, "./cmd/kubectl-fleetdb")
		cmd.Dir = fleet.RepoRoot()
		if out, err := cmd.CombinedOutput(); err != nil {
			cliBuild.err = fmt.Errorf("go build ./cmd/kubectl-fleetdb: %w: %s", err, out)
		}
	})
	if cliBuild.err != nil {
		t.Fatal(cliBuild.err)
	}
	return cliBuild.path
}

// CLIInput is the input of the CLI specs.
type CLIInput struct {
	T     testing.TB
	Fleet *Fleet
	// CLI is the kubectl-fleetdb binary (BuildCLI).
	CLI string
}

// cliResult is one run of the CLI.
type cliResult struct {
	stdout, stderr string
	code           int
}

// runCLI runs the CLI against the fleet's hub with its output piped.
func runCLI(ctx context.Context, in CLIInput, args ...string) cliResult {
	in.T.Helper()
	cmd := exec.CommandContext(ctx, in.CLI, append([]string{"--kubeconfig", in.Fleet.Hub.Kubeconfig}, args...)...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	res := cliResult{stdout: stdout.String(), stderr: stderr.String()}
	var exit *exec.ExitError
	switch {
	case errors.As(err, &exit):
		res.code = exit.ExitCode()
	case err != nil:
		in.T.Fatalf("kubectl-fleetdb %s: %v", strings.Join(args, " "), err)
	}
	in.T.Logf("$ kubectl fleetdb %s  (exit %d)\n%s%s", strings.Join(args, " "), res.code, res.stdout, res.stderr)
	return res
}

// expectCLI runs the CLI, expects the exit code and compares the normalized
// stdout with testdata/cli/<golden>.golden.
func expectCLI(ctx context.Context, in CLIInput, ns string, code int, golden string, args ...string) cliResult {
	in.T.Helper()
	res := runCLI(ctx, in, args...)
	NewWithT(in.T).Expect(res.code).To(Equal(code), "exit code of kubectl fleetdb %s; stderr: %s", strings.Join(args, " "), res.stderr)
	expectGolden(in.T, golden, normalizeCLI(res.stdout, ns, in.Fleet.MemberNames()))
	return res
}

var (
	// Kubernetes versions as members report them (kwok's binaries built from
	// source say v0.0.0-master+$Format:%H$).
	versionRE = regexp.MustCompile(`v\d+\.\d+\.\d+(-[^\s]+|\+[^\s]+)?`)
	// Ages as the CLI prints them (kubectl's HumanDuration): 42s, 5m, 3m1s,
	// 3h, 2d4h, 3y.
	ageRE = regexp.MustCompile(`\b(\d+[smhdy])+\b`)
	// A table header: upper-case column names separated by three spaces or more.
	headerRE = regexp.MustCompile(`^[A-Z][A-Z]*( [A-Z]+)*( {3,}[A-Z]+( [A-Z]+)*)+$`)
	gapRE    = regexp.MustCompile(` {3,}`)
	// Trace ids (W3C, 32 hex digits).
	traceIDRE = regexp.MustCompile(`\b[0-9a-f]{32}\b`)
)

// normalizeCLI replaces what differs between runs: the namespace, member
// names (MEMBER1, MEMBER2, ... in the fleet's order), Kubernetes versions
// and ages. Tables are cut into cells at the header's column offsets,
// normalized cell by cell and aligned again, so their layout stays readable.
func normalizeCLI(s, ns string, members []string) string {
	norm := func(s string) string {
		s = strings.ReplaceAll(s, ns, "NAMESPACE")
		for i, m := range members {
			s = regexp.MustCompile(`\b`+regexp.QuoteMeta(m)+`\b`).ReplaceAllString(s, fmt.Sprintf("MEMBER%d", i+1))
		}
		s = versionRE.ReplaceAllString(s, "VERSION")
		s = traceIDRE.ReplaceAllString(s, "TRACEID")
		return ageRE.ReplaceAllString(s, "AGE")
	}
	lines := strings.Split(s, "\n")
	var out []string
	for i := 0; i < len(lines); i++ {
		if !headerRE.MatchString(lines[i]) {
			out = append(out, norm(lines[i]))
			continue
		}
		end := i
		for end < len(lines) && strings.TrimSpace(lines[end]) != "" {
			end++
		}
		out = append(out, realign(lines[i:end], norm)...)
		i = end - 1
	}
	return strings.Join(out, "\n")
}

// realign cuts table rows at the header's column offsets, normalizes every
// cell and pads the columns again the way the CLI does (three spaces).
func realign(rows []string, norm func(string) string) []string {
	starts := []int{0}
	for _, loc := range gapRE.FindAllStringIndex(rows[0], -1) {
		starts = append(starts, loc[1])
	}
	cells := make([][]string, len(rows))
	widths := make([]int, len(starts))
	for r, row := range rows {
		for c, start := range starts {
			v := ""
			if start < len(row) {
				stop := len(row)
				if c+1 < len(starts) && starts[c+1] < stop {
					stop = starts[c+1]
				}
				v = norm(strings.TrimSpace(row[start:stop]))
			}
			cells[r] = append(cells[r], v)
			widths[c] = max(widths[c], len(v))
		}
	}
	out := make([]string, len(rows))
	for r := range rows {
		var b strings.Builder
		for c, v := range cells[r] {
			b.WriteString(v)
			if c+1 < len(cells[r]) {
				b.WriteString(strings.Repeat(" ", widths[c]-len(v)+3))
			}
		}
		out[r] = strings.TrimRight(b.String(), " ")
	}
	return out
}

// expectGolden compares got with testdata/cli/<name>.golden (or writes it with -update).
func expectGolden(t testing.TB, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", "cli", name+".golden")
	if *updateGolden {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("golden file %s: %v (run with -args -update to write it)", path, err)
	}
	if string(want) != got {
		t.Errorf("output differs from %s (run with -args -update to accept it)\n--- want\n%s\n--- got\n%s", path, want, got)
	}
}

// CLISpec runs kubectl fleetdb against the fleet and compares its output
// with golden files, and checks through the hub API that what it says
// happened did:
//   - status (table, -o wide, -o json: the same Database the hub serves);
//   - explain of a Database placed on an unregistered member;
//   - drain: the preview changes nothing; --yes cordons and drains, the
//     Databases leave the member (one moves, one stays on its other member,
//     one has none left); uncordon clears both and they come back;
//   - unjoin is refused (exit 1) while Databases are placed on the member;
//   - join run again with the member's registration changes nothing: the
//     MemberCluster, the kubeconfig Secret and the identity in the member
//     keep their resourceVersions;
//   - usage errors exit 2.
func CLISpec(ctx context.Context, in CLIInput) {
	t, f := in.T, in.Fleet
	g := NewWithT(t)
	if len(f.Members) < 2 {
		t.Skip("the CLI spec needs two members")
	}
	m1, m2 := f.Members[0].Name, f.Members[1].Name
	ns := CreateNamespace(ctx, CreateNamespaceInput{T: t, Fleet: f, Prefix: "e2e-cli"})
	DumpOnFailure(t, f, ns)
	dbs := cliDatabases(ns, m1, m2)
	for _, db := range dbs {
		g.Expect(f.Hub.Client.Create(ctx, db)).To(Succeed())
	}
	orders, roaming, solo, broken, ledger := client.ObjectKeyFromObject(dbs[0]), client.ObjectKeyFromObject(dbs[1]),
		client.ObjectKeyFromObject(dbs[2]), client.ObjectKeyFromObject(dbs[3]), client.ObjectKeyFromObject(dbs[4])
	WaitForDatabaseReady(ctx, WaitForDatabaseReadyInput{T: t, Fleet: f, Key: orders, Members: []string{m1, m2}, Replicas: 1})
	WaitForDatabaseReady(ctx, WaitForDatabaseReadyInput{T: t, Fleet: f, Key: roaming, Members: []string{m1}, Replicas: 1})
	WaitForDatabaseReady(ctx, WaitForDatabaseReadyInput{T: t, Fleet: f, Key: solo, Members: []string{m1}, Replicas: 1})
	waitPlacedFalse(ctx, in, broken)
	WaitForDatabaseReady(ctx, WaitForDatabaseReadyInput{T: t, Fleet: f, Key: ledger, Members: []string{m1, m2}, Replicas: 1})
	g.Eventually(func(g Gomega) {
		db := GetDatabase(ctx, g, f, ledger)
		g.Expect(Condition(db.Status.Conditions, fleetv1alpha1.ConditionTopologyStable).Status).To(Equal(metav1.ConditionTrue))
	}).WithContext(ctx).WithTimeout(f.Intervals.Ready).WithPolling(f.Intervals.Poll).Should(Succeed())

	expectCLI(ctx, in, ns, 0, "status", "status", "-n", ns)
	expectCLI(ctx, in, ns, 0, "status-orders-wide", "status", "orders", "-n", ns, "-o", "wide")
	expectStatusJSON(ctx, in, orders, m1, m2)
	expectCLI(ctx, in, ns, 0, "explain-broken", "explain", "broken", "-n", ns)
	// A Ready Database's explain: its members with their roles and its
	// Events (the hub's CertificatesIssued; which others come and when is
	// up to the hub, so this one is not compared with a golden file).
	res := runCLI(ctx, in, "explain", "ledger", "-n", ns)
	g.Expect(res.code).To(Equal(0), res.stderr)
	g.Expect(res.stdout).To(ContainSubstring("Database " + ns + "/ledger is Ready"))
	g.Expect(res.stdout).To(ContainSubstring("  " + m1 + ": Ready, 1/1 replicas ready, generation 1/1"))
	g.Expect(res.stdout).To(ContainSubstring("role Primary"))
	g.Expect(res.stdout).To(MatchRegexp(`Recent Events:\n(.*\n)*  \S+ ago  Normal  CertificatesIssued: `))

	cliDrain(ctx, in, ns, m1, m2, orders, roaming, solo, ledger)

	var before fleetv1alpha1.MemberCluster
	g.Expect(f.Hub.Client.Get(ctx, types.NamespacedName{Name: m2}, &before)).To(Succeed())
	expectCLI(ctx, in, ns, 1, "unjoin-refused", "unjoin", m2)
	var after fleetv1alpha1.MemberCluster
	g.Expect(f.Hub.Client.Get(ctx, types.NamespacedName{Name: m2}, &after)).To(Succeed())
	g.Expect(after.Generation).To(Equal(before.Generation), "a refused unjoin changed the MemberCluster")

	cliJoinAgain(ctx, in, ns, f.Members[0])
	cliJoinDuplicate(ctx, in, f.Members[0])
	cliUnjoinForce(ctx, in, ns, f.Members[1], orders, []string{m1, m2})

	for _, args := range [][]string{{"drain"}, {"status", "-o", "xml"}, {"join", "x"}, {"nope"}} {
		g.Expect(runCLI(ctx, in, args...).code).To(Equal(2), "usage error: kubectl fleetdb %s", strings.Join(args, " "))
	}
}

// cliDatabases are the spec's Databases: orders on both members, roaming
// on one member chosen by label, solo on the first member only (its data
// deleted when it leaves), broken on a member that is not registered,
// ledger a PrimaryStandby Database with its primary on the first member.
func cliDatabases(ns, m1, m2 string) []*fleetv1alpha1.Database {
	orders := NewDatabase(ns, "orders", 1, []string{m1, m2})
	roaming := NewDatabase(ns, "roaming", 1, nil)
	roaming.Spec.Placement = fleetv1alpha1.PlacementSpec{
		ClusterSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"fleetdb.io/sample": "true"}},
		MaxClusters:     new(int32(1)),
	}
	solo := NewDatabase(ns, "solo", 1, []string{m1})
	solo.Spec.Teardown.OnPlacementRemoval = fleetv1alpha1.PlacementRemovalDelete
	broken := NewDatabase(ns, "broken", 1, []string{"e2e-not-registered"})
	ledger := NewDatabase(ns, "ledger", 1, []string{m1, m2})
	ledger.Spec.Topology = &fleetv1alpha1.TopologySpec{Mode: fleetv1alpha1.TopologyPrimaryStandby, PrimaryCluster: m1}
	return []*fleetv1alpha1.Database{orders, roaming, solo, broken, ledger}
}

func waitPlacedFalse(ctx context.Context, in CLIInput, key types.NamespacedName) {
	NewWithT(in.T).Eventually(func(g Gomega) {
		db := GetDatabase(ctx, g, in.Fleet, key)
		g.Expect(Condition(db.Status.Conditions, fleetv1alpha1.ConditionPlaced).Status).To(Equal(metav1.ConditionFalse))
		g.Expect(db.Status.ObservedGeneration).To(Equal(db.Generation))
	}).WithContext(ctx).WithTimeout(in.Fleet.Intervals.Ready).WithPolling(in.Fleet.Intervals.Poll).Should(Succeed())
}

// expectStatusJSON checks status DATABASE -o json: a v1 List of the
// Database's MemberClusters and the Database as the hub serves it.
func expectStatusJSON(ctx context.Context, in CLIInput, key types.NamespacedName, members ...string) {
	g := NewWithT(in.T)
	res := runCLI(ctx, in, "status", key.Name, "-n", key.Namespace, "-o", "json")
	g.Expect(res.code).To(Equal(0), res.stderr)
	var list struct {
		APIVersion string            `json:"apiVersion"`
		Kind       string            `json:"kind"`
		Items      []json.RawMessage `json:"items"`
	}
	g.Expect(json.Unmarshal([]byte(res.stdout), &list)).To(Succeed())
	g.Expect(list.APIVersion + "/" + list.Kind).To(Equal("v1/List"))
	var gotMembers []string
	var gotDB *fleetv1alpha1.Database
	for _, raw := range list.Items {
		var tm metav1.TypeMeta
		g.Expect(json.Unmarshal(raw, &tm)).To(Succeed())
		g.Expect(tm.APIVersion).To(Equal(fleetv1alpha1.GroupVersion.String()))
		switch tm.Kind {
		case "MemberCluster":
			var mc fleetv1alpha1.MemberCluster
			g.Expect(json.Unmarshal(raw, &mc)).To(Succeed())
			gotMembers = append(gotMembers, mc.Name)
		case "Database":
			gotDB = &fleetv1alpha1.Database{}
			g.Expect(json.Unmarshal(raw, gotDB)).To(Succeed())
		default:
			in.T.Errorf("unexpected kind %s in status -o json", tm.Kind)
		}
	}
	g.Expect(gotMembers).To(ConsistOf(members))
	g.Expect(gotDB).NotTo(BeNil())
	g.Expect(gotDB.ManagedFields).To(BeEmpty())
	hub := GetDatabase(ctx, g, in.Fleet, key)
	g.Expect(gotDB.UID).To(Equal(hub.UID))
	if gotDB.ResourceVersion == hub.ResourceVersion {
		g.Expect(gotDB.Status).To(Equal(hub.Status), "status -o json shows the Database's status as the hub serves it")
	}
}

// cliDrain previews a drain of m1 (nothing changes), drains it with --yes
// (the Databases leave it as the preview said, but for the PrimaryStandby
// primary, which stays), then uncordons it.
func cliDrain(ctx context.Context, in CLIInput, ns, m1, m2 string, orders, roaming, solo, ledger types.NamespacedName) {
	t, f := in.T, in.Fleet
	g := NewWithT(t)
	var before fleetv1alpha1.MemberCluster
	g.Expect(f.Hub.Client.Get(ctx, types.NamespacedName{Name: m1}, &before)).To(Succeed())
	expectCLI(ctx, in, ns, 0, "drain-preview", "drain", m1)
	var after fleetv1alpha1.MemberCluster
	g.Expect(f.Hub.Client.Get(ctx, types.NamespacedName{Name: m1}, &after)).To(Succeed())
	// The hub writes the status (probes); the spec is what a drain would change.
	g.Expect(after.Generation).To(Equal(before.Generation), "drain without --yes changed the MemberCluster")
	g.Expect(after.Spec.Unschedulable || after.Spec.Drain).To(BeFalse())

	t.Cleanup(func() {
		// Whatever happened, leave the member schedulable for the next specs.
		cctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		patch := client.RawPatch(types.MergePatchType, []byte(`{"spec":{"unschedulable":false,"drain":false}}`))
		if err := f.Hub.Client.Patch(cctx, &fleetv1alpha1.MemberCluster{ObjectMeta: metav1.ObjectMeta{Name: m1}}, patch); err != nil {
			t.Logf("cleanup: uncordoning %s: %v", m1, err)
		}
	})
	expectCLI(ctx, in, ns, 0, "drain-yes", "drain", m1, "--yes")
	g.Expect(f.Hub.Client.Get(ctx, types.NamespacedName{Name: m1}, &after)).To(Succeed())
	g.Expect(after.Spec.Unschedulable).To(BeTrue())
	g.Expect(after.Spec.Drain).To(BeTrue())
	// What the preview said: orders stays on m2, roaming moves to m2, solo has no member left.
	WaitForDatabaseReady(ctx, WaitForDatabaseReadyInput{T: t, Fleet: f, Key: orders, Members: []string{m2}, Replicas: 1})
	WaitForDatabaseReady(ctx, WaitForDatabaseReadyInput{T: t, Fleet: f, Key: roaming, Members: []string{m2}, Replicas: 1})
	g.Eventually(func(g Gomega) {
		for _, key := range []types.NamespacedName{orders, roaming, solo} {
			g.Expect(ClusterEntry(GetDatabase(ctx, g, f, key), m1)).To(BeNil(), "%s still placed on %s", key, m1)
		}
	}).WithContext(ctx).WithTimeout(f.Intervals.Ready).WithPolling(f.Intervals.Poll).Should(Succeed())
	waitPlacedFalse(ctx, in, solo)
	// The preview said ledger keeps its primary on m1: the hub keeps it there.
	g.Eventually(func(g Gomega) {
		db := GetDatabase(ctx, g, f, ledger)
		g.Expect(ClusterEntry(db, m1)).NotTo(BeNil(), "a drain dropped the PrimaryStandby primary")
		g.Expect(Condition(db.Status.Conditions, fleetv1alpha1.ConditionPlaced).Message).To(ContainSubstring("draining but kept (primary: switch it over first): " + m1))
	}).WithContext(ctx).WithTimeout(f.Intervals.Ready).WithPolling(f.Intervals.Poll).Should(Succeed())
	// onPlacementRemoval Retain (orders' default) keeps the credentials in m1.
	g.Expect(f.Member(m1).Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: "orders-credentials"}, &corev1.Secret{})).To(Succeed())
	expectCLI(ctx, in, ns, 0, "status-drained", "status", "-n", ns)

	expectCLI(ctx, in, ns, 0, "uncordon", "uncordon", m1)
	g.Expect(f.Hub.Client.Get(ctx, types.NamespacedName{Name: m1}, &after)).To(Succeed())
	g.Expect(after.Spec.Unschedulable).To(BeFalse())
	g.Expect(after.Spec.Drain).To(BeFalse())
	WaitForDatabaseReady(ctx, WaitForDatabaseReadyInput{T: t, Fleet: f, Key: orders, Members: []string{m1, m2}, Replicas: 1})
	WaitForDatabaseReady(ctx, WaitForDatabaseReadyInput{T: t, Fleet: f, Key: solo, Members: []string{m1}, Replicas: 1})
}

// managerTime is when a field manager last applied to obj ("" when never).
func managerTime(obj client.Object, manager string) string {
	for _, m := range obj.GetManagedFields() {
		if m.Manager == manager && m.Time != nil {
			return m.Time.UTC().String()
		}
	}
	return ""
}

// joinArgs are the join arguments that reproduce a member's registration
// as the hub holds it (labels, namespace selector, replication, the server
// in its kubeconfig Secret).
func joinArgs(ctx context.Context, g Gomega, f *Fleet, member *Cluster) []string {
	var mc fleetv1alpha1.MemberCluster
	g.Expect(f.Hub.Client.Get(ctx, types.NamespacedName{Name: member.Name}, &mc)).To(Succeed())
	var secret corev1.Secret
	hubNS := envOr("FLEETDB_E2E_HUB_NAMESPACE", "fleetdb-system")
	g.Expect(f.Hub.Client.Get(ctx, types.NamespacedName{Namespace: hubNS, Name: mc.Spec.KubeconfigSecretRef.Name}, &secret)).To(Succeed())
	kc, err := clientcmd.Load(secret.Data[mc.Spec.KubeconfigSecretRef.Key])
	g.Expect(err).NotTo(HaveOccurred())
	server := kc.Clusters[kc.Contexts[kc.CurrentContext].Cluster].Server

	args := []string{"join", member.Name, "--member-kubeconfig", member.Kubeconfig, "--hub-namespace", hubNS, "--server", server, "--timeout", "60"}
	var labels []string
	for k, v := range mc.Labels {
		labels = append(labels, k+"="+v)
	}
	args = append(args, "--labels", strings.Join(labels, ","))
	if sel := mc.Spec.NamespaceSelector; sel != nil {
		if len(sel.MatchLabels) == 0 {
			args = append(args, "--all-namespaces")
		} else {
			var nl []string
			for k, v := range sel.MatchLabels {
				nl = append(nl, k+"="+v)
			}
			args = append(args, "--namespace-labels", strings.Join(nl, ","))
		}
	}
	if r := mc.Spec.Replication; r != nil {
		args = append(args, "--replication-host-template", r.HostTemplate, "--replication-port", fmt.Sprint(r.EffectivePort()))
	}
	return args
}

// cliJoinAgain runs join for a registered member with its registration as
// it is: nothing changes on the hub or in the member, and join waits for
// the member to be Ready.
func cliJoinAgain(ctx context.Context, in CLIInput, ns string, member *Cluster) {
	t, f := in.T, in.Fleet
	g := NewWithT(t)
	args := joinArgs(ctx, g, f, member)
	var mc fleetv1alpha1.MemberCluster
	g.Expect(f.Hub.Client.Get(ctx, types.NamespacedName{Name: member.Name}, &mc)).To(Succeed())
	var secret corev1.Secret
	g.Expect(f.Hub.Client.Get(ctx, types.NamespacedName{Namespace: envOr("FLEETDB_E2E_HUB_NAMESPACE", "fleetdb-system"), Name: mc.Spec.KubeconfigSecretRef.Name}, &secret)).To(Succeed())
	identity := func() []string {
		var sa corev1.ServiceAccount
		var token corev1.Secret
		var role rbacv1.ClusterRole
		g.Expect(member.Client.Get(ctx, types.NamespacedName{Namespace: "fleetdb-system", Name: "fleetdb-hub-agent"}, &sa)).To(Succeed())
		g.Expect(member.Client.Get(ctx, types.NamespacedName{Namespace: "fleetdb-system", Name: "fleetdb-hub-agent-token"}, &token)).To(Succeed())
		g.Expect(member.Client.Get(ctx, types.NamespacedName{Name: "fleetdb-hub-agent"}, &role)).To(Succeed())
		return []string{sa.ResourceVersion, token.ResourceVersion, role.ResourceVersion}
	}
	beforeIdentity := identity()
	expectCLI(ctx, in, ns, 0, "join-again", args...)
	var mcAfter fleetv1alpha1.MemberCluster
	g.Expect(f.Hub.Client.Get(ctx, types.NamespacedName{Name: member.Name}, &mcAfter)).To(Succeed())
	// The hub writes the MemberCluster's status (probes): spec, labels and
	// join's own field manager entry say whether join wrote anything.
	g.Expect(mcAfter.Generation).To(Equal(mc.Generation), "join run again changed the MemberCluster's spec")
	g.Expect(mcAfter.Labels).To(Equal(mc.Labels))
	g.Expect(managerTime(&mcAfter, "kubectl-fleetdb")).To(Equal(managerTime(&mc, "kubectl-fleetdb")), "join run again wrote the MemberCluster")
	var secretAfter corev1.Secret
	g.Expect(f.Hub.Client.Get(ctx, client.ObjectKeyFromObject(&secret), &secretAfter)).To(Succeed())
	g.Expect(secretAfter.ResourceVersion).To(Equal(secret.ResourceVersion), "join run again changed the kubeconfig Secret")
	g.Expect(identity()).To(Equal(beforeIdentity), "join run again changed the identity in the member")
}

// cliJoinDuplicate joins a registered member's cluster again under another
// name: join refuses before it writes anything (one cluster with two
// registrations would get two writers).
func cliJoinDuplicate(ctx context.Context, in CLIInput, member *Cluster) {
	t, f := in.T, in.Fleet
	g := NewWithT(t)
	const dup = "e2e-duplicate"
	args := joinArgs(ctx, g, f, member)
	args[1] = dup
	var mc fleetv1alpha1.MemberCluster
	g.Expect(f.Hub.Client.Get(ctx, types.NamespacedName{Name: member.Name}, &mc)).To(Succeed())
	g.Expect(mc.Annotations).To(HaveKey(fleetv1alpha1.AnnotationClusterID), "join records the member's cluster id")
	res := runCLI(ctx, in, args...)
	g.Expect(res.code).To(Equal(1), "join of a cluster joined already under another name")
	g.Expect(res.stderr).To(ContainSubstring("joined already as MemberCluster " + member.Name))
	err := f.Hub.Client.Get(ctx, types.NamespacedName{Name: dup}, &fleetv1alpha1.MemberCluster{})
	g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "no MemberCluster %s: %v", dup, err)
	err = f.Hub.Client.Get(ctx, types.NamespacedName{Namespace: envOr("FLEETDB_E2E_HUB_NAMESPACE", "fleetdb-system"), Name: dup + "-kubeconfig"}, &corev1.Secret{})
	g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "no kubeconfig Secret for %s: %v", dup, err)
}

// cliUnjoinForce unjoins a member on which orders is placed with --force
// and its member kubeconfig: the registration and the identity go, orders'
// objects stay in the member and its status lists them in leftBehind. Then
// the member is joined again as it was (a new token) and orders is Ready on
// it again.
func cliUnjoinForce(ctx context.Context, in CLIInput, ns string, member *Cluster, orders types.NamespacedName, ordersMembers []string) {
	t, f := in.T, in.Fleet
	g := NewWithT(t)
	args := joinArgs(ctx, g, f, member)
	t.Cleanup(func() {
		// Whatever happened, the next specs need the member registered.
		cctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		if err := f.Hub.Client.Get(cctx, types.NamespacedName{Name: member.Name}, &fleetv1alpha1.MemberCluster{}); err != nil {
			runCLI(cctx, in, args...)
		}
	})
	expectCLI(ctx, in, ns, 0, "unjoin-force", "unjoin", member.Name, "--force", "--member-kubeconfig", member.Kubeconfig)
	err := f.Hub.Client.Get(ctx, types.NamespacedName{Name: member.Name}, &fleetv1alpha1.MemberCluster{})
	g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "the MemberCluster is still there: %v", err)
	err = f.Hub.Client.Get(ctx, types.NamespacedName{Namespace: envOr("FLEETDB_E2E_HUB_NAMESPACE", "fleetdb-system"), Name: member.Name + "-kubeconfig"}, &corev1.Secret{})
	g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "the kubeconfig Secret is still there: %v", err)
	err = member.Client.Get(ctx, types.NamespacedName{Namespace: "fleetdb-system", Name: "fleetdb-hub-agent"}, &corev1.ServiceAccount{})
	g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "the identity is still in the member: %v", err)
	g.Expect(member.Client.Get(ctx, types.NamespacedName{Name: "fleetdb-system"}, &corev1.Namespace{})).To(Succeed(), "unjoin keeps the member's fleetdb-system Namespace")
	g.Eventually(func(g Gomega) {
		db := GetDatabase(ctx, g, f, orders)
		g.Expect(db.Status.LeftBehind).To(ContainElement(HaveField("Cluster", member.Name)))
	}).WithContext(ctx).WithTimeout(f.Intervals.Ready).WithPolling(f.Intervals.Poll).Should(Succeed())
	g.Expect(member.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: "orders-credentials"}, &corev1.Secret{})).To(Succeed(), "orders' objects stay in the member")

	res := runCLI(ctx, in, args...)
	g.Expect(res.code).To(Equal(0), res.stderr)
	WaitForDatabaseReady(ctx, WaitForDatabaseReadyInput{T: t, Fleet: f, Key: orders, Members: ordersMembers, Replicas: 1})
}
