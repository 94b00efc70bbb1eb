package engines

import (
	"os"
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

// The round trip of an on-demand backup: the backup Job's script (as
// member.BackupJob renders it for a DatabaseBackup) against one server, the
// restore Job's script (member.RestoreJob, for a new Database with
// spec.restoreFrom) into a fresh server, and the rows compared. Both scripts
// are the exact strings the Jobs run, with the environment kubelet would
// give them.

const restoredPassword = "Rs7-new_Database_pw2"

// onDemandBackup renders the DatabaseBackup's backup Job of Database orders
// and runs its script against a server on port; it returns the backup
// directory the Job wrote.
func onDemandBackup(t *testing.T, engine fleetv1alpha1.Engine, backend fleetv1alpha1.Backend, port int) string {
	t.Helper()
	db := &fleetv1alpha1.Database{
		ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "orders", UID: "4d1f0c2e-uid"},
		Spec: fleetv1alpha1.DatabaseSpec{
			Engine: engine, Backend: backend, Replicas: 1, Storage: fleetv1alpha1.StorageSpec{Size: resource.MustParse("1Gi")},
		},
	}
	const id = "nightly-1a2b3c"
	job, err := member.BackupJob(member.BackupParams{Database: db, Cluster: "m1", Kind: fleetv1alpha1.BackupKindOnDemand, ID: id, Attempt: 1})
	if err != nil {
		t.Fatalf("BackupJob: %v", err)
	}
	c := job.Spec.Template.Spec.Containers[0]
	overrides, root, _ := backupOverrides(t, port)
	secrets := map[string]map[string][]byte{"orders-credentials": {
		member.CredentialsUsernameKey: []byte("app"), member.CredentialsPasswordKey: []byte(appPassword),
		member.CredentialsRootPasswordKey: []byte(rootPassword),
	}}
	if out, err := runJobScript(c.Command[2], jobEnv(t, c, secrets, overrides)); err != nil {
		t.Fatalf("the backup script failed: %v\n%s", err, out)
	}
	return filepath.Join(root, "team-a", "orders", id)
}

// restoreContainer renders the restore Job of a new Database "orders-copy"
// restoring the backup of "orders", and checks its shape: the backup claim
// read-only, the instance addressed directly, credentials only from the
// member Secret.
func restoreContainer(t *testing.T, engine fleetv1alpha1.Engine, backend fleetv1alpha1.Backend) corev1.Container {
	t.Helper()
	db := &fleetv1alpha1.Database{
		ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "orders-copy", UID: "77aa-uid"},
		Spec: fleetv1alpha1.DatabaseSpec{
			Engine: engine, Backend: backend, Replicas: 1, Storage: fleetv1alpha1.StorageSpec{Size: resource.MustParse("1Gi")},
			RestoreFrom: &fleetv1alpha1.RestoreSource{BackupName: "nightly"},
		},
	}
	job, err := member.RestoreJob(member.RestoreParams{Database: db, Cluster: "m1", SourceDatabase: "orders", BackupID: "nightly-1a2b3c", Attempt: 1})
	if err != nil {
		t.Fatalf("RestoreJob: %v", err)
	}
	pod := job.Spec.Template.Spec
	if claim := pod.Volumes[0].PersistentVolumeClaim; claim == nil || claim.ClaimName != "orders-backups" || !claim.ReadOnly {
		t.Fatalf("the restore Job does not read the source's backup claim read-only: %+v", pod.Volumes[0])
	}
	c := pod.Containers[0]
	if len(c.Command) != 3 || c.Command[0] != "sh" || !c.VolumeMounts[0].ReadOnly {
		t.Fatalf("the Job does not run the restore script: %q", c.Command)
	}
	for _, e := range c.Env {
		if strings.Contains(e.Name, "PASSWORD") && (e.ValueFrom == nil || e.ValueFrom.SecretKeyRef == nil || e.ValueFrom.SecretKeyRef.Name != "orders-copy-credentials") {
			t.Fatalf("%s does not come from the restored Database's Secret", e.Name)
		}
		if e.Name == "DB_HOST" && e.Value == "orders-copy" {
			t.Fatal("the restore Job connects through the client Service, which does not exist before the restore")
		}
	}
	return c
}

