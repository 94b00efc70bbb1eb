package realdb

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/fleetdb/fleetdb/test/repo"
)

// TestPrintedDir is the guard on what the build-and-print scripts' callers
// parse: one line, an absolute path of an existing folder, and nothing else
// (a cold build's progress messages once reached the path, "file name too
// long").
func TestPrintedDir(t *testing.T) {
	dir := t.TempDir()
	if got, err := printedDir(dir + "\n"); err != nil || got != dir {
		t.Errorf("printedDir(one folder) = %q, %v; want %q", got, err, dir)
	}
	for name, out := range map[string]string{
		"progress before the folder": "realnode-images: building ...\n" + dir + "\n",
		"progress after the folder":  dir + "\nrealnode-images: built in 3s\n",
		"nothing":                    "",
		"a relative path":            "cache/tools\n",
		"a missing folder":           dir + "/missing\n",
	} {
		if got, err := printedDir(out); err == nil {
			t.Errorf("%s: printedDir accepted %q as %q", name, out, got)
		}
	}
}

// TestBuildScriptsPrintOneFolder runs the build-and-print scripts as their
// callers do: standard output must be the folder alone, also on the run that
// builds (the real-node images only where real nodes run: they need root).
func TestBuildScriptsPrintOneFolder(t *testing.T) {
	ctx := t.Context()
	scriptDir(ctx, t, 30*time.Minute, "toolchain.sh")
	requireRealNodes(t)
	for _, name := range []string{"realnode-tools.sh", "realnode-images.sh"} {
		scriptDir(ctx, t, 60*time.Minute, name)
	}
}

// toolchainBinaries are the files hack/toolchain.sh builds.
var toolchainBinaries = []string{"etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubectl", "kwok", "kwokctl"}

