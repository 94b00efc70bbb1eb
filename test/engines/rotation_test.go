// Package engines runs the SQL fleetdb sends to databases against real
// engines: a PostgreSQL and a MariaDB server started from the distribution's
// packages on loopback in a temporary folder. The credential rotation Job's
// script is taken from the rendered Job and run with the environment that
// kubelet would give it.
//
// The servers' binaries come from the postgresql and mariadb-server
// packages. Without them the tests skip, unless FLEETDB_REQUIRE_ENGINES is
// set (CI sets it after installing the packages): then they fail.
package engines

import (
	"bytes"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	fleetv1alpha1 "github.com/fleetdb/fleetdb/apis/v1alpha1"
	"github.com/fleetdb/fleetdb/member"
)

const (
	oldPassword  = "old-Pass_word0"
	newPassword  = "Nq3xZ-7_kLm0pRt2vWy4AbCdEfGhIjKl"
	rootPassword = "r00t-pass_word"
)

// memberSecret is the member credentials Secret's data during a rotation.
var memberSecret = map[string][]byte{
	member.CredentialsUsernameKey:        []byte("app"),
	member.CredentialsPasswordKey:        []byte(oldPassword),
	member.CredentialsPendingPasswordKey: []byte(newPassword),
	member.CredentialsRootPasswordKey:    []byte(rootPassword),
}

func TestPostgresRotation(t *testing.T) {
	bin := postgresBinDir(t)
	port := freePort(t)
	dir := sharedTempDir(t)
	asPostgres := runAs(t, "postgres", dir)
	run(t, asPostgres(filepath.Join(bin, "initdb"), "-D", filepath.Join(dir, "data"), "-U", "postgres",
		"--auth-local=trust", "--auth-host=scram-sha-256"))
	run(t, asPostgres(filepath.Join(bin, "pg_ctl"), "start", "-w", "-D", filepath.Join(dir, "data"), "-l", filepath.Join(dir, "log"),
		"-o", fmt.Sprintf("-k %s -p %d -c listen_addresses=127.0.0.1", dir, port)))
	t.Cleanup(func() {
		_ = asPostgres(filepath.Join(bin, "pg_ctl"), "stop", "-m", "immediate", "-D", filepath.Join(dir, "data")).Run()
	})
	// The application role, not a superuser: a role may change its own password.
	run(t, exec.Command("psql", "-h", dir, "-p", strconv.Itoa(port), "-U", "postgres", "-d", "postgres", "-v", "ON_ERROR_STOP=1",
		"-c", "CREATE ROLE app LOGIN PASSWORD '"+oldPassword+"'"))

	login := func(password string) error {
		cmd := exec.Command("psql", "-h", "127.0.0.1", "-p", strconv.Itoa(port), "-U", "app", "-d", "postgres", "-w", "-c", "SELECT 1")
		cmd.Env = append(os.Environ(), "PGPASSWORD="+password)
		return quiet(cmd)
	}
	if err := login(oldPassword); err != nil {
		t.Fatalf("the old password does not log in before the rotation: %v", err)
	}
	script, env := rotationJob(t, fleetv1alpha1.EnginePostgres, port)
	runScript(t, script, env)
	if err := login(newPassword); err != nil {
		t.Fatalf("the new password does not log in after the rotation: %v", err)
	}
	if err := login(oldPassword); err == nil {
		t.Fatal("the old password still logs in after the rotation")
	}
	// A Job run again (a hub restart, a lost Job) succeeds and changes nothing.
	out := runScript(t, script, env)
	if !strings.Contains(out, "already accepts the new password") {
		t.Fatalf("a second run did not notice the rotation was done: %s", out)
	}
}