// runRestore runs the restore script against a server on port with the
// restored Database's credentials; it returns the output and the error.
func runRestore(t *testing.T, c corev1.Container, port int, dir string) (string, string, error) {
	t.Helper()
	results := t.TempDir()
	resultFile := filepath.Join(results, "termination-log")
	env := jobEnv(t, c, map[string]map[string][]byte{"orders-copy-credentials": {
		member.CredentialsUsernameKey: []byte("app"), member.CredentialsPasswordKey: []byte(restoredPassword),
		member.CredentialsRootPasswordKey: []byte(rootPassword),
	}}, map[string]string{
		"DB_HOST": "127.0.0.1", "DB_PORT": strconv.Itoa(port), "BACKUP_DIR": dir, "RESULT_FILE": resultFile, "HOME": results,
	})
	env, argv := argvRecorder(t, env, "psql", "pg_restore", "mysql")
	out, err := runJobScript(c.Command[2], env)
	msg, _ := os.ReadFile(resultFile)
	if raw, _ := os.ReadFile(argv); strings.Contains(string(raw), restoredPassword) || strings.Contains(string(raw), rootPassword) {
		t.Fatalf("a password is on a command line:\n%q", raw)
	}
	if strings.Contains(out, restoredPassword) || strings.Contains(string(msg), restoredPassword) || strings.Contains(string(msg), rootPassword) {
		t.Fatalf("the output or the termination message holds a password:\n%s", out)
	}
	return out, string(msg), err
}

func TestPostgresBackupRestoreRoundTrip(t *testing.T) {
	src := startPostgres(t)
	// CloudNativePG's application user: the owner of its database, no superuser.
	src.sql(t, "postgres", `CREATE ROLE app LOGIN PASSWORD '`+appPassword+`'`)
	src.sql(t, "postgres", `CREATE DATABASE app OWNER app`)
	src.sql(t, "app", `SET ROLE app; CREATE TABLE items (id serial PRIMARY KEY, name text NOT NULL, price numeric(10,2));
INSERT INTO items (name, price) SELECT 'item ' || g, g * 1.5 FROM generate_series(1, 500) g;
CREATE SCHEMA billing; CREATE TABLE billing.invoices (id int PRIMARY KEY, item int REFERENCES items(id)); INSERT INTO billing.invoices VALUES (1, 7), (2, 42);
CREATE VIEW cheap AS SELECT name FROM items WHERE price < 10`)
	dir := onDemandBackup(t, fleetv1alpha1.EnginePostgres, fleetv1alpha1.BackendCloudNativePG, src.port)

	// A fresh server as the new Database's CloudNativePG Cluster starts it:
	// the application user (another password) owns an empty database.
	dst := startPostgres(t)
	dst.sql(t, "postgres", `CREATE ROLE app LOGIN PASSWORD '`+restoredPassword+`'`)
	dst.sql(t, "postgres", `CREATE DATABASE app OWNER app`)
	c := restoreContainer(t, fleetv1alpha1.EnginePostgres, fleetv1alpha1.BackendCloudNativePG)
	out, msg, err := runRestore(t, c, dst.port, dir)
	if err != nil || !strings.Contains(msg, `"phase":"Succeeded"`) {
		t.Fatalf("the restore script failed: %v\n%s\nresult: %s", err, out, msg)
	}
	for _, q := range []string{
		"SELECT count(*), sum(price), max(id) FROM items",
		"SELECT string_agg(id || ':' || item, ',' ORDER BY id) FROM billing.invoices",
		"SELECT count(*) FROM cheap",
	} {
		want, got := src.sql(t, "app", q), dst.sql(t, "app", q)
		if want != got || want == "" {
			t.Fatalf("%s: source %q, restored %q", q, want, got)
		}
	}
	// The restored objects belong to the application user, who can write.
	dst.sql(t, "app", "SET ROLE app; INSERT INTO items (name, price) VALUES ('after', 1)")

	// Run again (a Job retried after it succeeded, a restore asked for a
	// database that took traffic): it refuses and changes nothing.
	out, msg, err = runRestore(t, c, dst.port, dir)
	if err == nil || !strings.Contains(out, "refusing to restore over it") || !strings.Contains(msg, `"phase":"Failed"`) {
		t.Fatalf("a restore over a database with data: want refused, got %v\n%s", err, out)
	}
	if got := dst.sql(t, "app", "SELECT count(*) FROM items"); got != "501" {
		t.Fatalf("the refused restore changed the data: %s rows", got)
	}

	// A backup file that does not match its manifest is not restored.
	fresh := startPostgres(t)
	fresh.sql(t, "postgres", `CREATE ROLE app LOGIN PASSWORD '`+restoredPassword+`'`)
	fresh.sql(t, "postgres", `CREATE DATABASE app OWNER app`)
	dumps, _ := filepath.Glob(filepath.Join(dir, "db-*.dump"))
	if len(dumps) == 0 {
		t.Fatal("the backup has no dump")
	}
	if err := os.WriteFile(dumps[0], []byte("tampered"), 0o600); err != nil {
		t.Fatal(err)
	}
	out, msg, err = runRestore(t, c, fresh.port, dir)
	if err == nil || !strings.Contains(out, "does not match the backup's manifest") || !strings.Contains(msg, "verify the backup") {
		t.Fatalf("a tampered backup: want refused, got %v\n%s", err, out)
	}
}

