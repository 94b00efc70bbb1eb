package engines

import (
	"crypto/sha256"
	"encoding/hex"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	fleetv1alpha1 "github.com/fleetdb/fleetdb/apis/v1alpha1"
	"github.com/fleetdb/fleetdb/member"
)

const appPassword = "Bk9-app_Pass_word7"

// backupContainer renders the final backup Job of a Database named orders
// in team-a and returns its dump container.
func backupContainer(t *testing.T, engine fleetv1alpha1.Engine, backend fleetv1alpha1.Backend) (corev1.Container, string) {
	t.Helper()
	db := &fleetv1alpha1.Database{
		ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "orders", UID: "4d1f0c2e-uid"},
		Spec: fleetv1alpha1.DatabaseSpec{
			Engine: engine, Backend: backend, Replicas: 1, Storage: fleetv1alpha1.StorageSpec{Size: resource.MustParse("1Gi")},
		},
	}
	id := member.FinalBackupID(string(db.UID))
	job, err := member.BackupJob(member.BackupParams{Database: db, Cluster: "m1", Kind: fleetv1alpha1.BackupKindFinal, ID: id, Attempt: 1})
	if err != nil {
		t.Fatalf("BackupJob: %v", err)
	}
	c := job.Spec.Template.Spec.Containers[0]
	if c.Name != member.BackupContainerName || len(c.Command) != 3 || c.Command[0] != "sh" || c.Command[1] != "-c" {
		t.Fatalf("the Job does not run the backup script: %s %q", c.Name, c.Command)
	}
	return c, id
}

// backupOverrides points the rendered environment at the test's server and folders.
func backupOverrides(t *testing.T, port int) (map[string]string, string, string) {
	root, results := t.TempDir(), t.TempDir()
	return map[string]string{
		"DB_HOST":     "127.0.0.1",
		"DB_PORT":     strconv.Itoa(port),
		"BACKUP_ROOT": root,
		"RESULT_FILE": filepath.Join(results, "termination-log"),
		"HOME":        results,
	}, root, filepath.Join(results, "termination-log")
}

// checkBackupFiles checks the manifest against the files and the result
// line against the manifest, and that no file nor the output holds secret.
func checkBackupFiles(t *testing.T, dir, resultFile, out string, secrets ...string) backupManifest {
	t.Helper()
	m := readManifest(t, dir)
	var total int64
	for _, f := range m.Files {
		raw, err := os.ReadFile(filepath.Join(dir, f.Name))
		if err != nil {
			t.Fatalf("the manifest lists %s: %v", f.Name, err)
		}
		sum := sha256.Sum256(raw)
		if int64(len(raw)) != f.SizeBytes || hex.EncodeToString(sum[:]) != f.SHA256 {
			t.Fatalf("%s: manifest says %d bytes sha256 %s, the file has %d bytes sha256 %x", f.Name, f.SizeBytes, f.SHA256, len(raw), sum)
		}
		total += f.SizeBytes
		for _, s := range secrets {
			if strings.Contains(string(raw), s) {
				t.Fatalf("%s holds a password", f.Name)
			}
		}
	}
	if total != m.SizeBytes || total == 0 {
		t.Fatalf("the manifest's size %d is not the sum of its files' %d", m.SizeBytes, total)
	}
	msg, err := os.ReadFile(resultFile)
	if err != nil {
		t.Fatalf("no termination message: %v", err)
	}
	r, err := member.ParseBackupResult(string(msg))
	if err != nil || r.Phase != fleetv1alpha1.BackupPhaseSucceeded || r.SizeBytes != total || r.Path != dir {
		t.Fatalf("termination message %q (%v): want Succeeded, %d bytes at %s", msg, err, total, dir)
	}
	for _, s := range secrets {
		if strings.Contains(out, s) || strings.Contains(string(msg), s) {
			t.Fatalf("the output or the termination message holds a password:\n%s", out)
		}
	}
	return m
}

// checkArgv fails when a recorded command line holds a secret, or when none of want was called.
func checkArgv(t *testing.T, logFile string, want []string, secrets ...string) {
	t.Helper()
	raw, err := os.ReadFile(logFile)
	if err != nil {
		t.Fatalf("no command line was recorded: %v", err)
	}
	for _, w := range want {
		if !strings.Contains(string(raw), "/"+w+"\x00") {
			t.Fatalf("%s was not called; recorded:\n%q", w, raw)
		}
	}
	for _, s := range secrets {
		if strings.Contains(string(raw), s) {
			t.Fatalf("a password is on a command line:\n%q", raw)
		}
	}
}

