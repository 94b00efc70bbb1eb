// Package realdb runs fleetdb against members whose nodes run real pods
// (hack/realnode.sh: containerd, runc, kubelet and kube-proxy as processes,
// no Docker) and the real CloudNativePG operator.
//
// `make test` runs them on a host where it runs as root (hack/test.sh sets
// FLEETDB_REAL_NODES=1 there); elsewhere they skip, and
// FLEETDB_REQUIRE_REAL_NODES=1 (set by .ci/run) turns that skip into a
// failure. docs/realnodes.md says what works and what remains.
package realdb

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fleetdb/fleetdb/test/repo"
)

// requireRealNodes skips the test unless real nodes were asked for.
func requireRealNodes(t *testing.T) {
	t.Helper()
	if os.Getenv("FLEETDB_REAL_NODES") == "1" {
		return
	}
	if os.Getenv("FLEETDB_REQUIRE_REAL_NODES") != "" {
		t.Fatal("FLEETDB_REQUIRE_REAL_NODES is set but FLEETDB_REAL_NODES=1 is not: the real-node suite must run here")
	}
	t.Skip("real-node tests run with FLEETDB_REAL_NODES=1 (root, overlayfs, network namespaces; see docs/realnodes.md)")
}

// script runs one of the repository's scripts with the fleet's environment
// and a deadline, and fails the test with its output when it fails.
func script(ctx context.Context, t *testing.T, env []string, timeout time.Duration, name string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(repo.RootT(t), "hack", name), args...)
	cmd.Env = append(os.Environ(), env...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	if err != nil {
		t.Fatalf("hack/%s %s: %v\n%s", name, strings.Join(args, " "), err, out.String())
	}
	return out.String()
}

// scriptDir runs one of the repository's build-and-print scripts
// (toolchain.sh, realnode-images.sh), which print the folder of what they
// built as their only line of standard output and report progress on standard
// error. It returns that folder, and fails the test when the output is not
// one line naming an existing folder: a caller must never read progress
// messages as a path (a cold build once printed them into it: "file name too
// long").
func scriptDir(ctx context.Context, t *testing.T, timeout time.Duration, name string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(repo.RootT(t), "hack", name))
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("hack/%s: %v\nstdout:\n%s\nstderr:\n%s", name, err, stdout.String(), stderr.String())
	}
	dir, err := printedDir(stdout.String())
	if err != nil {
		t.Fatalf("hack/%s: %v\nstderr:\n%s", name, err, stderr.String())
	}
	return dir
}

// printedDir checks a build-and-print script's standard output: exactly one
// line, an absolute path of an existing folder.
func printedDir(out string) (string, error) {
	lines := strings.Split(strings.TrimRight(out, "\n"), "\n")
	if len(lines) != 1 || lines[0] == "" {
		return "", fmt.Errorf("printed %d lines on standard output, want one folder:\n%s", len(lines), out)
	}
	dir := lines[0]
	if !filepath.IsAbs(dir) {
		return "", fmt.Errorf("printed %q, want an absolute folder", dir)
	}
	fi, err := os.Stat(dir)
	if err != nil {
		return "", fmt.Errorf("printed %q: %w", dir, err)
	}
	if !fi.IsDir() {
		return "", fmt.Errorf("printed %q, which is no folder", dir)
	}
	return dir, nil
}

