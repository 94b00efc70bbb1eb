package realdb

import (
	"context"
	"crypto/tls"
	"errors"
	"io/fs"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fleetdb/fleetdb/test/repo"
)

// ip runs the ip command and fails the test when it fails.
func ip(t *testing.T, args ...string) {
	t.Helper()
	if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
		t.Fatalf("ip %s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

// linkExists and routeExists read the host's network.
func linkExists(name string) bool { return exec.Command("ip", "link", "show", name).Run() == nil }

func routeExists(t *testing.T, prefix string) bool {
	t.Helper()
	out, err := exec.Command("ip", "route", "show", "exact", prefix).CombinedOutput()
	if err != nil {
		t.Fatalf("ip route show exact %s: %v\n%s", prefix, err, out)
	}
	return strings.TrimSpace(string(out)) != ""
}

// TestRealNodeLeavesWhatItDidNotMake gives the harness a host that already
// has what a real node of its fleet would make — a bridge of its name, a route
// to a member's pod range, a network namespace of its prefix that another
// checkout's node holds — and checks that hack/realnode.sh's down and
// down-all leave every one of them, and refuse to take down the other
// checkout's node.
func TestRealNodeLeavesWhatItDidNotMake(t *testing.T) {
	requireRealNodes(t)
	ctx := t.Context()
	const (
		bridge = "fdbfor0"
		route  = "10.234.1.0/24" // member-1's pod range with REALNODE_POD_NET=10.234
		other  = "rdbfor-rn-member-2"
	)
	env := []string{
		"FLEET_DIR=" + filepath.Join(t.TempDir(), "fleet"),
		"FLEET_PREFIX=rdbfor",
		"REALNODE_BRIDGE=" + bridge,
		"REALNODE_NODE_NET=10.233",
		"REALNODE_POD_NET=10.234",
		"REALNODE_SERVICE_NET=10.235",
	}
	if linkExists(bridge) {
		t.Fatalf("the host already has a link %s: this test makes its own", bridge)
	}
	ip(t, "link", "add", bridge, "type", "bridge")
	t.Cleanup(func() { _ = exec.Command("ip", "link", "del", bridge).Run() })
	ip(t, "link", "set", bridge, "up")
	ip(t, "route", "add", route, "dev", bridge)
	ip(t, "netns", "add", other)
	t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", other).Run() })

	script(ctx, t, env, time.Minute, "realnode.sh", "down", "member-1")
	if !routeExists(t, route) {
		t.Errorf("hack/realnode.sh down member-1 deleted the host's route to %s, which it did not add", route)
	}
	cmd := exec.CommandContext(ctx, filepath.Join(repo.RootT(t), "hack", "realnode.sh"), "down", "member-2")
	cmd.Env = append(os.Environ(), env...)
	if out, err := cmd.CombinedOutput(); err == nil || !strings.Contains(string(out), "not this fleet's") {
		t.Errorf("hack/realnode.sh down member-2 on another fleet's node: want a refusal, got %v:\n%s", err, out)
	}
	script(ctx, t, env, time.Minute, "realnode.sh", "down-all")
	if !linkExists(bridge) {
		t.Errorf("hack/realnode.sh down-all deleted the bridge %s, which it did not make", bridge)
	}
	if !routeExists(t, route) {
		t.Errorf("hack/realnode.sh down-all deleted the host's route to %s, which it did not add", route)
	}
	if err := exec.Command("ip", "netns", "exec", other, "true").Run(); err != nil {
		t.Errorf("hack/realnode.sh down-all took down %s, another fleet's node: %v", other, err)
	}
}

// requirePrivate checks that the fleet folder is the owner's alone and that
// no kubeconfig or key under it can be read by another user.
func requirePrivate(t *testing.T, fleetDir string) {
	t.Helper()
	fi, err := os.Stat(fleetDir)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm()&0o077 != 0 {
		t.Errorf("%s is mode %o: others can enter the folder of the fleet's admin credentials", fleetDir, fi.Mode().Perm())
	}
	err = filepath.WalkDir(fleetDir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		name := d.Name()
		if !strings.Contains(name, "kubeconfig") && !strings.HasSuffix(name, ".key") {
			return nil
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		if info.Mode().Perm()&0o077 != 0 {
			t.Errorf("%s is mode %o, want no access for group and others", path, info.Mode().Perm())
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// requireKubeletRefusesAnonymous sends the kubelet at addr a request with no
// credentials, from the host, and wants 401.
func requireKubeletRefusesAnonymous(ctx context.Context, t *testing.T, addr string) {
	t.Helper()
	c := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		// The kubelet's serving certificate is self-signed; what is checked
		// here is what it answers a client without credentials.
		TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, //nolint:gosec // see above
	}}
	for _, path := range []string{"/pods", "/runningpods/", "/exec/default/psql/psql?command=id"} {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, "https://"+addr+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := c.Do(req)
		if err != nil {
			t.Fatalf("GET https://%s%s: %v", addr, path, err)
		}
		_ = resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized {
			t.Errorf("the kubelet answered an anonymous GET %s with %s, want 401 Unauthorized", path, resp.Status)
		}
	}
}

// hostPaths are the host folders a kubelet and containerd write to by
// default; a real node must leave them as they were.
var hostPaths = []string{"/opt/containerd", "/usr/libexec/kubernetes", "/var/log/containers"}

// snapshotHostPaths records, for each of hostPaths, its entries (nil when it
// does not exist).
func snapshotHostPaths(t *testing.T) map[string][]string {
	t.Helper()
	snap := map[string][]string{}
	for _, p := range hostPaths {
		entries, err := os.ReadDir(p)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		names := []string{}
		for _, e := range entries {
			names = append(names, e.Name())
		}
		snap[p] = names
	}
	return snap
}

// requireHostPathsUnchanged compares hostPaths with a snapshot.
func requireHostPathsUnchanged(t *testing.T, before map[string][]string, when string) {
	t.Helper()
	now := snapshotHostPaths(t)
	for _, p := range hostPaths {
		b, hadIt := before[p]
		n, hasIt := now[p]
		switch {
		case hasIt && !hadIt:
			t.Errorf("%s: the real node made %s on the host (entries %v)", when, p, n)
		case hadIt && !hasIt:
			t.Errorf("%s: %s, which was on the host, is gone", when, p)
		case strings.Join(b, "\n") != strings.Join(n, "\n"):
			t.Errorf("%s: %s held %v before the real node, now %v", when, p, b, n)
		}
	}
}

// plantVolumeVictims gives the member PersistentVolumes whose host paths
// reach beyond a volume's own folder below /tmp/hostpath_pv — the folder
// itself, with a trailing slash (the API refuses "..", not that), and a path
// through a symbolic link to a folder elsewhere — and returns a check that
// the folders they reach still hold what they held. apply applies a manifest
// in the member.
func plantVolumeVictims(t *testing.T, apply func(manifest string)) (check func()) {
	t.Helper()
	const root = "/tmp/hostpath_pv"
	if err := os.MkdirAll(root, 0o750); err != nil {
		t.Fatal(err)
	}
	inside, err := os.MkdirTemp(root, "fleetdb-victim-")
	if err != nil {
		t.Fatal(err)
	}
	outside := t.TempDir()
	link := inside + "-link"
	if err := os.Symlink(outside, link); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(inside); _ = os.Remove(link) })
	keep := []string{filepath.Join(inside, "keep"), filepath.Join(outside, "sub", "keep")}
	for _, f := range keep {
		if err := os.MkdirAll(filepath.Dir(f), 0o750); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(f, []byte("keep"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	for i, p := range []string{root + "//", link + "/sub"} {
		apply(`apiVersion: v1
kind: PersistentVolume
metadata: {name: victim-` + string(rune('a'+i)) + `}
spec:
  capacity: {storage: 1Mi}
  accessModes: [ReadWriteOnce]
  persistentVolumeReclaimPolicy: Retain
  hostPath: {path: "` + p + `"}
`)
	}
	return func() {
		t.Helper()
		for _, f := range keep {
			if _, err := os.Stat(f); err != nil {
				t.Errorf("hack/fleet.sh down removed %s, which no volume of the fleet held: %v", f, err)
			}
		}
	}
}
