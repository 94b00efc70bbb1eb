package member

// The restore scripts (RestoreScript). Their environment (RestoreJob
// renders it):
//
//   - BACKUP_DIR: the completed backup (BackupScript's layout: manifest.json
//     with every file's size and sha256, then the dumps);
//   - RESULT_FILE: the result line, one JSON object with phase Succeeded or
//     Failed and the step that failed, goes there (the termination message);
//   - DB_HOST, DB_PORT and the credentials: postgres PGUSER and PGPASSWORD;
//     mysql ROOT_PASSWORD (may be empty: then root has APP_PASSWORD).
//
// Both check every file against the manifest first, and refuse a target
// that holds data: a restore never runs over a database that may have
// taken traffic. postgres restores each database in one transaction, so a
// failed attempt leaves the target empty for the next; mysql's load is not
// transactional, so it marks its work with the database fleetdb_restore
// while it runs, and an attempt that finds that mark drops what the
// previous attempt loaded before it loads again.

// restorePrelude checks the backup against its manifest and sets up the
// failure report.
const restorePrelude = `set -eu
umask 077
step=prepare
tmpd=
on_exit() {
  rc=$?
  [ -n "$tmpd" ] && rm -rf "$tmpd"
  if [ "$rc" -ne 0 ]; then
    printf '{"phase":"Failed","step":"%s","exitCode":%d}\n' "$step" "$rc" >"$RESULT_FILE" || true
    echo "restore: failed at step $step (exit $rc)" >&2
  fi
}
trap on_exit EXIT
tmpd=$(mktemp -d)
step="verify the backup"
[ -f "$BACKUP_DIR/manifest.json" ] || { echo "restore: $BACKUP_DIR holds no completed backup" >&2; exit 4; }
for path in "$BACKUP_DIR"/*; do
  file=${path##*/}
  case "$file" in manifest.json|result.json) continue;; esac
  size=$(wc -c <"$path" | tr -d ' ')
  sum=$(sha256sum "$path" | cut -d ' ' -f 1)
  grep -q "{\"name\":\"$file\",\"sizeBytes\":$size,\"sha256\":\"$sum\"" "$BACKUP_DIR/manifest.json" ||
    { echo "restore: $file does not match the backup's manifest" >&2; exit 4; }
done
`

// restoreEngine refuses a backup of another engine (its manifest says
// which): the dumps would not be found and nothing would be restored.
func restoreEngine(engine string) string {
	return `step="check the backup's engine"
grep -q '"engine":"` + engine + `"' "$BACKUP_DIR/manifest.json" ||
  { echo "restore: $BACKUP_DIR is not a backup of ` + engine + `" >&2; exit 4; }
`
}

// postgresRestore: every database dump into the existing database of its
// name, or, when the target has none, into a database it creates where the
// user may (CREATEDB), else into the user's own application database (the
// one named after the user, which CloudNativePG's initdb and the postgres
// image create and the user owns; once); refused when the target database
// holds relations. Each in one transaction, with no ownership or privilege
// statement (--no-owner --no-privileges): the objects are the restoring
// user's. CloudNativePG's application user owns its database but may not
// CREATE DATABASE nor create roles, and a restore works with just that
// (shown against PostgreSQL by test/engines
// TestPostgresRestoreAsApplicationUser). Then the globals (roles without
// passwords) where the user may create them.
var postgresRestore = restorePrelude + restoreEngine("postgres") + `export PGHOST="$DB_HOST" PGPORT="$DB_PORT" PGDATABASE=postgres PGCONNECT_TIMEOUT=10
q() { psql -X -w -Atq -v ON_ERROR_STOP=1 "$@"; }
dbname_of() { pg_restore -l "$1" | sed -n 's/^;[[:space:]]*[Dd][Bb][Nn]ame: //p' | head -n 1; }
step=connect
q -c 'SELECT 1' >/dev/null
createdb=$(q -c 'SELECT rolcreatedb OR rolsuper FROM pg_roles WHERE rolname = current_user')
appdb=$(q -c 'SELECT datname FROM pg_database WHERE datname = current_user')
# The application database takes a missing database only if no dump goes
# there by its own name.
for dump in "$BACKUP_DIR"/db-*.dump; do
  [ -f "$dump" ] || continue
  step="read $(basename "$dump")"
  [ "$(dbname_of "$dump")" != "$appdb" ] || appdb=
done
count=0
for dump in "$BACKUP_DIR"/db-*.dump; do
  [ -f "$dump" ] || continue
  step="read $(basename "$dump")"
  name=$(dbname_of "$dump")
  [ -n "$name" ] || exit 5
  step="check the target database of $(basename "$dump")"
  exists=$(q -v name="$name" -f - <<'SQL'
SELECT count(*) FROM pg_database WHERE datname = :'name';
SQL
)
  if [ "$exists" = 0 ] && [ "$createdb" = t ]; then
    q -v name="$name" -f - <<'SQL'
CREATE DATABASE :"name";
SQL
  elif [ "$exists" = 0 ] && [ -n "$appdb" ]; then
    echo "restore: the target has no database of the name of $(basename "$dump") and the user may not create one: restoring it into the user's database"
    name=$appdb appdb=
  elif [ "$exists" = 0 ]; then
    echo "restore: the target has no database of the name of $(basename "$dump"), the user may not create databases (CloudNativePG's application user has no CREATEDB) and its own database is taken" >&2
    exit 7
  fi
  used=$(PGDATABASE="$name" q -c "SELECT count(*) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname NOT IN ('pg_catalog', 'information_schema') AND n.nspname NOT LIKE 'pg\_toast%' AND n.nspname NOT LIKE 'pg\_temp%'")
  if [ "$used" != 0 ]; then
    echo "restore: the target database of $(basename "$dump") holds $used relations; refusing to restore over it" >&2
    exit 6
  fi
  step="pg_restore of $(basename "$dump")"
  # pg_restore -d reads a value with "=" (or a postgresql:// URI) as a
  # connection string, so a database named "host=... dbname=..." would
  # send the restore, and the password, elsewhere. The name goes in as
  # the dbname keyword's single-quoted value, with \ and ' escaped
  # (libpq's connection string syntax; shown against PostgreSQL by
  # test/engines TestPostgresRestoreConnectionStringName).
  conninfo="dbname='$(printf '%s' "$name" | sed "s/[\\']/\\\\&/g")'"
  pg_restore -w --no-owner --no-privileges --single-transaction --exit-on-error -d "$conninfo" "$dump"
  count=$((count + 1))
done
step=globals
if [ -f "$BACKUP_DIR/globals.sql" ]; then
  # pg_dumpall --globals-only writes one statement a line. Each goes on its
  # own with psql -c, which sends a string that does not start with a
  # backslash to the server as it is: no psql meta-command of the file runs
  # (psql -f would run \! as a shell command in the Job; shown against
  # PostgreSQL by test/engines TestPostgresRestoreRunsNoMetaCommand). Roles
  # that exist already, or that the user may not create, are skipped.
  while IFS= read -r line || [ -n "$line" ]; do
    case "$line" in ''|--*|\\*) continue;; esac
    q -c "$line" >/dev/null 2>&1 || true
  done <"$BACKUP_DIR/globals.sql"
fi
printf '{"phase":"Succeeded","databases":%d}\n' "$count" >"$RESULT_FILE"
cat "$RESULT_FILE"
`

