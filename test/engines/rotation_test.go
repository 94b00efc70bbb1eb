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
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	fleetv1alpha1 "github.com/fleetdb/fleetdb/apis/v1alpha1"
	"github.com/fleetdb/fleetdb/internal/pki"
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

// TestPostgresRotation runs the rendered rotation Job against a PostgreSQL
// configured as member.Render configures the StatefulSet backend's: TLS on
// with the server certificate the hub issues (pki.IssueInstanceCertificates),
// its files as kubelet mounts the rendered Secret volume. The Job connects
// to the instance by its rendered name (libpq's hostaddr reaches loopback,
// the name is what verify-full checks) and verifies the certificate with the
// one file it mounts, the CA. A server without TLS, or with a certificate
// of another CA, is refused before the password leaves the Job
// (issue 42, item 6).
func TestPostgresRotation(t *testing.T) {
	certs := instanceCerts(t, "orders")
	srv := startRotationPostgres(t, certs)
	script, env := rotationJob(t, fleetv1alpha1.EnginePostgres, srv.port)
	env = postgresJobTLS(t, env, certs)
	if err := srv.login(oldPassword); err != nil {
		t.Fatalf("the old password does not log in before the rotation: %v", err)
	}
	runScript(t, script, env)
	if err := srv.login(newPassword); err != nil {
		t.Fatalf("the new password does not log in after the rotation: %v", err)
	}
	if err := srv.login(oldPassword); err == nil {
		t.Fatal("the old password still logs in after the rotation")
	}
	if !srv.usedTLS(t) {
		t.Fatal("the rotation's connections did not use TLS")
	}
	// A Job run again (a hub restart, a lost Job) succeeds and changes nothing.
	out := runScript(t, script, env)
	if !strings.Contains(out, "already accepts the new password") {
		t.Fatalf("a second run did not notice the rotation was done: %s", out)
	}
}

// TestPostgresRotationRefusesUnverifiedServers: the rendered Job refuses a
// server that serves no TLS (the StatefulSet backend before this change),
// one whose certificate another CA issued, and one whose certificate names
// another Database's instances; the password stays as it was.
func TestPostgresRotationRefusesUnverifiedServers(t *testing.T) {
	certs := instanceCerts(t, "orders")
	for name, served := range map[string]*member.InstanceCertificates{
		"no TLS":                  nil,
		"another CA":              instanceCerts(t, "orders"),
		"another Database's name": instanceCerts(t, "payments"),
	} {
		t.Run(name, func(t *testing.T) {
			srv := startRotationPostgres(t, served)
			script, env := rotationJob(t, fleetv1alpha1.EnginePostgres, srv.port)
			out, err := runJobScript(script, postgresJobTLS(t, env, certs))
			if err == nil {
				t.Fatalf("the rotation Job succeeded against a server it cannot verify:\n%s", out)
			}
			if !strings.Contains(out, "SSL") && !strings.Contains(out, "certificate") {
				t.Fatalf("the rotation Job failed, not on TLS:\n%s", out)
			}
			if strings.Contains(out, newPassword) || strings.Contains(out, oldPassword) {
				t.Fatalf("the rotation script printed a password:\n%s", out)
			}
			if err := srv.login(oldPassword); err != nil {
				t.Fatalf("the password changed although the Job could not verify the server: %v", err)
			}
			if err := srv.login(newPassword); err == nil {
				t.Fatal("the new password logs in although the Job could not verify the server")
			}
		})
	}
	// Nor does the script run with TLS turned down in its environment.
	srv := startRotationPostgres(t, certs)
	script, env := rotationJob(t, fleetv1alpha1.EnginePostgres, srv.port)
	env = postgresJobTLS(t, env, certs)
	for i, e := range env {
		if strings.HasPrefix(e, "PGSSLMODE=") {
			env[i] = "PGSSLMODE=require"
		}
	}
	if out, err := runJobScript(script, env); err == nil || !strings.Contains(out, "refusing") {
		t.Fatalf("the rotation script ran with sslmode require: %v\n%s", err, out)
	}
	if err := srv.login(oldPassword); err != nil {
		t.Fatalf("the password changed: %v", err)
	}
}

// instanceCerts are the instance certificates the hub issues for a new
// postgres Database named name (a new CA each call).
func instanceCerts(t *testing.T, name string) *member.InstanceCertificates {
	t.Helper()
	db := &fleetv1alpha1.Database{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: name}}
	c, err := pki.IssueInstanceCertificates(db, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	return &c
}

// rotationPostgres is a PostgreSQL server with the application role app on
// oldPassword.
type rotationPostgres struct {
	port int
	dir  string
}

