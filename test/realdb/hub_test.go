package realdb

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleetv1alpha1 "github.com/fleetdb/fleetdb/apis/v1alpha1"
	"github.com/fleetdb/fleetdb/member"
	"github.com/fleetdb/fleetdb/test/e2e"
	"github.com/fleetdb/fleetdb/test/localfleet"
)

// TestHubRunsCloudNativePGOnRealNodes is the first proof of fleetdb through
// its hub on real nodes (issue 26 item 5): a local fleet whose two members
// have real nodes, cluster DNS and the real CloudNativePG operator
// (hack/fleet.sh with FLEET_NODES=real), the hub binary as a process, and an
// Independent CloudNativePG Database with replicas 2 in both members. It
// becomes Ready through the hub; rows written through its client Service are
// read back, and read with SQL on the in-member standby; every object fleetdb
// writes passes CloudNativePG's webhooks (a refusal fails the test with the
// webhook's message); a credential rotation, an on-demand backup restored
// into a new Database and a Retain delete and re-create are proven with SQL
// (jobs_test.go); deleting the Database takes a final backup (pg_dump, the
// rows in it) and removes it in both members; and `hack/fleet.sh down`
// leaves nothing of the real nodes on the host.
func TestHubRunsCloudNativePGOnRealNodes(t *testing.T) {
	requireRealNodes(t)
	ctx := t.Context()
	start := time.Now()
	// Its own prefix, bridge and address ranges, apart from a fleet of
	// `make run NODES=real` and from TestRealNodeRunsPodsAndLeavesNothing.
	r := startRealFleet(ctx, t, realNet{prefix: "rdbhub", bridge: "fdbrdh0", nodeNet: "10.226", podNet: "10.227", serviceNet: "10.228"}, nil)
	f, lf, work, hubBinary, pgVersion, pgImage := r.f, r.lf, r.work, r.hubBinary, r.pgVersion, r.pgImage
	hub, err := localfleet.StartHub(localfleet.HubOptions{
		Binary: hubBinary, Kubeconfig: lf.HubIdentityKubeconfig, LogPath: filepath.Join(work, "hub.log"),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		hub.Stop()
		if t.Failed() {
			t.Logf("hub log:\n%s", localfleet.TailFile(hub.LogPath, 64<<10))
		}
	})
	if err := hub.WaitReady(ctx, 2*time.Minute); err != nil {
		t.Fatal(err)
	}

	ns := e2e.CreateNamespace(ctx, e2e.CreateNamespaceInput{T: t, Fleet: f, Prefix: "realdb"})
	e2e.DumpOnFailure(t, f, ns)
	members := f.MemberNames()
	db := e2e.NewDatabase(ns, "orders", 2, members)
	// The version of Debian's PostgreSQL the image runs: fleetdb renders
	// the image <repository>/postgresql:<version>-system-trixie for it, the
	// name hack/realnode-images.sh gives the image.
	db.Spec.Version = pgVersion
	db.Spec.Backend = fleetv1alpha1.BackendCloudNativePG
	// The final backup on delete runs (Required, the default): the
	// backup Job's image is the PostgreSQL image (jobs_test.go).
	db.Spec.Backup = nil
	if got, _ := member.CNPGImageTag(pgVersion); member.DefaultCNPGImageRepository+"/postgresql:"+got != pgImage {
		t.Fatalf("fleetdb renders %s/postgresql:%s for version %s, the image is %s", member.DefaultCNPGImageRepository, got, pgVersion, pgImage)
	}
	created := time.Now()
	if err := f.Hub.Client.Create(ctx, db); err != nil {
		t.Fatal(err)
	}
	key := client.ObjectKeyFromObject(db)
	watchRefusals(ctx, t, f, key)
	ready := e2e.WaitForDatabaseReady(ctx, e2e.WaitForDatabaseReadyInput{
		T: t, Fleet: f, Key: key, Members: members, Replicas: 2, Version: pgVersion,
	})
	t.Logf("Database Ready through the hub (2 members x 2 instances) %s after it was created", time.Since(created).Round(time.Second))
	generations := map[string]int64{}
	for _, m := range f.Members {
		e2e.ExpectMemberWorkload(ctx, e2e.ExpectMemberWorkloadInput{T: t, Fleet: f, Member: m, DB: ready, Replicas: 2, Version: pgVersion})
		u := member.NewCNPGCluster()
		if err := m.Client.Get(ctx, key, u); err != nil {
			t.Fatal(err)
		}
		generations[m.Name] = u.GetGeneration()
	}

	// SQL in each member: written and read back through the client Service
	// (by its DNS name: cluster DNS), then read on the standby.
	written := map[string]string{} // member → the rows of table t
	for _, m := range f.Members {
		kc := m.Kubeconfig
		k := kubectl(ctx, t, f.Kubectl, kc)
		rows := fmt.Sprintf("%s-%d", m.Name, time.Now().UnixNano()%1000)
		k(time.Minute, fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata: {name: psql, namespace: %[1]s}
spec:
  restartPolicy: Never
  containers:
  - name: psql
    image: %[2]s
    imagePullPolicy: Never
    command: ["psql", "-v", "ON_ERROR_STOP=1", "-Atc", "create table t(x text); insert into t values ('%[3]s'), ('b'); select 'rows: ' || string_agg(x, ',' order by x) from t"]
    env:
    - {name: PGHOST, value: "%[4]s.%[1]s.svc"}
    - {name: PGCONNECT_TIMEOUT, value: "10"}
    - {name: PGUSER, valueFrom: {secretKeyRef: {name: %[4]s-credentials, key: username}}}
    - {name: PGPASSWORD, valueFrom: {secretKeyRef: {name: %[4]s-credentials, key: password}}}
    - {name: PGDATABASE, valueFrom: {secretKeyRef: {name: %[4]s-credentials, key: username}}}
`, ns, pgImage, rows, key.Name), "apply", "-f", "-")
		k(6*time.Minute, "", "-n", ns, "wait", "pod/psql", "--for=jsonpath={.status.phase}=Succeeded", "--timeout=5m")
		want := "rows: b," + rows
		if out := k(time.Minute, "", "-n", ns, "logs", "psql"); !strings.Contains(out, want) {
			t.Fatalf("%s: psql through the client Service %s.%s.svc did not read back %q:\n%s", m.Name, key.Name, ns, want, out)
		}
		standby := strings.TrimSpace(k(time.Minute, "", "-n", ns, "get", "pods",
			"-l", "cnpg.io/cluster="+key.Name+",cnpg.io/instanceRole=replica", "-o", "jsonpath={.items[0].metadata.name}"))
		if standby == "" {
			t.Fatalf("%s: no standby pod of %s", m.Name, key.Name)
		}
		// Streaming replication is asynchronous: the standby has the rows
		// once it replayed the primary's commit.
		query := "select pg_is_in_recovery()::text || ' ' || coalesce((select string_agg(x, ',' order by x) from t), '')"
		var got string
		for deadline := time.Now().Add(2 * time.Minute); ; {
			got = strings.TrimSpace(kTry(ctx, f.Kubectl, kc, "-n", ns, "exec", standby, "-c", "postgres", "--",
				"psql", "-Atc", query, strings.TrimSpace(k(time.Minute, "", "-n", ns, "get", "secret", key.Name+"-credentials",
					"-o", "go-template={{.data.username | base64decode}}"))))
			if got == "true b,"+rows {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: the standby %s did not show the rows (want %q): %q", m.Name, standby, "true b,"+rows, got)
			}
			time.Sleep(2 * time.Second)
		}
		t.Logf("%s: rows written through the client Service, read back, and read on the standby %s (%q)", m.Name, standby, got)
		written[m.Name] = "b," + rows
		k(time.Minute, "", "-n", ns, "delete", "pod", "psql", "--wait=false")
	}

	// A steady Database makes no writes: the hub did not write the Clusters'
	// spec again while the rows went in (CloudNativePG's defaulting webhook
	// adds fields to what fleetdb applies; a hub that fought it would bump
	// the generation on every sync).
	for _, m := range f.Members {
		u := member.NewCNPGCluster()
		if err := m.Client.Get(ctx, key, u); err != nil {
			t.Fatal(err)
		}
		if u.GetGeneration() != generations[m.Name] {
			t.Errorf("%s: the Cluster's spec was written again while the Database was steady: generation %d, then %d",
				m.Name, generations[m.Name], u.GetGeneration())
		}
	}
	logMemory(t, "rdbhub", members)

	// The Jobs' side, proven with SQL (jobs_test.go): rotation, an
	// on-demand backup restored into a new Database, Retain and re-create.
	rotateOnRealNodes(ctx, t, f, key, pgImage, written)
	copyKey := backupAndRestoreOnRealNodes(ctx, t, f, key, pgVersion, pgImage, written)
	retainOnRealNodes(ctx, t, f, copyKey, pgVersion, pgImage, written)

	// Deletion: the final backup in each member, then gone from the hub,
	// and CloudNativePG's Cluster, pods and claims gone in both members.
	deleted := time.Now()
	if err := f.Hub.Client.Get(ctx, key, ready); err != nil {
		t.Fatal(err)
	}
	for _, r := range finalBackupRecords(ctx, t, f, ready) {
		if r.Phase != fleetv1alpha1.BackupPhaseSucceeded {
			t.Fatalf("%s: the final backup did not succeed: %+v", r.Cluster, r)
		}
		t.Logf("%s: final backup %s at %s", r.Cluster, r.BackupID, r.Location)
	}
	t.Logf("final backups Succeeded in every member %s after the delete", time.Since(deleted).Round(time.Second))
	e2e.DeleteDatabaseAndWait(ctx, e2e.DeleteDatabaseAndWaitInput{T: t, Fleet: f, Key: key})
	for _, m := range f.Members {
		k := kubectl(ctx, t, f.Kubectl, m.Kubeconfig)
		for deadline := time.Now().Add(f.Intervals.Delete); ; {
			err := m.Client.Get(ctx, key, member.NewCNPGCluster())
			left := strings.TrimSpace(k(time.Minute, "", "-n", ns, "get", "pods,pvc", "-l", "cnpg.io/cluster="+key.Name, "-o", "name"))
			if apierrors.IsNotFound(err) && left == "" {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: after the Database's deletion the Cluster is still there (err %v) or these are: %s", m.Name, err, left)
			}
			time.Sleep(2 * time.Second)
		}
	}
	t.Logf("Database deleted in both members %s after the delete", time.Since(deleted).Round(time.Second))
	expectFinalBackup(ctx, t, f, key, ready.UID, pgImage, written)
	t.Logf("whole test %s", time.Since(start).Round(time.Second))
}

// watchRefusals fails the test, with the webhook's own message, as soon as
// the hub reports that a member refused an object fleetdb wrote at
// admission (CloudNativePG's validating or mutating webhook).
func watchRefusals(ctx context.Context, t *testing.T, f *e2e.Fleet, key types.NamespacedName) {
	t.Helper()
	ctx, cancel := context.WithCancel(ctx)
	t.Cleanup(cancel)
	go func() {
		for ctx.Err() == nil {
			db := &fleetv1alpha1.Database{}
			if err := f.Hub.Client.Get(ctx, key, db); err == nil {
				for _, msg := range statusMessages(db) {
					if strings.Contains(msg, "admission webhook") || strings.Contains(msg, "denied the request") {
						t.Errorf("a member refused an object fleetdb wrote: %s", msg)
						return
					}
				}
			}
			select {
			case <-ctx.Done():
			case <-time.After(time.Second):
			}
		}
	}()
}

func statusMessages(db *fleetv1alpha1.Database) []string {
	var out []string
	for _, c := range db.Status.Conditions {
		out = append(out, c.Message)
	}
	for _, c := range db.Status.Clusters {
		out = append(out, c.Message)
	}
	return out
}

// kubectl returns a function that runs kubectl against one kubeconfig with a
// deadline, stdin from its second argument, and fails the test on an error.
func kubectl(ctx context.Context, t *testing.T, bin, kubeconfig string) func(timeout time.Duration, stdin string, args ...string) string {
	return func(timeout time.Duration, stdin string, args ...string) string {
		t.Helper()
		ctx, cancel := context.WithTimeout(ctx, timeout)
		defer cancel()
		cmd := exec.CommandContext(ctx, bin, append([]string{"--kubeconfig", kubeconfig}, args...)...)
		cmd.Stdin = strings.NewReader(stdin)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("kubectl %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}
}

// kTry runs kubectl with a one-minute deadline and returns its output, or
// the error with it (for a query that is retried).
func kTry(ctx context.Context, bin, kubeconfig string, args ...string) string {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, bin, append([]string{"--kubeconfig", kubeconfig}, args...)...).CombinedOutput()
	if err != nil {
		return fmt.Sprintf("error: %v: %s", err, out)
	}
	return string(out)
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

// logMemory logs what each real node's memory cgroup holds (v1 hierarchy:
// its processes' memory and page cache), with the Database running.
func logMemory(t *testing.T, prefix string, members []string) {
	for _, m := range members {
		b, err := os.ReadFile(filepath.Join("/sys/fs/cgroup/memory", prefix+"-rn-"+m, "memory.usage_in_bytes"))
		if err != nil {
			continue
		}
		var n int64
		if _, err := fmt.Sscan(string(b), &n); err == nil {
			t.Logf("%s's real node: %d MB in its memory cgroup", m, n>>20)
		}
	}
}