// mysqlRestore loads databases.sql as root into a server without user
// databases (or with only what a previous attempt loaded, marked by the
// database fleetdb_restore).
var mysqlRestore = restorePrelude + restoreEngine("mysql") + `pw="${ROOT_PASSWORD:-}"
[ -n "$pw" ] || pw="$APP_PASSWORD"
case "$pw" in ''|*[!A-Za-z0-9_-]*) echo "restore: the password is empty or has characters other than A-Z a-z 0-9 _ -" >&2; exit 2;; esac
printf '[client]\nuser=root\npassword="%s"\nhost=%s\nport=%s\n' "$pw" "$DB_HOST" "$DB_PORT" >"$tmpd/client.cnf"
pw=
my() { mysql --defaults-file="$tmpd/client.cnf" "$@"; }
step=connect
my -N -B -e 'SELECT 1' >/dev/null
step="check the target"
user_dbs() { my -N -B -e "SELECT SCHEMA_NAME FROM information_schema.SCHEMATA WHERE SCHEMA_NAME NOT IN ('mysql', 'information_schema', 'performance_schema', 'sys', 'fleetdb_restore') ORDER BY 1"; }
marked=$(my -N -B -e "SELECT count(*) FROM information_schema.SCHEMATA WHERE SCHEMA_NAME = 'fleetdb_restore'")
dbs=$(user_dbs)
if [ -n "$dbs" ] && [ "$marked" = 0 ]; then
  echo "restore: the server holds user databases; refusing to restore over them" >&2
  exit 6
fi
if [ -n "$dbs" ]; then
  step="drop what a previous attempt loaded"
  echo "$dbs" | while IFS= read -r d; do
    case "$d" in *'` + "`" + `'*|*\\*) exit 3;; esac
    my -e "DROP DATABASE \` + "`" + `$d\` + "`" + `"
  done
fi
my -e 'CREATE DATABASE IF NOT EXISTS fleetdb_restore'
step="load databases.sql"
[ -f "$BACKUP_DIR/databases.sql" ] || exit 4
# --binary-mode: the client runs no client command of the file (\! runs a
# shell command, \. reads another file) but delimiter and charset, which
# mysqldump's routines and triggers need; a dump (or a name in one of
# its comments) cannot run anything in the restore Job (shown against
# MariaDB by test/engines TestMySQLRestoreRunsNoClientCommand).
my --binary-mode <"$BACKUP_DIR/databases.sql"
step="finish"
my -e 'DROP DATABASE fleetdb_restore'
count=$(user_dbs | grep -c . || true)
printf '{"phase":"Succeeded","databases":%d}\n' "$count" >"$RESULT_FILE"
cat "$RESULT_FILE"
`
