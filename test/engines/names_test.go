package engines

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	fleetv1alpha1 "github.com/fleetdb/fleetdb/apis/v1alpha1"
)

// What a name or a backup file can make the backup and restore Jobs do:
// the scripts as the Jobs run them, against real servers. Each test fails
// with the scripts before the names were passed as names (issue 25, item 14).

// TestPostgresRestoreConnectionStringName: pg_restore -d reads a value with
// "=" as a connection string. A database named "dbname=postgres" must be
// restored into the database of that name, not into postgres (and a name
// with host= must not send the restore elsewhere); a name with ' and \ must
// restore too.
func TestPostgresRestoreConnectionStringName(t *testing.T) {
	const eqName, quoteName = "dbname=postgres", `it's a \ name=1`
	src := startPostgres(t)
	src.sql(t, "postgres", `CREATE ROLE app LOGIN PASSWORD '`+appPassword+`'`)
	src.sql(t, "postgres", `CREATE DATABASE app OWNER app`)
	src.sql(t, "postgres", `CREATE DATABASE "`+eqName+`" OWNER app`)
	src.sql(t, "postgres", `CREATE DATABASE "`+quoteName+`" OWNER app`)
	sqlInDatabase(t, src, eqName, `SET ROLE app; CREATE TABLE kept (v text); INSERT INTO kept VALUES ('eq-1'), ('eq-2')`)
	sqlInDatabase(t, src, quoteName, `SET ROLE app; CREATE TABLE kept (v text); INSERT INTO kept VALUES ('quote-1')`)
	dir := onDemandBackup(t, fleetv1alpha1.EnginePostgres, fleetv1alpha1.BackendCloudNativePG, src.port)

	dst := startPostgres(t)
	dst.sql(t, "postgres", `CREATE ROLE app LOGIN PASSWORD '`+restoredPassword+`' CREATEDB`)
	dst.sql(t, "postgres", `CREATE DATABASE app OWNER app`)
	c := restoreContainer(t, fleetv1alpha1.EnginePostgres, fleetv1alpha1.BackendCloudNativePG)
	out, msg, err := runRestore(t, c, dst.port, dir)
	if err != nil || !strings.Contains(msg, `"phase":"Succeeded"`) {
		t.Fatalf("the restore script failed: %v\n%s\nresult: %s", err, out, msg)
	}
	if got := sqlInDatabase(t, dst, eqName, "SELECT string_agg(v, ',' ORDER BY v) FROM kept"); got != "eq-1,eq-2" {
		t.Fatalf("database %q restored: %q", eqName, got)
	}
	if got := sqlInDatabase(t, dst, quoteName, "SELECT string_agg(v, ',' ORDER BY v) FROM kept"); got != "quote-1" {
		t.Fatalf("database %q restored: %q", quoteName, got)
	}
	if got := dst.sql(t, "postgres", "SELECT count(*) FROM pg_class WHERE relname = 'kept'"); got != "0" {
		t.Fatalf("database %q was restored into postgres", eqName)
	}
}