// TestRealNodeRunsPodsAndLeavesNothing starts a one-member local fleet, gives
// its member a real node, runs pods on it (a pause pod, a web server reached
// through a Service by a client pod: kube-proxy's rules in the node's own
// network namespace), installs the real CloudNativePG operator (its webhooks
// answer a server-side dry run) and a one-instance Cluster whose primary
// answers SQL through its -rw Service, removes the node, and checks that
// nothing it created is left on the host. On the way it checks the host's
// safety: the fleet's credentials are its owner's alone, the kubelet refuses
// anonymous requests, the host's own folders stay as they were, and
// hack/fleet.sh down removes no folder but its volumes'.
func TestRealNodeRunsPodsAndLeavesNothing(t *testing.T) {
	requireRealNodes(t)
	ctx := t.Context()
	dir := t.TempDir()
	env := []string{
		"FLEET_DIR=" + filepath.Join(dir, "fleet"),
		"FLEET_PREFIX=rdb",
		"FLEET_MEMBERS=1",
		// Its own bridge and addresses, apart from a fleet of `make run`.
		"REALNODE_BRIDGE=fdbrdb0",
		"REALNODE_NODE_NET=10.223",
		"REALNODE_POD_NET=10.224",
		"REALNODE_SERVICE_NET=10.225",
		// The member gets its real node, cluster DNS and the real
		// CloudNativePG operator from hack/fleet.sh up.
		"FLEET_NODES=real",
	}
	t.Cleanup(func() {
		// Cleanups run after the test's context is cancelled.
		ctx := context.Background()
		script(ctx, t, env, 3*time.Minute, "realnode.sh", "down-all")
		script(ctx, t, env, 3*time.Minute, "fleet.sh", "down")
	})
	hostBefore := snapshotHostPaths(t)
	script(ctx, t, env, 30*time.Minute, "fleet.sh", "up")
	requirePrivate(t, filepath.Join(dir, "fleet"))
	// member-1's node at REALNODE_NODE_NET.0.11.
	requireKubeletRefusesAnonymous(ctx, t, "10.223.0.11:10250")
	// Again: a node that is up stays as it is.
	if out := script(ctx, t, env, 5*time.Minute, "realnode.sh", "up", "member-1"); !strings.Contains(out, "node member-1-real is up") {
		t.Fatalf("hack/realnode.sh up on a running node did not keep it:\n%s", out)
	}
	out := script(ctx, t, env, 5*time.Minute, "realnode.sh", "smoke", "member-1")
	if !strings.Contains(out, "read 'realnode-web' from the Service") {
		t.Fatalf("the client pod did not read the web pod's page through its Service:\n%s", out)
	}

	// The real CloudNativePG operator (installed by hack/fleet.sh up), and
	// a one-instance Cluster whose primary answers SQL through its -rw
	// Service (TestHubRunsCloudNativePGOnRealNodes has standbys).
	images := scriptDir(ctx, t, 60*time.Minute, "realnode-images.sh")
	image := readFile(t, filepath.Join(images, "postgresql-image"))
	kc := filepath.Join(dir, "fleet", "member-1.kubeconfig")
	kubectl := filepath.Join(scriptDir(ctx, t, 30*time.Minute, "toolchain.sh"), "kubectl")
	k := func(timeout time.Duration, stdin string, args ...string) string {
		t.Helper()
		ctx, cancel := context.WithTimeout(ctx, timeout)
		defer cancel()
		cmd := exec.CommandContext(ctx, kubectl, append([]string{"--kubeconfig", kc}, args...)...)
		cmd.Stdin = strings.NewReader(stdin)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("kubectl %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	k(time.Minute, `apiVersion: postgresql.cnpg.io/v1
kind: Cluster
metadata: {name: pg, namespace: default}
spec:
  instances: 1
  imageName: `+image+`
  storage: {size: 1Gi}
`, "apply", "-f", "-")
	k(10*time.Minute, "", "wait", "cluster/pg", "--for=condition=Ready", "--timeout=9m")
	ip := k(time.Minute, "", "get", "service", "pg-rw", "-o", "jsonpath={.spec.clusterIP}")
	// The client pod runs once (restartPolicy Never); a first connection
	// made before the node's kube-proxy has the new Service's rules fails
	// it. Each failed attempt is logged with its output and the pod is run
	// again, up to three times.
	psqlPod := `apiVersion: v1
kind: Pod
metadata: {name: psql, namespace: default}
spec:
  restartPolicy: Never
  containers:
  - name: psql
    image: ` + image + `
    imagePullPolicy: Never
    command: ["psql", "-Atc", "create table t(x int); insert into t values (7), (42); select 'rows: ' || string_agg(x::text, ',' order by x) from t"]
    env:
    - {name: PGHOST, value: "` + ip + `"}
    - {name: PGUSER, valueFrom: {secretKeyRef: {name: pg-app, key: username}}}
    - {name: PGPASSWORD, valueFrom: {secretKeyRef: {name: pg-app, key: password}}}
    - {name: PGDATABASE, valueFrom: {secretKeyRef: {name: pg-app, key: dbname}}}
`
	for attempt := 1; ; attempt++ {
		k(time.Minute, psqlPod, "apply", "-f", "-")
		phase := ""
		for deadline := time.Now().Add(4 * time.Minute); phase != "Succeeded" && phase != "Failed"; {
			if time.Now().After(deadline) {
				t.Fatalf("the psql pod did not end within 4m (phase %q):\n%s", phase, k(time.Minute, "", "describe", "pod", "psql"))
			}
			time.Sleep(2 * time.Second)
			phase = k(time.Minute, "", "get", "pod", "psql", "-o", "jsonpath={.status.phase}")
		}
		out := k(time.Minute, "", "logs", "psql")
		if phase == "Succeeded" {
			if !strings.Contains(out, "rows: 7,42") {
				t.Fatalf("psql through the pg-rw Service did not read back the rows it wrote:\n%s", out)
			}
			break
		}
		t.Logf("attempt %d: the psql pod failed:\n%s", attempt, out)
		if attempt == 3 {
			t.Fatalf("psql through the pg-rw Service failed %d times", attempt)
		}
		k(2*time.Minute, "", "delete", "pod", "psql", "--wait=true")
	}

	// The API server reaches the kubelet (logs above) with its client
	// certificate; the pods left the host's folders alone.
	requireHostPathsUnchanged(t, hostBefore, "while the node ran pods")
	victims := plantVolumeVictims(t, func(m string) { k(time.Minute, m, "apply", "-f", "-") })

	script(ctx, t, env, 3*time.Minute, "realnode.sh", "down", "member-1")
	script(ctx, t, env, time.Minute, "realnode.sh", "check")
	script(ctx, t, env, 3*time.Minute, "fleet.sh", "down")
	victims()
	requireHostPathsUnchanged(t, hostBefore, "after the node was removed")
}