func TestMySQLBackupRestoreRoundTrip(t *testing.T) {
	src := startMariaDB(t)
	src.sql(t, `CREATE DATABASE shop; CREATE TABLE shop.orders (id int AUTO_INCREMENT PRIMARY KEY, customer varchar(64), total decimal(10,2));
INSERT INTO shop.orders (customer, total) VALUES ('ann', 10.50), ('bob', 99.99), ('cy', 0.01);
CREATE DATABASE audit; CREATE TABLE audit.log (at int, what text); INSERT INTO audit.log VALUES (1, 'created'), (2, 'paid');
CREATE VIEW shop.big AS SELECT customer FROM shop.orders WHERE total > 50`)
	dir := onDemandBackup(t, fleetv1alpha1.EngineMySQL, fleetv1alpha1.BackendStatefulSet, src.port)

	// A postgres restore of a mysql backup is refused before it connects.
	pg := restoreContainer(t, fleetv1alpha1.EnginePostgres, fleetv1alpha1.BackendStatefulSet)
	if out, msg, err := runRestore(t, pg, 1, dir); err == nil || !strings.Contains(out, "is not a backup of postgres") || !strings.Contains(msg, "engine") {
		t.Fatalf("a backup of another engine: want refused, got %v\n%s", err, out)
	}

	dst := startMariaDB(t)
	c := restoreContainer(t, fleetv1alpha1.EngineMySQL, fleetv1alpha1.BackendStatefulSet)
	if host := envValue(c, "DB_HOST"); host != "orders-copy-0.orders-copy-hl" {
		t.Fatalf("the restore Job connects to %q, want pod 0 through the headless Service", host)
	}
	out, msg, err := runRestore(t, c, dst.port, dir)
	if err != nil || !strings.Contains(msg, `"phase":"Succeeded"`) {
		t.Fatalf("the restore script failed: %v\n%s\nresult: %s", err, out, msg)
	}
	for _, q := range []string{
		"SELECT count(*), sum(total), group_concat(customer ORDER BY id) FROM shop.orders",
		"SELECT group_concat(what ORDER BY at) FROM audit.log",
		"SELECT count(*) FROM shop.big",
	} {
		want, got := src.sql(t, q), dst.sql(t, q)
		if want != got || want == "" {
			t.Fatalf("%s: source %q, restored %q", q, want, got)
		}
	}
	if got := dst.sql(t, "SELECT count(*) FROM information_schema.SCHEMATA WHERE SCHEMA_NAME = 'fleetdb_restore'"); got != "0" {
		t.Fatal("the restore left its marker database")
	}

	// Run again: the server holds user databases now; refused, unchanged.
	dst.sql(t, "INSERT INTO shop.orders (customer, total) VALUES ('new', 1)")
	out, _, err = runRestore(t, c, dst.port, dir)
	if err == nil || !strings.Contains(out, "refusing to restore over them") {
		t.Fatalf("a restore over user databases: want refused, got %v\n%s", err, out)
	}
	if got := dst.sql(t, "SELECT count(*) FROM shop.orders"); got != "4" {
		t.Fatalf("the refused restore changed the data: %s rows", got)
	}

	// An attempt that failed half-way (its marker is there) is cleaned up
	// and loaded again.
	half := startMariaDB(t)
	half.sql(t, "CREATE DATABASE fleetdb_restore; CREATE DATABASE shop; CREATE TABLE shop.orders (id int)")
	out, msg, err = runRestore(t, c, half.port, dir)
	if err != nil || !strings.Contains(msg, `"phase":"Succeeded"`) {
		t.Fatalf("the restore after a failed attempt: %v\n%s", err, out)
	}
	if want, got := src.sql(t, "SELECT sum(total) FROM shop.orders"), half.sql(t, "SELECT sum(total) FROM shop.orders"); want != got {
		t.Fatalf("restored after a failed attempt: source %q, restored %q", want, got)
	}
}