func TestPostgresBackup(t *testing.T) {
	s := startPostgres(t)
	// CloudNativePG's application user: the owner of its database, no superuser.
	s.sql(t, "postgres", `CREATE ROLE app LOGIN PASSWORD '`+appPassword+`'`)
	s.sql(t, "postgres", `CREATE DATABASE app OWNER app`)
	s.sql(t, "postgres", `CREATE DATABASE "odd ""name"" db" OWNER app`)
	s.sql(t, "postgres", `CREATE DATABASE private`)
	s.sql(t, "postgres", `REVOKE CONNECT ON DATABASE private FROM PUBLIC`)
	s.sql(t, "app", `SET ROLE app; CREATE TABLE items (id int PRIMARY KEY, name text); INSERT INTO items VALUES (1, 'one'), (2, 'two')`)
	s.sql(t, `odd "name" db`, `SET ROLE app; CREATE TABLE notes (body text); INSERT INTO notes VALUES ('kept')`)

	// What the script works around: pg_dumpall reads pg_authid, which only
	// a superuser may, unless it leaves the role passwords out.
	plain := exec.Command("pg_dumpall", "-w", "--globals-only", "-h", "127.0.0.1", "-p", strconv.Itoa(s.port), "-U", "app")
	plain.Env = append(os.Environ(), "PGPASSWORD="+appPassword)
	if out, err := plain.CombinedOutput(); err == nil || !strings.Contains(string(out), "pg_authid") {
		t.Fatalf("pg_dumpall --globals-only as a user who is no superuser: want permission denied for pg_authid, got %v\n%s", err, out)
	}

	c, id := backupContainer(t, fleetv1alpha1.EnginePostgres, fleetv1alpha1.BackendCloudNativePG)
	overrides, root, resultFile := backupOverrides(t, s.port)
	secrets := map[string]map[string][]byte{"orders-credentials": {
		member.CredentialsUsernameKey: []byte("app"), member.CredentialsPasswordKey: []byte(appPassword),
	}}
	env, argv := argvRecorder(t, jobEnv(t, c, secrets, overrides), "psql", "pg_dump", "pg_dumpall")
	out, err := runJobScript(c.Command[2], env)
	if err != nil {
		t.Fatalf("the backup script failed: %v\n%s", err, out)
	}
	dir := member.BackupDir("team-a", "orders", id)
	if _, err := os.Stat(filepath.Join(root, "team-a", "orders", id)); err != nil || !strings.HasPrefix(dir, "/backups/") {
		t.Fatalf("the backup is not at <root>/team-a/orders/%s: %v", id, err)
	}
	dir = filepath.Join(root, "team-a", "orders", id)
	overrides["BACKUP_ROOT"] = root
	m := checkBackupFiles(t, dir, resultFile, out, appPassword, "SCRAM-SHA-256$")
	checkArgv(t, argv, []string{"psql", "pg_dump", "pg_dumpall"}, appPassword)
	if m.Engine != "postgres" || !strings.HasPrefix(m.Version, "1") || m.BackupID != id || m.Namespace != "team-a" || m.Database != "orders" {
		t.Fatalf("manifest: %+v", m)
	}
	dumps := map[string]string{}
	globals := false
	for _, f := range m.Files {
		if f.Globals {
			globals = true
			continue
		}
		dumps[f.DBName] = filepath.Join(dir, f.Name)
	}
	if !globals || len(dumps) != 3 || dumps["app"] == "" || dumps[`odd "name" db`] == "" || dumps["postgres"] == "" {
		t.Fatalf("want app, the odd name, postgres and the globals (not private, not the templates): %+v", m.Files)
	}
	list, err := exec.Command("pg_restore", "--list", dumps["app"]).CombinedOutput()
	if err != nil || !strings.Contains(string(list), "TABLE public items app") {
		t.Fatalf("pg_restore --list does not list the table: %v\n%s", err, list)
	}
	if g, _ := os.ReadFile(filepath.Join(dir, "globals.sql")); !strings.Contains(string(g), "CREATE ROLE app") {
		t.Fatalf("globals.sql has no role app:\n%s", g)
	}

	// The archives restore.
	restorePostgres(t, s, dumps["app"], "restored")
	if got := s.sql(t, "restored", "SELECT string_agg(name, ',' ORDER BY id) FROM items"); got != "one,two" {
		t.Fatalf("restored rows: %q", got)
	}
	restorePostgres(t, s, dumps[`odd "name" db`], "restored_odd")
	if got := s.sql(t, "restored_odd", "SELECT body FROM notes"); got != "kept" {
		t.Fatalf("restored rows: %q", got)
	}

	// A Job run again (its pod retried after the backup completed) reports
	// the backup it finds and writes nothing.
	before, _ := os.ReadFile(filepath.Join(dir, member.BackupManifestFile))
	out, err = runJobScript(c.Command[2], env)
	after, _ := os.ReadFile(filepath.Join(dir, member.BackupManifestFile))
	if err != nil || !strings.Contains(out, "complete already") || string(before) != string(after) {
		t.Fatalf("a second run: %v\n%s", err, out)
	}
	checkBackupFiles(t, dir, resultFile, out, appPassword)
}

