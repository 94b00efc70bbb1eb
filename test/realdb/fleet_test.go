package realdb

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/fleetdb/fleetdb/test/e2e"
	"github.com/fleetdb/fleetdb/test/localfleet"
	"github.com/fleetdb/fleetdb/test/repo"
)

// realNet is a real-node fleet's own prefix, bridge and address ranges: two
// fleets on one host (a test's, `make run NODES=real`'s) must not share them.
type realNet struct {
	prefix, bridge, nodeNet, podNet, serviceNet string
}

// realFleet is a local fleet with two real-node members and the real
// CloudNativePG operator (hack/fleet.sh with FLEET_NODES=real), the hub
// binary built beside it (not started), and the PostgreSQL image's name and
// version from hack/realnode-images.sh.
type realFleet struct {
	lf        *localfleet.Fleet
	f         *e2e.Fleet
	work      string
	hubBinary string
	pgVersion string
	pgImage   string
}

// startRealFleet brings the fleet up. Its cleanup runs beforeDown (if any:
// what the test changed on the host, put back), then `hack/fleet.sh down`
// and `hack/realnode.sh check`, which fails the test on anything of the
// real nodes left on the host (processes, namespaces, links, routes,
// cgroups, mounts, iptables rules, state), and on a host folder a kubelet or
// containerd writes by default (hostPaths) changed.
func startRealFleet(ctx context.Context, t *testing.T, n realNet, beforeDown func()) *realFleet {
	t.Helper()
	root := repo.RootT(t)
	start := time.Now()
	r := &realFleet{work: t.TempDir()}
	images := scriptDir(ctx, t, 60*time.Minute, "realnode-images.sh")
	r.pgVersion = readFile(t, filepath.Join(images, "postgresql-version"))
	r.pgImage = readFile(t, filepath.Join(images, "postgresql-image"))
	env := []string{
		"FLEET_NODES=real",
		"REALNODE_BRIDGE=" + n.bridge,
		"REALNODE_NODE_NET=" + n.nodeNet,
		"REALNODE_POD_NET=" + n.podNet,
		"REALNODE_SERVICE_NET=" + n.serviceNet,
	}
	opts := localfleet.Options{RepoRoot: root, Dir: filepath.Join(r.work, "fleet"), Prefix: n.prefix, Members: 2, ExtraEnv: env}
	log, err := os.Create(filepath.Join(r.work, "fleet.log"))
	if err != nil {
		t.Fatal(err)
	}
	opts.Log = log
	allEnv := opts.Env()
	hostBefore := snapshotHostPaths(t)
	t.Cleanup(func() {
		// Cleanups run after the test's context is cancelled.
		ctx := context.Background()
		if beforeDown != nil {
			beforeDown()
		}
		down := time.Now()
		script(ctx, t, allEnv, 5*time.Minute, "fleet.sh", "down")
		t.Logf("hack/fleet.sh down: %s", time.Since(down).Round(time.Second))
		script(ctx, t, allEnv, time.Minute, "realnode.sh", "check")
		requireHostPathsUnchanged(t, hostBefore, "after hack/fleet.sh down")
		if t.Failed() {
			t.Logf("hack/fleet.sh's output:\n%s", localfleet.TailFile(log.Name(), 16<<10))
		}
		_ = log.Close()
	})

	r.hubBinary = filepath.Join(r.work, "fleetdb-hub")
	built := make(chan error, 1)
	go func() { built <- localfleet.BuildHub(ctx, root, r.hubBinary, nil) }()
	if r.lf, err = localfleet.Start(ctx, opts); err != nil {
		t.Fatalf("the real-node fleet did not come up: %v\n%s", err, localfleet.TailFile(log.Name(), 16<<10))
	}
	t.Logf("fleet with 2 real-node members and the real CloudNativePG operator up in %s", time.Since(start).Round(time.Second))
	if err := <-built; err != nil {
		t.Fatal(err)
	}

	r.f = &e2e.Fleet{Kubectl: filepath.Join(r.lf.ToolsDir, "kubectl"), Intervals: e2e.DefaultIntervals()}
	// Real pods: initdb, a standby's clone and real probes take minutes on
	// a loaded 2-core machine.
	r.f.Intervals.Ready, r.f.Intervals.Delete, r.f.Intervals.Poll = 15*time.Minute, 10*time.Minute, time.Second
	if r.f.Hub, err = e2e.NewCluster("hub", r.lf.HubKubeconfig); err != nil {
		t.Fatal(err)
	}
	for _, m := range r.lf.MemberKubeconfigs {
		c, err := e2e.NewCluster(m.Name, m.Path)
		if err != nil {
			t.Fatal(err)
		}
		r.f.Members = append(r.f.Members, c)
	}
	return r
}
