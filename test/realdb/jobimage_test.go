package realdb

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	fleetv1alpha1 "github.com/fleetdb/fleetdb/apis/v1alpha1"
	"github.com/fleetdb/fleetdb/member"
)

// TestJobImageRunsTheBackupAndRestoreScripts runs fleetdb's postgres backup
// and restore scripts (member.BackupScript, member.RestoreScript: what the
// backup and restore Jobs run on the CloudNativePG backend, in its operand
// image) inside the PostgreSQL image hack/realnode-images.sh builds for real
// nodes, chrooted as its uid 26, against PostgreSQL started from the same
// image on loopback: the backup of an application user's database succeeds
// and restores into another user's database (a user without CREATEDB, like
// CloudNativePG's app user) with its rows. It needs no fleet: seconds, where
// the same fault on a real node shows only after a Database was deleted.
// (Before the image held coreutils, sed and grep, the backup failed at its
// first step, "prepare": mktemp was not found.)
func TestJobImageRunsTheBackupAndRestoreScripts(t *testing.T) {
	requireRealNodes(t)
	ctx := t.Context()
	images := scriptDir(ctx, t, 60*time.Minute, "realnode-images.sh")
	major := readFile(t, filepath.Join(images, "postgresql-major"))
	rootfs := filepath.Join(t.TempDir(), "rootfs")
	unpackImage(ctx, t, filepath.Join(images, "postgresql.tar"), rootfs)
	for _, c := range [][]string{
		{"install", "-d", "-m", "0755", filepath.Join(rootfs, "dev")},
		{"mknod", "-m", "666", filepath.Join(rootfs, "dev/null"), "c", "1", "3"},
		{"install", "-d", "-m", "0777", filepath.Join(rootfs, "backups")},
		{"install", "-d", "-o", "26", "-g", "26", "-m", "0700", filepath.Join(rootfs, "data")},
	} {
		if out, err := exec.CommandContext(ctx, c[0], c[1:]...).CombinedOutput(); err != nil {
			t.Fatalf("%v: %v\n%s", c, err, out)
		}
	}
	// Both listen on loopback only, trust authentication: the point is the
	// image's tools, not passwords.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := fmt.Sprint(l.Addr().(*net.TCPAddr).Port)
	_ = l.Close()
	path := "PATH=/usr/bin:/bin:/usr/lib/postgresql/" + major + "/bin"
	run := func(script string, env ...string) (string, error) {
		ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, "chroot", "--userspec=26:26", rootfs, "/bin/sh", "-c", script)
		cmd.Env = append([]string{path, "HOME=/tmp"}, env...)
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	must := func(script string, env ...string) string {
		t.Helper()
		out, err := run(script, env...)
		if err != nil {
			t.Fatalf("%s: %v\n%s", script, err, out)
		}
		return out
	}
	must("initdb -D /data/pg -U postgres --auth=trust -E UTF8 --no-locale >/dev/null")
	must(fmt.Sprintf(`pg_ctl -D /data/pg -l /data/log -w -o "-c listen_addresses=127.0.0.1 -p %s -c unix_socket_directories=/tmp" start >/dev/null`, port))
	t.Cleanup(func() { _, _ = run("pg_ctl -D /data/pg -m immediate stop") })
	psql := fmt.Sprintf("psql -X -w -v ON_ERROR_STOP=1 -h 127.0.0.1 -p %s -Atq", port)
	must(psql + ` -U postgres -d postgres -c "create role app login" -c "create database app owner app"`)
	must(psql + ` -U app -d app -c "create table t(x text)" -c "insert into t values ('a'), ('b')"`)

	backup, err := member.BackupScript(fleetv1alpha1.EnginePostgres)
	if err != nil {
		t.Fatal(err)
	}
	out, err := run(backup, "BACKUP_ROOT=/backups", "DB_NAMESPACE=team-a", "DB_NAME=orders", "BACKUP_ID=final-1",
		"RESULT_FILE=/backups/result", "DB_HOST=127.0.0.1", "DB_PORT="+port, "PGUSER=app", "PGPASSWORD=unused")
	res, perr := member.ParseBackupResult(readFile(t, filepath.Join(rootfs, "backups/result")))
	if err != nil || perr != nil || res.Phase != fleetv1alpha1.BackupPhaseSucceeded {
		t.Fatalf("the backup script in the image: %v, result %+v (%v)\n%s", err, res, perr, out)
	}
	// The restore goes to a server without the source's database: app2,
	// who may not create one, gets it in its own database.
	// (Created now: the backup would have dumped app2's database too.)
	must(psql + ` -U postgres -d postgres -c "drop database app" -c "create role app2 login" -c "create database app2 owner app2"`)
	restore, err := member.RestoreScript(fleetv1alpha1.EnginePostgres)
	if err != nil {
		t.Fatal(err)
	}
	out, err = run(restore, "BACKUP_DIR=/backups/team-a/orders/final-1", "RESULT_FILE=/tmp/restore-result",
		"DB_HOST=127.0.0.1", "DB_PORT="+port, "PGUSER=app2", "PGPASSWORD=unused")
	if err != nil || !strings.Contains(out, `"phase":"Succeeded"`) {
		t.Fatalf("the restore script in the image: %v\n%s", err, out)
	}
	if got := strings.TrimSpace(must(psql + ` -U app2 -d app2 -c "select string_agg(x, ',' order by x) from t"`)); got != "a,b" {
		t.Fatalf("the restored database holds %q, want a,b", got)
	}
}

// unpackImage unpacks the layers of a one-image OCI layout archive (what
// test/tools/ociimage writes) into dir.
func unpackImage(ctx context.Context, t *testing.T, archive, dir string) {
	t.Helper()
	layout := filepath.Join(t.TempDir(), "layout")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(layout, 0o755); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.CommandContext(ctx, "tar", "-xf", archive, "-C", layout).CombinedOutput(); err != nil {
		t.Fatalf("tar: %v\n%s", err, out)
	}
	blob := func(digest string) string {
		return filepath.Join(layout, "blobs", strings.Replace(digest, ":", "/", 1))
	}
	var index struct {
		Manifests []struct{ Digest string } `json:"manifests"`
	}
	if err := json.Unmarshal([]byte(readFile(t, filepath.Join(layout, "index.json"))), &index); err != nil || len(index.Manifests) != 1 {
		t.Fatalf("index.json: %v (%d manifests)", err, len(index.Manifests))
	}
	var manifest struct {
		Layers []struct{ Digest string } `json:"layers"`
	}
	if err := json.Unmarshal([]byte(readFile(t, blob(index.Manifests[0].Digest))), &manifest); err != nil {
		t.Fatal(err)
	}
	for _, l := range manifest.Layers {
		if out, err := exec.CommandContext(ctx, "tar", "--numeric-owner", "-xpf", blob(l.Digest), "-C", dir).CombinedOutput(); err != nil {
			t.Fatalf("tar: %v\n%s", err, out)
		}
	}
}
