package engines

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	fleetv1alpha1 "github.com/fleetdb/fleetdb/apis/v1alpha1"
	"github.com/fleetdb/fleetdb/member"
)

// TestPostgresAppUserIsNoSuperuser (issue 42, item 5) runs the
// initialisation script the StatefulSet backend's postgres ConfigMap
// carries, as the postgres image's entrypoint does (sourced by bash, with
// docker_process_sql connecting as the superuser over the local socket and
// the application credentials in the container's environment), against a
// real server. The application user it creates logs in and owns its
// database, and is no superuser: COPY ... TO PROGRAM (a shell in the
// member), reading server files and creating roles or databases are
// refused; it can still change its own password (the rotation Job's
// ALTER ROLE).
func TestPostgresAppUserIsNoSuperuser(t *testing.T) {
	s := startPostgres(t)
	db := &fleetv1alpha1.Database{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "orders", UID: "u1"},
		Spec: fleetv1alpha1.DatabaseSpec{Engine: fleetv1alpha1.EnginePostgres, Backend: fleetv1alpha1.BackendStatefulSet, Replicas: 1,
			Storage: fleetv1alpha1.StorageSpec{Size: resource.MustParse("1Gi")}}}
	objs, err := member.Render(member.Params{Database: db, Cluster: "m1", Credentials: map[string][]byte{
		member.CredentialsUsernameKey: []byte("app"), member.CredentialsPasswordKey: []byte(oldPassword)}})
	if err != nil {
		t.Fatal(err)
	}
	var script string
	var ctr corev1.Container
	for _, o := range objs {
		if cm, ok := o.(*corev1.ConfigMap); ok {
			script = cm.Data["fleetdb-app-user.sh"]
		}
		if sts, ok := o.(*appsv1.StatefulSet); ok {
			ctr = sts.Spec.Template.Spec.Containers[0]
		}
	}
	// The container's command draws a fresh superuser password and hands
	// its arguments to the image's entrypoint (a stand-in here).
	bin := t.TempDir()
	if err := os.WriteFile(filepath.Join(bin, "docker-entrypoint.sh"), []byte("#!/bin/sh\necho \"$POSTGRES_PASSWORD $*\"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	start := func() string {
		cmd := exec.Command(ctr.Command[0], append(ctr.Command[1:], ctr.Args...)...)
		cmd.Env = append(os.Environ(), "PATH="+bin+":"+os.Getenv("PATH"))
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("the container's command: %v\n%s", err, out)
		}
		return strings.TrimSpace(string(out))
	}
	first, second := start(), start()
	pw, args, _ := strings.Cut(first, " ")
	if len(pw) != 48 || strings.Trim(pw, "0123456789abcdef") != "" || args != strings.Join(ctr.Args, " ") {
		t.Fatalf("the container's command ran the entrypoint with %q, want a 48 hex digit password and %q", first, ctr.Args)
	}
	if pw2, _, _ := strings.Cut(second, " "); pw2 == pw {
		t.Fatal("the superuser password is the same at each start")
	}
	if script == "" {
		t.Fatal("the rendered ConfigMap has no fleetdb-app-user.sh")
	}
	bash := lookPath(t, "bash")
	init := func(user string) (string, error) {
		// The entrypoint's docker_process_sql (docker-library/postgres
		// docker-entrypoint.sh), pointed at the test's server.
		prelude := `docker_process_sql() {
  local query_runner=( psql -v ON_ERROR_STOP=1 --username "$POSTGRES_USER" --no-password --no-psqlrc )
  if [ -n "$POSTGRES_DB" ]; then query_runner+=( --dbname "$POSTGRES_DB" ); fi
  "${query_runner[@]}" "$@"
}
set -Eeo pipefail
. "$1"
`
		f, err := os.CreateTemp(t.TempDir(), "init-*.sh")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := f.WriteString(script); err != nil {
			t.Fatal(err)
		}
		_ = f.Close()
		cmd := exec.Command(bash, "-c", prelude, "docker-entrypoint.sh", f.Name())
		cmd.Env = append(os.Environ(), "POSTGRES_USER=postgres", "POSTGRES_DB=postgres",
			"PGHOST="+s.dir, "PGPORT="+strconv.Itoa(s.port),
			"FLEETDB_APP_USER="+user, "FLEETDB_APP_PASSWORD="+oldPassword)
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	if out, err := init("app"); err != nil {
		t.Fatalf("the initialisation script failed: %v\n%s", err, out)
	} else if strings.Contains(out, oldPassword) {
		t.Fatalf("the initialisation script printed the password:\n%s", out)
	}
	if out, err := init("postgres"); err == nil || !strings.Contains(out, "neither empty nor postgres") {
		t.Fatalf("an application user named postgres: want refused, got %v\n%s", err, out)
	}

	if got := s.sql(t, "postgres", "SELECT rolsuper, rolcreatedb, rolcreaterole, rolreplication, rolbypassrls FROM pg_roles WHERE rolname = 'app'"); got != "f|f|f|f|f" {
		t.Fatalf("the application user's attributes (super, createdb, createrole, replication, bypassrls): %q", got)
	}
	if got := s.sql(t, "postgres", "SELECT pg_get_userbyid(datdba) FROM pg_database WHERE datname = 'app'"); got != "app" {
		t.Fatalf("the application database belongs to %q", got)
	}
	asApp := func(password, statements string) (string, error) {
		cmd := exec.Command("psql", "-X", "-h", "127.0.0.1", "-p", strconv.Itoa(s.port), "-U", "app", "-d", "app", "-w",
			"-v", "ON_ERROR_STOP=1", "-Atq", "-c", statements)
		cmd.Env = append(os.Environ(), "PGPASSWORD="+password)
		out, err := cmd.CombinedOutput()
		return strings.TrimSpace(string(out)), err
	}
	if out, err := asApp(oldPassword, "CREATE TABLE items (id int); INSERT INTO items VALUES (1); SELECT count(*) FROM items"); err != nil || out != "1" {
		t.Fatalf("the application user cannot use its database: %v\n%s", err, out)
	}
	for what, sql := range map[string]string{
		"COPY TO PROGRAM":      "COPY (SELECT 1) TO PROGRAM 'id'",
		"COPY FROM PROGRAM":    "COPY items FROM PROGRAM 'echo 2'",
		"reading server files": "SELECT pg_read_file('/etc/passwd')",
		"ALTER SYSTEM":         "ALTER SYSTEM SET archive_command = 'sh'",
		"CREATE ROLE":          "CREATE ROLE intruder SUPERUSER",
		"CREATE DATABASE":      "CREATE DATABASE other",
	} {
		if out, err := asApp(oldPassword, sql); err == nil {
			t.Errorf("%s as the application user: want refused, got %q", what, out)
		} else if !strings.Contains(out, "permission denied") && !strings.Contains(out, "must be superuser") {
			t.Errorf("%s as the application user: want a permission error, got %v: %s", what, err, out)
		}
	}
	// The rotation Job's statement: a role may change its own password.
	if out, err := asApp(oldPassword, "ALTER ROLE app PASSWORD '"+newPassword+"'"); err != nil {
		t.Fatalf("the application user cannot change its own password: %v\n%s", err, out)
	}
	if _, err := asApp(newPassword, "SELECT 1"); err != nil {
		t.Fatalf("the new password does not log in: %v", err)
	}
}