// TestScriptToolchainRebuildsTamperedCache: root runs what hack/toolchain.sh
// caches, so the script records the hashes of what it built (SHA256SUMS) and
// checks them on every reuse. A copy of the cached folder with one binary
// changed by a byte is reported on standard error and rebuilt, and standard
// output is still the folder alone. The rebuild's `go build` is a stand-in on
// PATH that copies the binaries of the real cache (a real rebuild links for
// minutes on 2 cores); the script itself runs unchanged.
func TestScriptToolchainRebuildsTamperedCache(t *testing.T) {
	ctx := t.Context()
	cached := scriptDir(ctx, t, 30*time.Minute, "toolchain.sh")
	record := readRecord(t, cached)
	if got := slices.Sorted(maps.Keys(record)); !slices.Equal(got, toolchainBinaries) {
		t.Fatalf("%s/SHA256SUMS lists %v, want %v", cached, got, toolchainBinaries)
	}
	for name, sum := range record {
		if got := fileSHA256(t, filepath.Join(cached, name)); got != sum {
			t.Fatalf("cached %s: sha256 %s, recorded %s", name, got, sum)
		}
	}

	parent := t.TempDir()
	dir := filepath.Join(parent, filepath.Base(cached))
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	const tampered = "kubectl"
	for _, name := range append(toolchainBinaries, "SHA256SUMS") {
		src, dst := filepath.Join(cached, name), filepath.Join(dir, name)
		// Hard links (the same file system, no copy of 500 MB) for the
		// files nothing writes; the tampered one is a copy of its own.
		if name == tampered || os.Link(src, dst) != nil {
			copyFile(t, src, dst)
		}
	}
	f, err := os.OpenFile(filepath.Join(dir, tampered), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write([]byte{0}); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}

	fakeBin := t.TempDir()
	fakeGo := `#!/bin/sh
# Stands in for "go build [flags] -o OUT PKG..." in hack/toolchain.sh: puts the
# binary of each package (OUT/ a folder) or OUT (a file) from $FAKE_GO_FROM.
set -eu
[ "$1" = build ] || { echo "fake go: only go build, not $*" >&2; exit 1; }
shift
out= pkgs=
while [ $# -gt 0 ]; do
	case $1 in
	-o) out=$2; shift 2 ;;
	-ldflags | -tags) shift 2 ;;
	-*) shift ;;
	*) pkgs="$pkgs $1"; shift ;;
	esac
done
case $out in
*/) for p in $pkgs; do cp "$FAKE_GO_FROM/${p##*/}" "$out"; done ;;
*) cp "$FAKE_GO_FROM/${out##*/}" "$out" ;;
esac
`
	if err := os.WriteFile(filepath.Join(fakeBin, "go"), []byte(fakeGo), 0o755); err != nil {
		t.Fatal(err)
	}
	run := func() (stdout, stderr string) {
		t.Helper()
		cmd := exec.CommandContext(ctx, filepath.Join(repo.RootT(t), "hack", "toolchain.sh"))
		cmd.Env = append(os.Environ(), "FLEETDB_TOOLS_DIR="+parent,
			"PATH="+fakeBin+string(os.PathListSeparator)+os.Getenv("PATH"), "FAKE_GO_FROM="+cached)
		var out, errOut bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errOut
		if err := cmd.Run(); err != nil {
			t.Fatalf("hack/toolchain.sh on a tampered cache: %v\nstdout:\n%s\nstderr:\n%s", err, out.String(), errOut.String())
		}
		got, err := printedDir(out.String())
		if err != nil {
			t.Fatalf("hack/toolchain.sh on a tampered cache: %v\nstderr:\n%s", err, errOut.String())
		}
		if got != dir {
			t.Fatalf("hack/toolchain.sh printed %s, want %s", got, dir)
		}
		return out.String(), errOut.String()
	}

	_, stderr := run()
	if want := "toolchain: cached " + dir + " does not match the hashes recorded when it was built: rebuilding"; !strings.Contains(stderr, want) {
		t.Errorf("stderr does not say %q:\n%s", want, stderr)
	}
	if got := readRecord(t, dir); !maps.Equal(got, record) {
		t.Errorf("rebuilt %s/SHA256SUMS = %v, want the record of the real cache %v", dir, got, record)
	}
	if got := fileSHA256(t, filepath.Join(dir, tampered)); got != record[tampered] {
		t.Errorf("%s after the rebuild: sha256 %s, want %s", tampered, got, record[tampered])
	}
	entries, err := os.ReadDir(parent)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if e.Name() != filepath.Base(dir) && e.Name() != ".lock" {
			t.Errorf("the rebuild left %s in the tools folder", e.Name())
		}
	}

	// Rebuilt, the folder is trusted again: nothing to say, nothing to build.
	if _, stderr := run(); stderr != "" {
		t.Errorf("hack/toolchain.sh on the rebuilt folder wrote to stderr:\n%s", stderr)
	}
}

