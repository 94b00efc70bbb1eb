// Package sharding runs the sharded hub's failover test (e2e.ShardingSpec)
// on a local fleet of its own: three hub replicas with --sharding and
// FLEETDB_SHARDING_MEMBERS kwok members (default 3, the size `make test`
// runs; docs/sharding.md gives the 9-member command).
package sharding

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	fleetv1alpha1 "github.com/fleetdb/fleetdb/apis/v1alpha1"
	"github.com/fleetdb/fleetdb/test/e2e"
	"github.com/fleetdb/fleetdb/test/fleet"
	"github.com/fleetdb/fleetdb/test/localfleet"
)

// replicas are the sharded hub's replicas.
var replicas = []string{"hub-0", "hub-1", "hub-2"}

func TestSharding(t *testing.T) {
	switch {
	case testing.Short():
		t.Skip("-short: the sharding test runs a local fleet")
	case os.Getenv("FLEETDB_E2E") == "0":
		t.Skip("FLEETDB_E2E=0: the sharding test runs a local fleet")
	}
	members := 3
	if v := os.Getenv("FLEETDB_SHARDING_MEMBERS"); v != "" {
		var err error
		if members, err = strconv.Atoi(v); err != nil || members < 2 {
			t.Fatalf("FLEETDB_SHARDING_MEMBERS=%q: want a number ≥ 2", v)
		}
	}
	prefix := os.Getenv("FLEETDB_SHARDING_FLEET_PREFIX")
	if prefix == "" {
		prefix = "fleetdb-sharding"
	}
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Minute)
	defer cancel()
	start := time.Now()
	f, hubs, local := startFleet(ctx, t, members, prefix, replicas, "--sharding")
	up := time.Since(start)
	e2e.ShardingSpec(ctx, e2e.ShardingInput{T: t, Fleet: f, Hubs: hubs, AuditLog: local.AuditLog})
	if bad := e2e.ForbiddenLines(hubs); len(bad) > 0 {
		t.Errorf("the hub's identity was refused on the hub (deploy/rbac lacks a permission):\n%s", strings.Join(bad, "\n"))
	}
	t.Logf("sharding: %d members: fleet and hubs up in %s, spec %s", members, up.Round(time.Second), (time.Since(start) - up).Round(time.Second))
}

// TestFailoverFleet runs the unsharded hub's fail-over (e2e.FailoverSpec:
// two replicas with --leader-elect, the leader killed mid fan-out, the warm
// standby's takeover checked from the audit logs) on a fleet of
// FLEETDB_FAILOVER_MEMBERS kwok members, to measure the takeover on a
// bigger fleet than the e2e suite's three (docs/hub-replicas.md). It runs
// only when that is set: `make test` runs the spec in the e2e suite.
func TestFailoverFleet(t *testing.T) {
	v := os.Getenv("FLEETDB_FAILOVER_MEMBERS")
	if v == "" {
		t.Skip("FLEETDB_FAILOVER_MEMBERS unset: the e2e suite runs the fail-over on its 3 members")
	}
	members, err := strconv.Atoi(v)
	if err != nil || members < 3 {
		t.Fatalf("FLEETDB_FAILOVER_MEMBERS=%q: want a number ≥ 3", v)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Minute)
	defer cancel()
	start := time.Now()
	f, hubs, local := startFleet(ctx, t, members, "fleetdb-failover", replicas[:2])
	up := time.Since(start)
	e2e.FailoverSpec(ctx, e2e.FailoverInput{T: t, Fleet: f, Hubs: hubs, AuditLog: local.AuditLog, Databases: 20})
	t.Logf("failover: %d members: fleet and hubs up in %s, spec %s", members, up.Round(time.Second), (time.Since(start) - up).Round(time.Second))
}

