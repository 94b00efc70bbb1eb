package engines

import (
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	fleetv1alpha1 "github.com/fleetdb/fleetdb/apis/v1alpha1"
	"github.com/fleetdb/fleetdb/internal/pki"
)

// TestPostgresTopologyCertificates puts the certificates the hub issues for
// a PrimaryStandby Database in front of a real PostgreSQL, as
// CloudNativePG does: the member's server certificate and key
// (ssl_cert_file/ssl_key_file), the Database's CA for client certificates
// (ssl_ca_file), and a standby's connection as streaming_replica with the
// replication client certificate, verifying the server for the member's
// replication host (sslmode verify-full), for a normal and a replication
// connection. Another host name is refused: verify-full checks the name.
func TestPostgresTopologyCertificates(t *testing.T) {
	const host = "ledger-rw.team-a.eu-1.fleet.test"
	db := &fleetv1alpha1.Database{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "ledger"}}
	certs, err := pki.IssueTopologyCertificates(db, map[string]string{"eu-1": host, "us-1": "ledger-rw.team-a.us-1.fleet.test"}, time.Now())
	if err != nil {
		t.Fatalf("issuing: %v", err)
	}
	primary, standby := certs["eu-1"], certs["us-1"]

	bin := postgresBinDir(t)
	port := freePort(t)
	dir := sharedTempDir(t)
	asPostgres := runAs(t, "postgres", dir)
	data := filepath.Join(dir, "data")
	run(t, asPostgres(filepath.Join(bin, "initdb"), "-D", data, "-U", "postgres", "--auth-local=trust", "--auth-host=reject"))
	writeServerFile(t, filepath.Join(data, "server.crt"), primary.ServerCert)
	writeServerFile(t, filepath.Join(data, "server.key"), primary.ServerKey)
	writeServerFile(t, filepath.Join(data, "ca.crt"), primary.CACert)
	// CloudNativePG's pg_hba for streaming_replica: certificate authentication only.
	writeServerFile(t, filepath.Join(data, "pg_hba.conf"), []byte("local all all trust\n"+
		"hostssl postgres streaming_replica 127.0.0.1/32 cert\n"+
		"hostssl replication streaming_replica 127.0.0.1/32 cert\n"))
	run(t, asPostgres(filepath.Join(bin, "pg_ctl"), "start", "-w", "-D", data, "-l", filepath.Join(dir, "log"),
		"-o", fmt.Sprintf("-k %s -p %d -c listen_addresses=127.0.0.1 -c ssl=on -c ssl_cert_file=server.crt -c ssl_key_file=server.key -c ssl_ca_file=ca.crt", dir, port)))
	t.Cleanup(func() { _ = asPostgres(filepath.Join(bin, "pg_ctl"), "stop", "-m", "immediate", "-D", data).Run() })
	run(t, exec.Command("psql", "-h", dir, "-p", strconv.Itoa(port), "-U", "postgres", "-d", "postgres", "-v", "ON_ERROR_STOP=1",
		"-c", "CREATE ROLE streaming_replica LOGIN REPLICATION"))

	// The standby's side: the files CloudNativePG mounts from its Secrets.
	client := t.TempDir()
	for name, b := range map[string][]byte{"tls.crt": standby.ReplicationCert, "tls.key": standby.ReplicationKey, "ca.crt": standby.CACert} {
		if err := os.WriteFile(filepath.Join(client, name), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	connect := func(name string, extra string, sql string) (string, error) {
		conn := fmt.Sprintf("host=%s hostaddr=127.0.0.1 port=%d user=streaming_replica dbname=postgres sslmode=verify-full "+
			"sslrootcert=%s sslcert=%s sslkey=%s %s", name, port,
			filepath.Join(client, "ca.crt"), filepath.Join(client, "tls.crt"), filepath.Join(client, "tls.key"), extra)
		out, err := exec.Command("psql", conn, "-w", "-At", "-c", sql).CombinedOutput()
		return strings.TrimSpace(string(out)), err
	}
	if out, err := connect(host, "", "SELECT current_user || ' ' || ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()"); err != nil || out != "streaming_replica true" {
		t.Fatalf("streaming_replica over verify-full TLS: %q, %v", out, err)
	}
	if out, err := connect(host, "replication=database", "IDENTIFY_SYSTEM"); err != nil {
		t.Fatalf("a replication connection as streaming_replica: %q, %v", out, err)
	}
	if out, err := connect("ledger-rw.team-a.us-1.fleet.test", "", "SELECT 1"); err == nil {
		t.Fatalf("verify-full accepted the server certificate for another host: %q", out)
	}
	// In the member, a standby of the same Cluster reaches it by its Service name.
	if out, err := connect("ledger-rw.team-a.svc", "", "SELECT 1"); err != nil {
		t.Fatalf("the in-cluster name ledger-rw.team-a.svc: %q, %v", out, err)
	}
}

// writeServerFile writes a file PostgreSQL reads: owned by the postgres user
// when the test runs as root, readable by its owner only (PostgreSQL refuses
// a key others may read).
func writeServerFile(t *testing.T, path string, b []byte) {
	t.Helper()
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	if os.Geteuid() != 0 {
		return
	}
	u, err := user.Lookup("postgres")
	if err != nil {
		t.Fatal(err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	if err := os.Chown(path, uid, gid); err != nil {
		t.Fatal(err)
	}
}