func TestMySQLRotation(t *testing.T) {
	mariadbd := lookPath(t, "mariadbd")
	installDB := lookPath(t, "mariadb-install-db")
	lookPath(t, "mysql") // the client the script runs, as in the mysql image
	port := freePort(t)
	dir := sharedTempDir(t)
	data, sock := filepath.Join(dir, "data"), filepath.Join(dir, "mysqld.sock")
	var asRoot []string
	if os.Geteuid() == 0 {
		asRoot = []string{"--user=root"} // mariadbd refuses root without it
	}
	run(t, exec.Command(installDB, append([]string{"--no-defaults", "--datadir=" + data, "--auth-root-authentication-method=normal",
		"--skip-test-db"}, asRoot...)...))
	server := exec.Command(mariadbd, append([]string{"--no-defaults", "--datadir=" + data, "--socket=" + sock, "--port=" + strconv.Itoa(port),
		"--bind-address=127.0.0.1", "--skip-name-resolve", "--pid-file=" + filepath.Join(dir, "mysqld.pid"),
		"--log-error=" + filepath.Join(dir, "error.log")}, asRoot...)...)
	if err := server.Start(); err != nil {
		t.Fatalf("starting mariadbd: %v", err)
	}
	t.Cleanup(func() { _ = server.Process.Kill(); _ = server.Wait() })
	admin := func(sql string) error {
		return quiet(exec.Command("mysql", "--no-defaults", "-S", sock, "-u", "root", "-e", sql))
	}
	waitFor(t, func() error { return admin("SELECT 1") }, filepath.Join(dir, "error.log"))
	// What the mysql image sets up: root with its own password from any
	// host, and the application user.
	// mariadb-install-db also makes root and anonymous accounts for this
	// host's names; those would match loopback logins before '%' does.
	if err := admin(`DROP USER IF EXISTS ''@'localhost', 'root'@'127.0.0.1', 'root'@'::1';
CREATE USER 'root'@'%' IDENTIFIED BY '` + rootPassword + `'; GRANT ALL ON *.* TO 'root'@'%' WITH GRANT OPTION;
CREATE USER 'app'@'%' IDENTIFIED BY '` + oldPassword + `';`); err != nil {
		t.Fatalf("creating users: %v", err)
	}

	login := func(user, password string) error {
		cmd := exec.Command("mysql", "--no-defaults", "-h", "127.0.0.1", "-P", strconv.Itoa(port), "-u", user, "-e", "SELECT 1")
		cmd.Env = append(os.Environ(), "MYSQL_PWD="+password)
		return quiet(cmd)
	}
	if err := login("app", oldPassword); err != nil {
		t.Fatalf("the old password does not log in before the rotation: %v", err)
	}
	script, env := rotationJob(t, fleetv1alpha1.EngineMySQL, port)
	runScript(t, script, env)
	if err := login("app", newPassword); err != nil {
		t.Fatalf("the new password does not log in after the rotation: %v", err)
	}
	if err := login("app", oldPassword); err == nil {
		t.Fatal("the old password still logs in after the rotation")
	}
	if err := login("root", rootPassword); err != nil {
		t.Fatalf("root's own password changed with the rotation: %v", err)
	}
	if out := runScript(t, script, env); !strings.Contains(out, "already accepts the new password") {
		t.Fatalf("a second run did not notice the rotation was done: %s", out)
	}
}

// rotationJob renders the rotation Job of a one-instance Database and
// returns its script and the environment kubelet would give it: literal
// values as rendered (but the instances' addresses, which are this test's
// loopback server) and Secret references resolved from memberSecret.
func rotationJob(t *testing.T, engine fleetv1alpha1.Engine, port int) (string, []string) {
	t.Helper()
	db := &fleetv1alpha1.Database{
		ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "orders", UID: "u1"},
		Spec: fleetv1alpha1.DatabaseSpec{
			Engine: engine, Replicas: 1, Storage: fleetv1alpha1.StorageSpec{Size: resource.MustParse("1Gi")},
		},
	}
	job, err := member.RotationJob(member.RotationParams{
		Database: db, Cluster: "m1", Token: "t1", Attempt: 1,
		StatefulSet: &appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Name: "orders", UID: "s1"}},
	})
	if err != nil {
		t.Fatalf("RotationJob: %v", err)
	}
	c := job.Spec.Template.Spec.Containers[0]
	if len(c.Command) != 3 || c.Command[0] != "sh" || c.Command[1] != "-c" {
		t.Fatalf("the Job does not run a shell script: %q", c.Command)
	}
	env := []string{"PATH=" + os.Getenv("PATH"), "HOME=" + os.TempDir()}
	for _, e := range c.Env {
		v := e.Value
		switch {
		case e.Name == "DB_HOSTS":
			if v != "orders-0.orders-hl" {
				t.Fatalf("DB_HOSTS = %q, want the one instance's address", v)
			}
			v = "127.0.0.1"
		case e.Name == "DB_PORT":
			v = strconv.Itoa(port)
		case e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil:
			ref := e.ValueFrom.SecretKeyRef
			if ref.Name != "orders-credentials" {
				t.Fatalf("%s comes from Secret %s, not the credentials Secret", e.Name, ref.Name)
			}
			v = string(memberSecret[ref.Key])
		}
		env = append(env, e.Name+"="+v)
	}
	return c.Command[2], env
}