// TestPostgresRestoreRunsNoMetaCommand: a backup whose globals.sql holds a
// psql meta-command (\! runs a shell command) does not run it in the
// restore Job; the roles of an untampered backup are restored.
func TestPostgresRestoreRunsNoMetaCommand(t *testing.T) {
	src := startPostgres(t)
	src.sql(t, "postgres", `CREATE ROLE app LOGIN PASSWORD '`+appPassword+`'`)
	src.sql(t, "postgres", `CREATE DATABASE app OWNER app`)
	src.sql(t, "postgres", `CREATE ROLE reporting NOLOGIN`)
	src.sql(t, "app", `SET ROLE app; CREATE TABLE items (id int); INSERT INTO items VALUES (1)`)
	dir := onDemandBackup(t, fleetv1alpha1.EnginePostgres, fleetv1alpha1.BackendCloudNativePG, src.port)
	newTarget := func() *pgServer {
		dst := startPostgres(t)
		dst.sql(t, "postgres", `CREATE ROLE app LOGIN PASSWORD '`+restoredPassword+`' CREATEROLE`)
		dst.sql(t, "postgres", `CREATE DATABASE app OWNER app`)
		return dst
	}
	c := restoreContainer(t, fleetv1alpha1.EnginePostgres, fleetv1alpha1.BackendCloudNativePG)

	dst := newTarget()
	out, msg, err := runRestore(t, c, dst.port, dir)
	if err != nil || !strings.Contains(msg, `"phase":"Succeeded"`) {
		t.Fatalf("the restore script failed: %v\n%s\nresult: %s", err, out, msg)
	}
	if got := dst.sql(t, "postgres", "SELECT count(*) FROM pg_roles WHERE rolname = 'reporting'"); got != "1" {
		t.Fatalf("the backup's role reporting was not restored (%s)", got)
	}

	marker := filepath.Join(t.TempDir(), "ran")
	globals := filepath.Join(dir, "globals.sql")
	raw, err := os.ReadFile(globals)
	if err != nil {
		t.Fatal(err)
	}
	tampered := append([]byte("\\! touch "+marker+"\nSELECT 1; \\! touch "+marker+"\n"), raw...)
	if err := os.WriteFile(globals, tampered, 0o600); err != nil {
		t.Fatal(err)
	}
	rewriteManifestEntry(t, dir, "globals.sql", tampered)
	fresh := newTarget()
	out, msg, err = runRestore(t, c, fresh.port, dir)
	if _, statErr := os.Stat(marker); statErr == nil {
		t.Fatalf("the restore ran the backup's psql meta-command (%v)\n%s", err, out)
	}
	if err != nil || !strings.Contains(msg, `"phase":"Succeeded"`) {
		t.Fatalf("the restore script failed: %v\n%s\nresult: %s", err, out, msg)
	}
}

// TestMySQLBackupOptionLikeName: a database named like a mysqldump option
// (--no-data) is dumped as a database; it does not empty the dump of
// every other database.
func TestMySQLBackupOptionLikeName(t *testing.T) {
	src := startMariaDB(t)
	src.sql(t, "CREATE DATABASE shop; CREATE TABLE shop.orders (id int PRIMARY KEY, total decimal(10,2)); INSERT INTO shop.orders VALUES (1, 10.50), (2, 99.99);"+
		"CREATE DATABASE `--no-data`; CREATE TABLE `--no-data`.notes (body text); INSERT INTO `--no-data`.notes VALUES ('kept')")
	dir := onDemandBackup(t, fleetv1alpha1.EngineMySQL, fleetv1alpha1.BackendStatefulSet, src.port)

	dst := startMariaDB(t)
	c := restoreContainer(t, fleetv1alpha1.EngineMySQL, fleetv1alpha1.BackendStatefulSet)
	out, msg, err := runRestore(t, c, dst.port, dir)
	if err != nil || !strings.Contains(msg, `"phase":"Succeeded"`) {
		t.Fatalf("the restore script failed: %v\n%s\nresult: %s", err, out, msg)
	}
	if got := dst.sql(t, "SELECT count(*), sum(total) FROM shop.orders"); got != "2\t110.49" {
		t.Fatalf("shop.orders restored: %q (the dump lost its rows)", got)
	}
	if got := dst.sql(t, "SELECT body FROM `--no-data`.notes"); got != "kept" {
		t.Fatalf("`--no-data`.notes restored: %q", got)
	}
}