// startRotationPostgres starts PostgreSQL with the TLS settings of the
// postgresql.conf member.Render renders for certs (nil: without TLS, as
// before issue 42 item 6), the certificate files as kubelet writes the
// rendered Secret volume (root-owned, the pod's fsGroup as group, the
// volume's defaultMode) under a folder that stands for its mount path.
func startRotationPostgres(t *testing.T, certs *member.InstanceCertificates) *rotationPostgres {
	t.Helper()
	bin := postgresBinDir(t)
	s := &rotationPostgres{port: freePort(t), dir: sharedTempDir(t)}
	asPostgres := runAs(t, "postgres", s.dir)
	data := filepath.Join(s.dir, "data")
	run(t, asPostgres(filepath.Join(bin, "initdb"), "-D", data, "-U", "postgres",
		"--auth-local=trust", "--auth-host=scram-sha-256"))
	if certs != nil {
		conf, err := os.OpenFile(filepath.Join(data, "postgresql.conf"), os.O_APPEND|os.O_WRONLY, 0)
		if err != nil {
			t.Fatal(err)
		}
		_, err = conf.WriteString("\n" + renderedTLSConfig(t, certs))
		if cerr := conf.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	run(t, asPostgres(filepath.Join(bin, "pg_ctl"), "start", "-w", "-D", data, "-l", filepath.Join(s.dir, "log"),
		"-o", fmt.Sprintf("-k %s -p %d -c listen_addresses=127.0.0.1 -c log_connections=on", s.dir, s.port)))
	t.Cleanup(func() { _ = asPostgres(filepath.Join(bin, "pg_ctl"), "stop", "-m", "immediate", "-D", data).Run() })
	// The application role, not a superuser: a role may change its own password.
	run(t, exec.Command("psql", "-h", s.dir, "-p", strconv.Itoa(s.port), "-U", "postgres", "-d", "postgres", "-v", "ON_ERROR_STOP=1",
		"-c", "CREATE ROLE app LOGIN PASSWORD '"+oldPassword+"'"))
	return s
}

func (s *rotationPostgres) login(password string) error {
	cmd := exec.Command("psql", "-h", "127.0.0.1", "-p", strconv.Itoa(s.port), "-U", "app", "-d", "postgres", "-w", "-c", "SELECT 1")
	cmd.Env = append(os.Environ(), "PGPASSWORD="+password, "PGSSLMODE=prefer")
	return quiet(cmd)
}

// usedTLS reports whether the server logged an authorized app connection
// over SSL (log_connections).
func (s *rotationPostgres) usedTLS(t *testing.T) bool {
	t.Helper()
	log, err := os.ReadFile(filepath.Join(s.dir, "log"))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(log), "\n") {
		if strings.Contains(line, "connection authorized: user=app") && strings.Contains(line, "SSL enabled") {
			return true
		}
	}
	return false
}

// renderedTLSConfig renders the Database with certs and returns the TLS
// settings of its postgresql.conf with the Secret volume's mount path
// replaced by a folder holding the volume's files as kubelet writes them.
func renderedTLSConfig(t *testing.T, certs *member.InstanceCertificates) string {
	t.Helper()
	objs, err := member.Render(member.Params{Database: rotationDatabase(fleetv1alpha1.EnginePostgres), Cluster: "m1", InstanceTLS: certs,
		Credentials: map[string][]byte{member.CredentialsUsernameKey: []byte("app"), member.CredentialsPasswordKey: []byte(oldPassword)}})
	if err != nil {
		t.Fatalf("Render: %v", err)
	}
	var conf string
	var secret *corev1.Secret
	var pod corev1.PodSpec
	for _, o := range objs {
		switch o := o.(type) {
		case *corev1.ConfigMap:
			conf = o.Data["postgresql.conf"]
		case *corev1.Secret:
			if o.Name == member.InstanceTLSSecretName("orders") {
				secret = o
			}
		case *appsv1.StatefulSet:
			pod = o.Spec.Template.Spec
		}
	}
	if secret == nil {
		t.Fatal("Render made no instance TLS Secret")
	}
	mountPath, folder := mountSecretVolume(t, pod, pod.Containers[0], secret)
	var tlsConf []string
	for _, line := range strings.Split(conf, "\n") {
		if strings.HasPrefix(line, "ssl") {
			tlsConf = append(tlsConf, strings.ReplaceAll(line, mountPath, folder))
		}
	}
	if len(tlsConf) == 0 {
		t.Fatalf("the rendered postgresql.conf has no TLS settings:\n%s", conf)
	}
	return strings.Join(tlsConf, "\n") + "\n"
}