func runScript(t *testing.T, script string, env []string) string {
	t.Helper()
	cmd := exec.Command("sh", "-c", script)
	cmd.Env = env
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("the rotation script failed: %v\n%s", err, out)
	}
	if bytes.Contains(out, []byte(newPassword)) || bytes.Contains(out, []byte(oldPassword)) {
		t.Fatalf("the rotation script printed a password:\n%s", out)
	}
	return string(out)
}

// requireEngines says whether missing engine binaries fail the tests.
func requireEngines() bool { return os.Getenv("FLEETDB_REQUIRE_ENGINES") != "" }

func lookPath(t *testing.T, name string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		// Servers and runuser live in sbin, which a user's PATH may lack.
		if p, err = exec.LookPath(filepath.Join("/usr/sbin", name)); err != nil {
			missing(t, name)
		}
	}
	return p
}

func missing(t *testing.T, what string) {
	t.Helper()
	if requireEngines() {
		t.Fatalf("%s is not installed (install postgresql and mariadb-server)", what)
	}
	t.Skipf("%s is not installed (install postgresql and mariadb-server to run this test)", what)
}

// postgresBinDir finds initdb and pg_ctl: on PATH, or in Debian's
// versioned folder (the postgresql package does not put them on PATH).
func postgresBinDir(t *testing.T) string {
	t.Helper()
	lookPath(t, "psql")
	if p, err := exec.LookPath("initdb"); err == nil {
		return filepath.Dir(p)
	}
	matches, _ := filepath.Glob("/usr/lib/postgresql/*/bin/initdb")
	if len(matches) == 0 {
		missing(t, "initdb")
	}
	return filepath.Dir(matches[len(matches)-1])
}

// sharedTempDir is a temporary folder that the postgres user may use too
// (go test's own are private to the user running it).
func sharedTempDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "fleetdb-engines-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	// The folder above may be private (hack/test.sh's is): let others through.
	if st, err := os.Stat(os.TempDir()); err == nil && st.Mode().Perm()&0o001 == 0 {
		_ = os.Chmod(os.TempDir(), st.Mode().Perm()|0o011)
	}
	return dir
}

// runAs returns a command maker that runs as the named user when the test
// runs as root (postgres refuses to run as root), as the test's user
// otherwise; dir is handed to that user.
func runAs(t *testing.T, name, dir string) func(string, ...string) *exec.Cmd {
	t.Helper()
	if os.Geteuid() != 0 {
		return exec.Command
	}
	u, err := user.Lookup(name)
	if err != nil {
		missing(t, "the "+name+" user")
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	if err := os.Chown(dir, uid, gid); err != nil {
		t.Fatal(err)
	}
	runuser := lookPath(t, "runuser")
	return func(bin string, args ...string) *exec.Cmd {
		return exec.Command(runuser, append([]string{"-u", name, "--", bin}, args...)...)
	}
}

func run(t *testing.T, cmd *exec.Cmd) {
	t.Helper()
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%s: %v\n%s", strings.Join(cmd.Args, " "), err, out)
	}
}

func quiet(cmd *exec.Cmd) error {
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("%w: %s", err, bytes.TrimSpace(out))
	}
	return nil
}

// waitFor polls ready until it succeeds; it fails the test with the server
// log after a minute.
func waitFor(t *testing.T, ready func() error, logFile string) {
	t.Helper()
	var err error
	for range 300 {
		if err = ready(); err == nil {
			return
		}
		time.Sleep(200 * time.Millisecond)
	}
	log, _ := os.ReadFile(logFile)
	t.Fatalf("the server did not start: %v\n%s", err, log)
}

func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}