// TestMySQLRestoreRunsNoClientCommand: a backup whose databases.sql holds a
// client command (\! runs a shell command) does not run it in the restore
// Job: the file is SQL for the server, and a dump with routines and
// triggers (DELIMITER) still restores.
func TestMySQLRestoreRunsNoClientCommand(t *testing.T) {
	src := startMariaDB(t)
	src.sql(t, "CREATE DATABASE shop; CREATE TABLE shop.orders (id int PRIMARY KEY, total int); INSERT INTO shop.orders VALUES (1, 10), (2, 20);"+
		"CREATE TABLE shop.audit (n int); CREATE TRIGGER shop.counted AFTER INSERT ON shop.orders FOR EACH ROW INSERT INTO shop.audit VALUES (NEW.id);"+
		"CREATE PROCEDURE shop.total() SELECT sum(total) FROM shop.orders")
	dir := onDemandBackup(t, fleetv1alpha1.EngineMySQL, fleetv1alpha1.BackendStatefulSet, src.port)

	// Untampered, with a trigger and a procedure: restored.
	dst := startMariaDB(t)
	c := restoreContainer(t, fleetv1alpha1.EngineMySQL, fleetv1alpha1.BackendStatefulSet)
	out, msg, err := runRestore(t, c, dst.port, dir)
	if err != nil || !strings.Contains(msg, `"phase":"Succeeded"`) {
		t.Fatalf("the restore script failed: %v\n%s\nresult: %s", err, out, msg)
	}
	dst.sql(t, "INSERT INTO shop.orders VALUES (3, 30)")
	if got := dst.sql(t, "SELECT count(*) FROM shop.audit"); got != "1" {
		t.Fatalf("the restored trigger did not fire: %q rows in shop.audit", got)
	}
	if got := dst.sql(t, "CALL shop.total()"); got != "60" {
		t.Fatalf("the restored procedure: %q", got)
	}

	// The same backup with a client command in its dump (the manifest made
	// to match: whoever can write the backup volume can write both).
	marker := filepath.Join(t.TempDir(), "ran")
	dump := filepath.Join(dir, "databases.sql")
	raw, err := os.ReadFile(dump)
	if err != nil {
		t.Fatal(err)
	}
	tampered := append([]byte("\\! touch "+marker+"\n"), raw...)
	if err := os.WriteFile(dump, tampered, 0o600); err != nil {
		t.Fatal(err)
	}
	rewriteManifestEntry(t, dir, "databases.sql", tampered)
	fresh := startMariaDB(t)
	out, msg, err = runRestore(t, c, fresh.port, dir)
	if _, statErr := os.Stat(marker); statErr == nil {
		t.Fatalf("the restore ran the dump's shell command (%v)\n%s", err, out)
	}
	if err == nil || !strings.Contains(msg, `"phase":"Failed"`) {
		t.Fatalf("a dump with a client command: want the restore failed, got %v\n%s\nresult: %s", err, out, msg)
	}
}

// sqlInDatabase is s.sql in database db given by name (PGDATABASE, which
// libpq takes as a name: psql -d would read a name with "=" as a
// connection string).
func sqlInDatabase(t *testing.T, s *pgServer, db, statements string) string {
	t.Helper()
	cmd := exec.Command("psql", "-X", "-h", s.dir, "-p", strconv.Itoa(s.port), "-U", "postgres",
		"-v", "ON_ERROR_STOP=1", "-Atq", "-c", statements)
	cmd.Env = append(os.Environ(), "PGDATABASE="+db)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("psql %s: %v\n%s", db, err, out)
	}
	return strings.TrimSpace(string(out))
}

// rewriteManifestEntry sets file's size and sha256 in dir's manifest to
// those of content.
func rewriteManifestEntry(t *testing.T, dir, file string, content []byte) {
	t.Helper()
	path := filepath.Join(dir, "manifest.json")
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(raw, &m); err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(content)
	files, _ := m["files"].([]any)
	found := false
	for _, f := range files {
		entry, _ := f.(map[string]any)
		if entry["name"] == file {
			entry["sizeBytes"], entry["sha256"], found = len(content), hex.EncodeToString(sum[:]), true
		}
	}
	if !found {
		t.Fatalf("the manifest lists no %s: %s", file, raw)
	}
	// The restore matches the entry's fields in this order.
	var b strings.Builder
	b.WriteString(`{"files":[`)
	for i, f := range files {
		entry := f.(map[string]any)
		if i > 0 {
			b.WriteString(",")
		}
		name, _ := json.Marshal(entry["name"])
		size, _ := json.Marshal(entry["sizeBytes"])
		sha, _ := json.Marshal(entry["sha256"])
		b.WriteString(`{"name":` + string(name) + `,"sizeBytes":` + string(size) + `,"sha256":` + string(sha) + `}`)
	}
	b.WriteString(`],"engine":` + `"` + m["engine"].(string) + `"}`)
	if err := os.WriteFile(path, []byte(b.String()), 0o600); err != nil {
		t.Fatal(err)
	}
}