// mountSecretVolume writes the files of the Secret volume container c
// mounts (its items, the volume's defaultMode; as root, owned by root with
// the pod's fsGroup standing for the postgres user's group, as kubelet
// does) into a new folder; it returns the mount path and that folder.
func mountSecretVolume(t *testing.T, pod corev1.PodSpec, c corev1.Container, secret *corev1.Secret) (string, string) {
	t.Helper()
	var vol *corev1.Volume
	for i := range pod.Volumes {
		if v := pod.Volumes[i].Secret; v != nil && v.SecretName == secret.Name {
			vol = &pod.Volumes[i]
		}
	}
	if vol == nil {
		t.Fatalf("no volume of Secret %s", secret.Name)
	}
	mountPath := ""
	for _, m := range c.VolumeMounts {
		if m.Name == vol.Name {
			mountPath = m.MountPath
		}
	}
	if mountPath == "" {
		t.Fatalf("container %s does not mount volume %s", c.Name, vol.Name)
	}
	folder := sharedTempDir(t)
	mode := os.FileMode(0o644)
	if vol.Secret.DefaultMode != nil {
		mode = os.FileMode(*vol.Secret.DefaultMode)
	}
	gid := -1
	if os.Geteuid() == 0 {
		if u, err := user.Lookup("postgres"); err == nil {
			gid, _ = strconv.Atoi(u.Gid)
		}
	} else {
		mode = 0o600 // the files are the test user's, who runs postgres
	}
	for _, item := range vol.Secret.Items {
		p := filepath.Join(folder, item.Path)
		if err := os.WriteFile(p, secret.Data[item.Key], 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, mode); err != nil {
			t.Fatal(err)
		}
		if gid >= 0 {
			if err := os.Chown(p, 0, gid); err != nil {
				t.Fatal(err)
			}
		}
	}
	return mountPath, folder
}

// postgresJobTLS gives the rotation Job's environment env what kubelet gives
// it: the CA file of its Secret volume (from certs, the Database's),
// PGSSLROOTCERT pointing into that folder; and PGHOSTADDR, so that libpq
// reaches the loopback server while it verifies the rendered host name.
func postgresJobTLS(t *testing.T, env []string, certs *member.InstanceCertificates) []string {
	t.Helper()
	job, err := member.RotationJob(member.RotationParams{
		Database: rotationDatabase(fleetv1alpha1.EnginePostgres), Cluster: "m1", Token: "t1", Attempt: 1,
		StatefulSet: &appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Name: "orders", UID: "s1"}},
	})
	if err != nil {
		t.Fatalf("RotationJob: %v", err)
	}
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: member.InstanceTLSSecretName("orders")}, Data: map[string][]byte{
		member.TLSCAKey: certs.CACert, member.TLSCertKey: certs.ServerCert, member.TLSKeyKey: certs.ServerKey,
	}}
	pod := job.Spec.Template.Spec
	mountPath, folder := mountSecretVolume(t, pod, pod.Containers[0], secret)
	for _, f := range []string{member.TLSCertKey, member.TLSKeyKey} {
		if _, err := os.Stat(filepath.Join(folder, f)); err == nil {
			t.Fatalf("the rotation Job mounts %s", f)
		}
	}
	out := make([]string, 0, len(env)+1)
	for _, e := range env {
		if strings.HasPrefix(e, "PGSSLROOTCERT=") {
			e = strings.ReplaceAll(e, mountPath, folder)
		}
		out = append(out, e)
	}
	return append(out, "PGHOSTADDR=127.0.0.1")
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

// rotationDatabase is the one-instance Database the rotation tests render.
func rotationDatabase(engine fleetv1alpha1.Engine) *fleetv1alpha1.Database {
	return &fleetv1alpha1.Database{
		ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "orders", UID: "u1"},
		Spec: fleetv1alpha1.DatabaseSpec{
			Engine: engine, Backend: fleetv1alpha1.BackendStatefulSet, Replicas: 1,
			Storage: fleetv1alpha1.StorageSpec{Size: resource.MustParse("1Gi")},
		},
	}
}

// rotationJob renders the rotation Job of a one-instance Database and
// returns its script and the environment kubelet would give it: literal
// values as rendered (but mysql's instance address, which is this test's
// loopback server) and Secret references resolved from memberSecret.
func rotationJob(t *testing.T, engine fleetv1alpha1.Engine, port int) (string, []string) {
	t.Helper()
	job, err := member.RotationJob(member.RotationParams{
		Database: rotationDatabase(engine), Cluster: "m1", Token: "t1", Attempt: 1,
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
			if engine == fleetv1alpha1.EngineMySQL {
				v = "127.0.0.1"
			} // postgres: the name stays, for verify-full; PGHOSTADDR reaches loopback (postgresJobTLS)
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