func TestPostgresBackupFailureReportsTheStep(t *testing.T) {
	s := startPostgres(t)
	s.sql(t, "postgres", `CREATE ROLE app LOGIN PASSWORD '`+appPassword+`'`)
	c, id := backupContainer(t, fleetv1alpha1.EnginePostgres, fleetv1alpha1.BackendStatefulSet)
	overrides, root, resultFile := backupOverrides(t, s.port)
	secrets := map[string]map[string][]byte{"orders-credentials": {
		member.CredentialsUsernameKey: []byte("app"), member.CredentialsPasswordKey: []byte("wrong-" + appPassword),
	}}
	out, err := runJobScript(c.Command[2], jobEnv(t, c, secrets, overrides))
	if err == nil {
		t.Fatalf("the backup script succeeded with a wrong password:\n%s", out)
	}
	msg, _ := os.ReadFile(resultFile)
	r, perr := member.ParseBackupResult(string(msg))
	if perr != nil || r.Phase != fleetv1alpha1.BackupPhaseFailed || r.Step != "connect" {
		t.Fatalf("termination message %q (%v): want Failed at connect", msg, perr)
	}
	if strings.Contains(out, appPassword) || strings.Contains(string(msg), appPassword) {
		t.Fatalf("a password was printed:\n%s", out)
	}
	entries, _ := os.ReadDir(filepath.Join(root, "team-a", "orders"))
	if len(entries) != 0 {
		t.Fatalf("a failed backup left %v (want nothing, not even %s.partial)", entries, id)
	}
}

func TestMySQLBackup(t *testing.T) {
	s := startMariaDB(t)
	s.sql(t, "CREATE DATABASE shop; CREATE DATABASE `odd db`;"+
		"CREATE TABLE shop.items (id INT PRIMARY KEY, name VARCHAR(20)); INSERT INTO shop.items VALUES (1, 'one'), (2, 'two');"+
		"CREATE TABLE `odd db`.notes (body VARCHAR(20)); INSERT INTO `odd db`.notes VALUES ('kept');"+
		"CREATE PROCEDURE shop.count_items() SELECT COUNT(*) FROM shop.items;")

	c, id := backupContainer(t, fleetv1alpha1.EngineMySQL, fleetv1alpha1.BackendStatefulSet)
	for _, tc := range []struct {
		name   string
		secret map[string][]byte
	}{
		{"root-password", map[string][]byte{member.CredentialsRootPasswordKey: []byte(rootPassword), member.CredentialsPasswordKey: []byte(appPassword)}},
		// A Database created before root-password existed: root has the application password.
		{"no root-password", map[string][]byte{member.CredentialsPasswordKey: []byte(rootPassword)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			overrides, root, resultFile := backupOverrides(t, s.port)
			env, argv := argvRecorder(t, jobEnv(t, c, map[string]map[string][]byte{"orders-credentials": tc.secret}, overrides), "mysql", "mysqldump")
			out, err := runJobScript(c.Command[2], env)
			if err != nil {
				t.Fatalf("the backup script failed: %v\n%s", err, out)
			}
			dir := filepath.Join(root, "team-a", "orders", id)
			m := checkBackupFiles(t, dir, resultFile, out, rootPassword, appPassword)
			checkArgv(t, argv, []string{"mysql", "mysqldump"}, rootPassword, appPassword)
			if m.Engine != "mysql" || len(m.Files) != 1 || m.Files[0].Name != "databases.sql" {
				t.Fatalf("manifest: %+v", m)
			}
			if got := strings.Join(m.Files[0].Databases, ","); got != "odd db,shop" {
				t.Fatalf("databases in the dump: %q, want the user databases only", got)
			}
			dump, _ := os.ReadFile(filepath.Join(dir, "databases.sql"))
			for _, want := range []string{"CREATE DATABASE", "INSERT INTO `items` VALUES", "(1,'one')", "(2,'two')", "PROCEDURE `count_items`"} {
				if !strings.Contains(string(dump), want) {
					t.Fatalf("the dump has no %q:\n%s", want, dump)
				}
			}
			if strings.Contains(string(dump), "CREATE DATABASE /*!32312 IF NOT EXISTS*/ `mysql`") {
				t.Fatal("the dump holds the mysql system database (it would replace the accounts of the database it is restored into)")
			}
		})
	}

	// The dump restores into an empty server.
	overrides, root, _ := backupOverrides(t, s.port)
	env := jobEnv(t, c, map[string]map[string][]byte{"orders-credentials": {member.CredentialsRootPasswordKey: []byte(rootPassword),
		member.CredentialsPasswordKey: []byte(appPassword)}}, overrides)
	if out, err := runJobScript(c.Command[2], env); err != nil {
		t.Fatalf("the backup script failed: %v\n%s", err, out)
	}
	target := startMariaDB(t)
	restoreMySQL(t, target, filepath.Join(root, "team-a", "orders", id, "databases.sql"))
	if got := target.sql(t, "SELECT GROUP_CONCAT(name ORDER BY id) FROM shop.items"); got != "one,two" {
		t.Fatalf("restored rows: %q", got)
	}
	if got := target.sql(t, "SELECT body FROM `odd db`.notes"); got != "kept" {
		t.Fatalf("restored rows: %q", got)
	}
}