// startFleet brings a local fleet with audit logs up, and the hub replicas
// (with --leader-elect, and args); the test's cleanups tear both down.
func startFleet(ctx context.Context, t *testing.T, members int, prefix string, replicas []string, args ...string) (*e2e.Fleet, *localfleet.HubSet, *localfleet.Fleet) {
	t.Helper()
	root := fleet.RepoRoot()
	work, err := os.MkdirTemp("", "fleetdb-sharding-")
	if err != nil {
		t.Fatal(err)
	}
	hubBinary := filepath.Join(work, "fleetdb-hub")
	built := make(chan error, 1)
	go func() { built <- localfleet.BuildHub(ctx, root, hubBinary, nil) }()

	dir := filepath.Join(work, "fleet")
	env, files := e2e.AuditFleetOptions(dir)
	opts := localfleet.Options{
		RepoRoot: root, Dir: dir, Prefix: prefix, Members: members, Attempts: 3, Files: files,
		// As the e2e suite: no node leases (see its setUp).
		ExtraEnv: append(env, "FLEET_KWOKCTL_ARGS=--node-lease-duration-seconds=0"),
	}
	watchdog, err := e2e.StartWatchdog(filepath.Join(root, "hack", "fleet.sh")+" down", work, filepath.Join(work, "watchdog.log"), opts.Env())
	if err != nil {
		t.Fatal(err)
	}
	fleetLog, err := os.Create(filepath.Join(work, "fleet.log"))
	if err != nil {
		t.Fatal(err)
	}
	opts.Log = fleetLog
	var hubs *localfleet.HubSet
	local, err := localfleet.Start(ctx, opts)
	t.Cleanup(func() {
		hubs.Stop()
		if t.Failed() && hubs != nil {
			for _, l := range hubs.Logs() {
				t.Logf("---- hub log %s ----\n%s", l, localfleet.TailFile(l, 64<<10))
			}
		}
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		if err := local.Stop(sctx); err != nil {
			t.Logf("tearing the fleet down: %v", err)
		}
		watchdog.Release()
		_ = fleetLog.Close()
		if !t.Failed() && os.Getenv("FLEETDB_SHARDING_KEEP") == "" {
			_ = os.RemoveAll(work)
		} else {
			t.Logf("logs kept in %s", work)
		}
	})
	if err != nil {
		t.Fatalf("local fleet: %v", err)
	}
	f := &e2e.Fleet{Kubectl: filepath.Join(local.ToolsDir, "kubectl"), Intervals: e2e.DefaultIntervals()}
	if f.Hub, err = e2e.NewCluster("hub", local.HubKubeconfig); err != nil {
		t.Fatal(err)
	}
	for _, m := range local.MemberKubeconfigs {
		c, err := e2e.NewCluster(m.Name, m.Path)
		if err != nil {
			t.Fatal(err)
		}
		f.Members = append(f.Members, c)
	}
	if err := <-built; err != nil {
		t.Fatal(err)
	}
	hubs = localfleet.NewHubSet(localfleet.HubOptions{
		Binary: hubBinary, Kubeconfig: local.HubIdentityKubeconfig,
		Args: append(args, "--probe-interval", "1s", "--probe-grace-period", "3s"),
	}, work, func(p *localfleet.HubProcess) { watchdog.Track(p.Pid()) })
	for _, name := range replicas {
		if _, err := hubs.Start(name); err != nil {
			t.Fatal(err)
		}
	}
	waitForMembersReady(ctx, t, f, hubs)
	return f, hubs, local
}

func waitForMembersReady(ctx context.Context, t *testing.T, f *e2e.Fleet, hubs *localfleet.HubSet) {
	t.Helper()
	deadline := time.Now().Add(3 * time.Minute)
	for {
		var notReady []string
		for _, m := range f.Members {
			mc := &fleetv1alpha1.MemberCluster{}
			if err := f.Hub.Client.Get(ctx, types.NamespacedName{Name: m.Name}, mc); err != nil {
				notReady = append(notReady, fmt.Sprintf("%s (%v)", m.Name, err))
				continue
			}
			if c := e2e.Condition(mc.Status.Conditions, fleetv1alpha1.MemberConditionReady); c.Status != metav1.ConditionTrue {
				notReady = append(notReady, fmt.Sprintf("%s (Ready=%q %s)", m.Name, c.Status, c.Reason))
			}
		}
		if len(notReady) == 0 {
			return
		}
		if name, err := hubs.Exited(); name != "" {
			t.Fatalf("hub replica %s exited (%v):\n%s", name, err, localfleet.TailFile(hubs.Replica(name).LogPath, 8<<10))
		}
		if time.Now().After(deadline) {
			t.Fatalf("MemberClusters not Ready: %s", strings.Join(notReady, "; "))
		}
		select {
		case <-ctx.Done():
			t.Fatal(ctx.Err())
		case <-time.After(500 * time.Millisecond):
		}
	}
}
