package engines

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/fleetdb/fleetdb/member"
)

// Helpers to run a rendered Job's script against real servers. They are
// shared by the backup test here and by restore tests: start a server, take
// the script and the environment from a rendered container (jobEnv), run it
// with the clients' command lines recorded (argvRecorder), and restore what
// a backup wrote (restorePostgres, restoreMySQL).

// pgServer is a PostgreSQL server on loopback; its superuser "postgres"
// logs in over the Unix socket in dir without a password.
type pgServer struct {
	port int
	dir  string
}

// startPostgres starts a PostgreSQL server (scram-sha-256 over TCP) for the test.
func startPostgres(t *testing.T) *pgServer {
	t.Helper()
	bin := postgresBinDir(t)
	s := &pgServer{port: freePort(t), dir: sharedTempDir(t)}
	asPostgres := runAs(t, "postgres", s.dir)
	data := filepath.Join(s.dir, "data")
	run(t, asPostgres(filepath.Join(bin, "initdb"), "-D", data, "-U", "postgres",
		"--auth-local=trust", "--auth-host=scram-sha-256"))
	run(t, asPostgres(filepath.Join(bin, "pg_ctl"), "start", "-w", "-D", data, "-l", filepath.Join(s.dir, "log"),
		"-o", fmt.Sprintf("-k %s -p %d -c listen_addresses=127.0.0.1", s.dir, s.port)))
	t.Cleanup(func() { _ = asPostgres(filepath.Join(bin, "pg_ctl"), "stop", "-m", "immediate", "-D", data).Run() })
	return s
}

// sql runs statements as the superuser in database db and returns the output (-At).
func (s *pgServer) sql(t *testing.T, db, statements string) string {
	t.Helper()
	cmd := exec.Command("psql", "-X", "-h", s.dir, "-p", strconv.Itoa(s.port), "-U", "postgres", "-d", db,
		"-v", "ON_ERROR_STOP=1", "-Atq", "-c", statements)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("psql %s: %v\n%s", db, err, out)
	}
	return strings.TrimSpace(string(out))
}

// restorePostgres restores a pg_dump -Fc archive into a new database target
// (created empty, owned by the superuser).
func restorePostgres(t *testing.T, s *pgServer, archive, target string) {
	t.Helper()
	s.sql(t, "postgres", `CREATE DATABASE "`+target+`"`)
	run(t, exec.Command("pg_restore", "-h", s.dir, "-p", strconv.Itoa(s.port), "-U", "postgres",
		"--no-owner", "--exit-on-error", "-d", target, archive))
}

// mariaServer is a MariaDB server on loopback (the mysql engine's stand-in),
// with root@'%' on rootPassword as the mysql image sets it up.
type mariaServer struct {
	port int
	sock string
}

// startMariaDB starts a MariaDB server for the test.
func startMariaDB(t *testing.T) *mariaServer {
	t.Helper()
	mariadbd := lookPath(t, "mariadbd")
	installDB := lookPath(t, "mariadb-install-db")
	lookPath(t, "mysql")
	lookPath(t, "mysqldump")
	dir := sharedTempDir(t)
	s := &mariaServer{port: freePort(t), sock: filepath.Join(dir, "mysqld.sock")}
	data := filepath.Join(dir, "data")
	var asRoot []string
	if os.Geteuid() == 0 {
		asRoot = []string{"--user=root"}
	}
	run(t, exec.Command(installDB, append([]string{"--no-defaults", "--datadir=" + data, "--auth-root-authentication-method=normal",
		"--skip-test-db"}, asRoot...)...))
	server := exec.Command(mariadbd, append([]string{"--no-defaults", "--datadir=" + data, "--socket=" + s.sock, "--port=" + strconv.Itoa(s.port),
		"--bind-address=127.0.0.1", "--skip-name-resolve", "--pid-file=" + filepath.Join(dir, "mysqld.pid"),
		"--log-error=" + filepath.Join(dir, "error.log")}, asRoot...)...)
	if err := server.Start(); err != nil {
		t.Fatalf("starting mariadbd: %v", err)
	}
	t.Cleanup(func() { _ = server.Process.Kill(); _ = server.Wait() })
	waitFor(t, func() error {
		return quiet(exec.Command("mysql", "--no-defaults", "-S", s.sock, "-u", "root", "-e", "SELECT 1"))
	}, filepath.Join(dir, "error.log"))
	s.sql(t, `DROP USER IF EXISTS ''@'localhost', 'root'@'127.0.0.1', 'root'@'::1';
CREATE USER 'root'@'%' IDENTIFIED BY '`+rootPassword+`'; GRANT ALL ON *.* TO 'root'@'%' WITH GRANT OPTION;`)
	return s
}