// TestToolCacheRecord checks hack/lib/toolcache.sh, the hashes record of a
// cached tools folder that hack/toolchain.sh, hack/realnode-tools.sh and
// hack/realnode-images.sh share: a folder without a record, or whose files
// differ from it in any way (a changed, missing, added or linked file), is
// not trusted, and toolcache_remove removes nothing but a folder named in
// the tools parent.
func TestToolCacheRecord(t *testing.T) {
	lib := filepath.Join(repo.RootT(t), "hack", "lib", "toolcache.sh")
	// sh runs a bash snippet with the library sourced and returns its exit
	// code and standard error.
	sh := func(snippet string, args ...string) (int, string) {
		t.Helper()
		cmd := exec.CommandContext(t.Context(), "bash", append([]string{"-c", "set -euo pipefail; . \"$0\"; " + snippet, lib}, args...)...)
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		err := cmd.Run()
		if stdout.Len() > 0 {
			t.Errorf("%s wrote to stdout (the scripts' stdout is their folder alone): %q", snippet, stdout.String())
		}
		var exit *exec.ExitError
		switch {
		case err == nil:
			return 0, stderr.String()
		case errors.As(err, &exit):
			return exit.ExitCode(), stderr.String()
		}
		t.Fatalf("%s: %v", snippet, err)
		return 0, ""
	}
	verify := func(dir string) int {
		t.Helper()
		rc, _ := sh(`toolcache_verify "$1" || exit $?`, dir)
		return rc
	}
	write := func(path, content string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(content), 0o755); err != nil {
			t.Fatal(err)
		}
	}

	parent := t.TempDir()
	dir := filepath.Join(parent, "realnode-v0.0.0-0123456789ab")
	files := map[string]string{"kubelet": "a kubelet", "coredns-image": "fleetdb.local/coredns:1\n", "images/pause.tar": "a pause image"}
	for name, content := range files {
		write(filepath.Join(dir, name), content)
	}

	if rc := verify(dir); rc != 2 {
		t.Errorf("toolcache_verify without a record: exit %d, want 2", rc)
	}
	if rc, stderr := sh(`toolcache_trusted toolchain "$1" || exit $?`, dir); rc != 1 ||
		!strings.Contains(stderr, "toolchain: cached "+dir+" has no record of the hashes of its files") {
		t.Errorf("toolcache_trusted without a record: exit %d, stderr %q", rc, stderr)
	}
	if rc, stderr := sh(`toolcache_seal "$1"`, dir); rc != 0 {
		t.Fatalf("toolcache_seal: exit %d: %s", rc, stderr)
	}
	want := map[string]string{}
	for name, content := range files {
		sum := sha256.Sum256([]byte(content))
		want[name] = hex.EncodeToString(sum[:])
	}
	if got := readRecord(t, dir); !maps.Equal(got, want) {
		t.Errorf("the record lists %v, want %v", got, want)
	}
	if _, err := exec.LookPath("sha256sum"); err == nil {
		cmd := exec.CommandContext(t.Context(), "sha256sum", "--check", "--strict", "--quiet", "SHA256SUMS")
		cmd.Dir = dir
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("sha256sum --check SHA256SUMS: %v\n%s", err, out)
		}
	}
	if rc := verify(dir); rc != 0 {
		t.Fatalf("toolcache_verify on the folder it sealed: exit %d", rc)
	}
	if rc, stderr := sh(`toolcache_trusted toolchain "$1"`, dir); rc != 0 || stderr != "" {
		t.Errorf("toolcache_trusted on the folder it sealed: exit %d, stderr %q", rc, stderr)
	}

	for _, c := range []struct {
		name         string
		change, undo func(t *testing.T)
	}{
		{"a byte appended to a binary",
			func(t *testing.T) { write(filepath.Join(dir, "kubelet"), files["kubelet"]+"\x00") },
			func(t *testing.T) { write(filepath.Join(dir, "kubelet"), files["kubelet"]) }},
		{"a binary rewritten to the same size and modification time (after a check left its stamp)",
			func(t *testing.T) {
				path := filepath.Join(dir, "kubelet")
				fi, err := os.Stat(path)
				if err != nil {
					t.Fatal(err)
				}
				write(path, strings.ToUpper(files["kubelet"]))
				if err := os.Chtimes(path, fi.ModTime(), fi.ModTime()); err != nil {
					t.Fatal(err)
				}
			},
			func(t *testing.T) { write(filepath.Join(dir, "kubelet"), files["kubelet"]) }},
		{"a changed image",
			func(t *testing.T) { write(filepath.Join(dir, "images/pause.tar"), "another image") },
			func(t *testing.T) { write(filepath.Join(dir, "images/pause.tar"), files["images/pause.tar"]) }},
		{"a missing file",
			func(t *testing.T) { remove(t, filepath.Join(dir, "coredns-image")) },
			func(t *testing.T) { write(filepath.Join(dir, "coredns-image"), files["coredns-image"]) }},
		{"an added image",
			func(t *testing.T) { write(filepath.Join(dir, "images/extra.tar"), "x") },
			func(t *testing.T) { remove(t, filepath.Join(dir, "images/extra.tar")) }},
		{"a binary replaced by a link to the same bytes",
			func(t *testing.T) {
				write(filepath.Join(parent, "elsewhere"), files["kubelet"])
				remove(t, filepath.Join(dir, "kubelet"))
				if err := os.Symlink(filepath.Join(parent, "elsewhere"), filepath.Join(dir, "kubelet")); err != nil {
					t.Fatal(err)
				}
			},
			func(t *testing.T) {
				remove(t, filepath.Join(dir, "kubelet"))
				write(filepath.Join(dir, "kubelet"), files["kubelet"])
			}},
		{"a changed record",
			func(t *testing.T) {
				write(filepath.Join(dir, "SHA256SUMS"), strings.Replace(readFile(t, filepath.Join(dir, "SHA256SUMS")), " *kubelet", " *kube-proxy", 1)+"\n")
			},
			func(t *testing.T) { sh(`toolcache_seal "$1"`, dir) }},
	} {
		c.change(t)
		if rc := verify(dir); rc != 1 {
			t.Errorf("%s: toolcache_verify exit %d, want 1", c.name, rc)
		}
		if rc, stderr := sh(`toolcache_trusted toolchain "$1" || exit $?`, dir); rc != 1 ||
			!strings.Contains(stderr, "toolchain: cached "+dir+" does not match the hashes recorded when it was built: rebuilding") {
			t.Errorf("%s: toolcache_trusted exit %d, stderr %q", c.name, rc, stderr)
		}
		c.undo(t)
		if rc := verify(dir); rc != 0 {
			t.Fatalf("%s undone: toolcache_verify exit %d, want 0", c.name, rc)
		}
	}
	remove(t, filepath.Join(dir, "SHA256SUMS"))
	if rc := verify(dir); rc != 2 {
		t.Errorf("toolcache_verify with the record removed: exit %d, want 2", rc)
	}

	// toolcache_remove: only a folder named directly in the tools parent.
	// The victims are folders of this test's own.
	outside := t.TempDir()
	write(filepath.Join(outside, "keep"), "keep")
	sibling := filepath.Join(parent, "..", filepath.Base(outside))
	for _, path := range []string{outside, sibling, filepath.Join(parent, "x", "..", "..", filepath.Base(outside)),
		parent, parent + "/", parent + "/.", parent + "/..", filepath.Join(dir, "images")} {
		if rc, _ := sh(`toolcache_remove "$1" "$2" || exit $?`, parent, path); rc == 0 {
			t.Errorf("toolcache_remove %s %s succeeded", parent, path)
		}
	}
	if rc, _ := sh(`toolcache_remove "" "$1" || exit $?`, outside); rc == 0 {
		t.Errorf("toolcache_remove with no parent succeeded")
	}
	for _, path := range []string{filepath.Join(outside, "keep"), filepath.Join(dir, "images", "pause.tar"), dir} {
		if _, err := os.Stat(path); err != nil {
			t.Errorf("toolcache_remove removed what it refused to: %v", err)
		}
	}
	tmp := dir + ".tmp.123"
	write(filepath.Join(tmp, "kubelet"), "half built")
	for _, path := range []string{tmp, dir} {
		if rc, stderr := sh(`toolcache_remove "$1" "$2"`, parent, path); rc != 0 {
			t.Errorf("toolcache_remove %s: exit %d: %s", path, rc, stderr)
		}
		if _, err := os.Lstat(path); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("toolcache_remove %s left it: %v", path, err)
		}
	}
}

// readRecord reads folder dir's SHA256SUMS: file name to hash.
func readRecord(t *testing.T, dir string) map[string]string {
	t.Helper()
	record := map[string]string{}
	for _, line := range strings.Split(readFile(t, filepath.Join(dir, "SHA256SUMS")), "\n") {
		sum, name, ok := strings.Cut(line, " *")
		if !ok || len(sum) != 64 {
			t.Fatalf("%s/SHA256SUMS: line %q is not sha256sum's binary format", dir, line)
		}
		record[name] = sum
	}
	return record
}

func fileSHA256(t *testing.T, path string) string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(h.Sum(nil))
}

func copyFile(t *testing.T, src, dst string) {
	t.Helper()
	in, err := os.Open(src)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	fi, err := in.Stat()
	if err != nil {
		t.Fatal(err)
	}
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_EXCL|os.O_WRONLY, fi.Mode().Perm())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(out, in); err != nil {
		t.Fatal(err)
	}
	if err := out.Close(); err != nil {
		t.Fatal(err)
	}
}

func remove(t *testing.T, path string) {
	t.Helper()
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
}