func envValue(c corev1.Container, name string) string {
	for _, e := range c.Env {
		if e.Name == name {
			return e.Value
		}
	}
	return ""
}

// TestPostgresRestoreAsApplicationUser: the restore works with the rights
// CloudNativePG gives its application user (it owns its database; no
// superuser, no CREATEDB, no CREATEROLE): a backup whose database has
// another name than the target's goes into the user's existing database,
// with the objects owned by the user, and nothing is created. A backup that
// would need a second database the user may not create is refused, saying so.
func TestPostgresRestoreAsApplicationUser(t *testing.T) {
	src := startPostgres(t)
	src.sql(t, "postgres", `CREATE ROLE app LOGIN PASSWORD '`+appPassword+`'`)
	src.sql(t, "postgres", `CREATE DATABASE shop OWNER app`)
	sqlInDatabase(t, src, "shop", `SET ROLE app; CREATE TABLE items (id serial PRIMARY KEY, name text NOT NULL);
INSERT INTO items (name) SELECT 'item ' || g FROM generate_series(1, 50) g;
CREATE SCHEMA billing; CREATE TABLE billing.invoices (id int PRIMARY KEY, item int REFERENCES items(id)); INSERT INTO billing.invoices VALUES (1, 7)`)
	dir := onDemandBackup(t, fleetv1alpha1.EnginePostgres, fleetv1alpha1.BackendCloudNativePG, src.port)

	// The new Database's Cluster as CloudNativePG's initdb leaves it.
	appServer := func() *pgServer {
		dst := startPostgres(t)
		dst.sql(t, "postgres", `CREATE ROLE app LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE PASSWORD '`+restoredPassword+`'`)
		dst.sql(t, "postgres", `CREATE DATABASE app OWNER app`)
		return dst
	}
	c := restoreContainer(t, fleetv1alpha1.EnginePostgres, fleetv1alpha1.BackendCloudNativePG)
	dst := appServer()
	out, msg, err := runRestore(t, c, dst.port, dir)
	if err != nil || !strings.Contains(msg, `"phase":"Succeeded"`) {
		t.Fatalf("the restore as the application user failed: %v\n%s\nresult: %s", err, out, msg)
	}
	for _, q := range []string{"SELECT count(*), max(id) FROM items", "SELECT string_agg(id || ':' || item, ',') FROM billing.invoices"} {
		want, got := sqlInDatabase(t, src, "shop", q), dst.sql(t, "app", q)
		if want != got || want == "" {
			t.Fatalf("%s: source %q, restored into app %q", q, want, got)
		}
	}
	if got := dst.sql(t, "postgres", "SELECT count(*) FROM pg_database WHERE datname = 'shop'"); got != "0" {
		t.Fatal("a database was created")
	}
	if got := dst.sql(t, "app", "SELECT string_agg(DISTINCT pg_get_userbyid(relowner), ',') FROM pg_class WHERE relname IN ('items', 'invoices')"); got != "app" {
		t.Fatalf("the restored tables belong to %q, not the application user", got)
	}
	dst.sql(t, "app", "SET ROLE app; INSERT INTO items (name) VALUES ('after')")

	// Two application databases in the backup, one of the target's name: the
	// other has nowhere to go.
	src.sql(t, "postgres", `CREATE DATABASE app OWNER app`)
	sqlInDatabase(t, src, "app", `SET ROLE app; CREATE TABLE notes (v text); INSERT INTO notes VALUES ('n')`)
	two := onDemandBackup(t, fleetv1alpha1.EnginePostgres, fleetv1alpha1.BackendCloudNativePG, src.port)
	out, msg, err = runRestore(t, c, appServer().port, two)
	if err == nil || !strings.Contains(out, "may not create databases") || !strings.Contains(msg, `"phase":"Failed"`) {
		t.Fatalf("a backup needing a database the user may not create: want refused, got %v\n%s", err, out)
	}
}