// sql runs statements as root over the socket and returns the output (-N -B).
func (s *mariaServer) sql(t *testing.T, statements string) string {
	t.Helper()
	out, err := exec.Command("mysql", "--no-defaults", "-S", s.sock, "-u", "root", "-N", "-B", "-e", statements).CombinedOutput()
	if err != nil {
		t.Fatalf("mysql: %v\n%s", err, out)
	}
	return strings.TrimSpace(string(out))
}

// restoreMySQL replays a mysqldump file as root.
func restoreMySQL(t *testing.T, s *mariaServer, dump string) {
	t.Helper()
	f, err := os.Open(dump)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	cmd := exec.Command("mysql", "--no-defaults", "-S", s.sock, "-u", "root")
	cmd.Stdin = f
	run(t, cmd)
}

// jobEnv is the environment kubelet gives container c: literal values (or
// the override of the same name), Secret references resolved from secrets
// (Secret name -> data; an optional key may be missing), and PATH.
func jobEnv(t *testing.T, c corev1.Container, secrets map[string]map[string][]byte, overrides map[string]string) []string {
	t.Helper()
	env := []string{"PATH=" + os.Getenv("PATH")}
	for _, e := range c.Env {
		v, overridden := overrides[e.Name]
		switch {
		case overridden:
		case e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil:
			ref := e.ValueFrom.SecretKeyRef
			data, ok := secrets[ref.Name]
			if !ok {
				t.Fatalf("%s comes from Secret %s, which the test does not know", e.Name, ref.Name)
			}
			val, ok := data[ref.Key]
			if !ok {
				if ref.Optional == nil || !*ref.Optional {
					t.Fatalf("%s: Secret %s has no key %s and the reference is not optional", e.Name, ref.Name, ref.Key)
				}
				continue // kubelet leaves the variable unset
			}
			v = string(val)
		case e.ValueFrom != nil:
			t.Fatalf("%s: unexpected env source", e.Name)
		default:
			v = e.Value
		}
		env = append(env, e.Name+"="+v)
	}
	return env
}

// argvRecorder puts, first on PATH, wrappers of the named programs that
// append their command line (NUL-separated arguments, one line per call) to
// the returned log, then run the real program. It returns env with PATH
// changed.
func argvRecorder(t *testing.T, env []string, programs ...string) ([]string, string) {
	t.Helper()
	dir := t.TempDir()
	logFile := filepath.Join(dir, "argv.log")
	for _, p := range programs {
		real, err := exec.LookPath(p)
		if err != nil {
			missing(t, p)
		}
		shim := "#!/bin/sh\nprintf '%s\\0' \"$0\" \"$@\" >>" + logFile + "\nprintf '\\n' >>" + logFile + "\nexec " + real + " \"$@\"\n"
		if err := os.WriteFile(filepath.Join(dir, p), []byte(shim), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	out := make([]string, 0, len(env))
	for _, e := range env {
		if strings.HasPrefix(e, "PATH=") {
			e = "PATH=" + dir + ":" + strings.TrimPrefix(e, "PATH=")
		}
		out = append(out, e)
	}
	return out, logFile
}

// runJobScript runs a Job's script (sh -c) with env and returns its output
// and error.
func runJobScript(script string, env []string) (string, error) {
	cmd := exec.Command("sh", "-c", script)
	cmd.Env = env
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// backupManifest is manifest.json of a backup.
type backupManifest struct {
	FormatVersion int    `json:"formatVersion"`
	Engine        string `json:"engine"`
	Version       string `json:"version"`
	Namespace     string `json:"namespace"`
	Database      string `json:"database"`
	BackupID      string `json:"backupID"`
	SizeBytes     int64  `json:"sizeBytes"`
	Files         []struct {
		Name      string   `json:"name"`
		SizeBytes int64    `json:"sizeBytes"`
		SHA256    string   `json:"sha256"`
		DBName    string   `json:"database"`
		Databases []string `json:"databases"`
		Globals   bool     `json:"globals"`
	} `json:"files"`
}

func readManifest(t *testing.T, dir string) backupManifest {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(dir, member.BackupManifestFile))
	if err != nil {
		t.Fatalf("no manifest: %v", err)
	}
	var m backupManifest
	if err := json.Unmarshal(raw, &m); err != nil {
		t.Fatalf("the manifest is no JSON: %v\n%s", err, raw)
	}
	return m
}
