package member

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"

	fleetv1alpha1 "github.com/fleetdb/fleetdb/apis/v1alpha1"
)

// BackupScript returns the shell script the backup Job of engine e runs (the
// same string as the Job's command). Its environment (BackupJob renders it):
//
//   - BACKUP_ROOT, DB_NAMESPACE, DB_NAME, BACKUP_ID: the backup goes to
//     $BACKUP_ROOT/$DB_NAMESPACE/$DB_NAME/$BACKUP_ID, written into a
//     ".partial" sibling and renamed once complete, with manifest.json
//     (engine, server version, every file with its size and sha256) and
//     result.json (the result line);
//   - RESULT_FILE: the result line, one JSON object (BackupResult), goes
//     there (the termination message) and to standard output;
//   - DB_HOST, DB_PORT and the credentials: postgres PGUSER and PGPASSWORD
//     (libpq reads them); mysql ROOT_PASSWORD (may be empty: then root has
//     APP_PASSWORD), written to a private client option file.
//
// postgres: pg_dump -Fc of every database that allows connections, is no
// template and the user may connect to (db-<oid>.dump), and pg_dumpall
// --globals-only --no-role-passwords (globals.sql: roles without their
// passwords, tablespaces), which a user who is no superuser may run.
// mysql: one mysqldump --single-transaction --routines --events --triggers
// of every database but the system ones (databases.sql); accounts and
// grants are not in it.
//
// A script run again for a backup that completed writes nothing and
// reports it. Passwords never reach a command line or the output.
func BackupScript(e fleetv1alpha1.Engine) (string, error) {
	switch e {
	case fleetv1alpha1.EnginePostgres:
		return backupPrelude + postgresBackup + backupFinish, nil
	case fleetv1alpha1.EngineMySQL:
		return backupPrelude + mysqlBackup + backupFinish, nil
	}
	return "", fmt.Errorf("unknown engine %q", e)
}

// backupPrelude checks the names, reports a completed backup again, and
// prepares the work directory; a failure removes it and writes a result
// naming the step that failed (never a command's output).
const backupPrelude = `set -eu
umask 077
step=prepare
work=
tmpd=
on_exit() {
  rc=$?
  [ -n "$tmpd" ] && rm -rf "$tmpd"
  if [ "$rc" -ne 0 ]; then
    [ -n "$work" ] && rm -rf "$work"
    printf '{"phase":"Failed","step":"%s","exitCode":%d}\n' "$step" "$rc" >"$RESULT_FILE" || true
    echo "backup: failed at step $step (exit $rc)" >&2
  fi
}
trap on_exit EXIT
for v in "$DB_NAMESPACE" "$DB_NAME" "$BACKUP_ID"; do
  case "$v" in ''|*[!a-z0-9-]*) echo "backup: the namespace, the name and the backup id must be [-a-z0-9]" >&2; exit 2;; esac
done
json_str() { printf '%s' "$1" | tr -d '\000-\037' | sed 's/\\/\\\\/g; s/"/\\"/g'; }
dir="$BACKUP_ROOT/$DB_NAMESPACE/$DB_NAME/$BACKUP_ID"
if [ -f "$dir/manifest.json" ] && [ -f "$dir/result.json" ]; then
  echo "backup: $dir is complete already" >&2
  cat "$dir/result.json" >"$RESULT_FILE"
  cat "$dir/result.json"
  exit 0
fi
tmpd=$(mktemp -d)
: >"$tmpd/names"
work="$dir.partial"
rm -rf "$work"
mkdir -p "$work"
tab=$(printf '\t')
`

// postgresBackup dumps every database the user may connect to, by oid (any
// name is safe), and the globals.
const postgresBackup = `engine=postgres
export PGHOST="$DB_HOST" PGPORT="$DB_PORT" PGDATABASE=postgres PGCONNECT_TIMEOUT=10
q() { psql -X -w -Atq -v ON_ERROR_STOP=1 -c "$1"; }
step=connect
version=$(q 'SHOW server_version')
step=list
oids=$(q "SELECT oid FROM pg_database WHERE datallowconn AND NOT datistemplate AND has_database_privilege(oid, 'CONNECT') ORDER BY datname")
for oid in $oids; do
  case "$oid" in *[!0-9]*) exit 3;; esac
  step="pg_dump of database oid $oid"
  name=$(q "SELECT datname FROM pg_database WHERE oid = $oid")
  jname=$(q "SELECT to_json(datname) FROM pg_database WHERE oid = $oid")
  PGDATABASE="$name" pg_dump -w -Fc -f "$work/db-$oid.dump"
  printf 'db-%s.dump\t"database":%s\n' "$oid" "$jname" >>"$tmpd/names"
done
step=pg_dumpall
pg_dumpall -w --globals-only --no-role-passwords -f "$work/globals.sql"
printf 'globals.sql\t"globals":true\n' >>"$tmpd/names"
`

// mysqlBackup dumps every database but the system ones in one consistent
// snapshot, as root through a private option file.
const mysqlBackup = `engine=mysql
pw="${ROOT_PASSWORD:-}"
[ -n "$pw" ] || pw="$APP_PASSWORD"
case "$pw" in ''|*[!A-Za-z0-9_-]*) echo "backup: the password is empty or has characters other than A-Z a-z 0-9 _ -" >&2; exit 2;; esac
printf '[client]\nuser=root\npassword="%s"\nhost=%s\nport=%s\n' "$pw" "$DB_HOST" "$DB_PORT" >"$tmpd/client.cnf"
pw=
my() { mysql --defaults-file="$tmpd/client.cnf" "$@"; }
step=connect
version=$(my -N -B -e 'SELECT VERSION()')
step=list
dbs=$(my -N -B -e "SELECT SCHEMA_NAME FROM information_schema.SCHEMATA WHERE SCHEMA_NAME NOT IN ('mysql', 'information_schema', 'performance_schema', 'sys') ORDER BY 1")
set -f
old_ifs=$IFS
IFS='
'
set -- $dbs
IFS=$old_ifs
jnames=
for d in "$@"; do
  case "$d" in *\\*) echo "backup: a database name has characters mysql's batch output escapes; not supported" >&2; exit 3;; esac
  jnames="$jnames${jnames:+,}\"$(json_str "$d")\""
done
step=mysqldump
if [ "$#" -gt 0 ]; then
  # "--" ends the options: a database named like an option (--no-data)
  # is a name, not a flag that empties or redirects the dump (mysqldump's
  # option parser, my_getopt, reads "--" as the end of the options; shown
  # against MariaDB by test/engines TestMySQLBackupOptionLikeName).
  mysqldump --defaults-file="$tmpd/client.cnf" --single-transaction --routines --events --triggers --hex-blob --databases -- "$@" >"$work/databases.sql"
else
  echo "-- fleetdb: no user databases" >"$work/databases.sql"
fi
printf 'databases.sql\t"databases":[%s]\n' "$jnames" >>"$tmpd/names"
`

// backupFinish writes the manifest and the result, renames the work
// directory into place and reports the result.
const backupFinish = `step=manifest
total=0
files=
while IFS="$tab" read -r file extra; do
  size=$(wc -c <"$work/$file" | tr -d ' ')
  sum=$(sha256sum "$work/$file" | cut -d ' ' -f 1)
  total=$((total + size))
  files="$files${files:+,}{\"name\":\"$file\",\"sizeBytes\":$size,\"sha256\":\"$sum\",$extra}"
done <"$tmpd/names"
created=$(date -u +%Y-%m-%dT%H:%M:%SZ)
jversion=$(json_str "$version")
printf '{"formatVersion":1,"engine":"%s","version":"%s","namespace":"%s","database":"%s","backupID":"%s","created":"%s","sizeBytes":%d,"files":[%s]}\n' \
  "$engine" "$jversion" "$DB_NAMESPACE" "$DB_NAME" "$BACKUP_ID" "$created" "$total" "$files" >"$work/manifest.json"
printf '{"phase":"Succeeded","backupID":"%s","path":"%s","sizeBytes":%d,"engine":"%s","version":"%s","created":"%s"}\n' \
  "$BACKUP_ID" "$dir" "$total" "$engine" "$jversion" "$created" >"$work/result.json"
step=rename
rm -rf "$dir"
mv "$work" "$dir"
work=
cat "$dir/result.json" >"$RESULT_FILE"
cat "$dir/result.json"
`

// s3UploadScript copies a completed backup to the bucket (aws s3 cp reads
// the credentials from AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY).
const s3UploadScript = `set -eu
dir="$BACKUP_ROOT/$DB_NAMESPACE/$DB_NAME/$BACKUP_ID"
url="s3://$S3_BUCKET/${S3_PREFIX:+$S3_PREFIX/}$DB_NAMESPACE/$DB_NAME/$BACKUP_ID/"
if [ ! -f "$dir/manifest.json" ]; then
  printf '{"phase":"Failed","step":"s3-upload: no completed backup"}\n' >"$RESULT_FILE"
  exit 1
fi
if ! aws --endpoint-url "$S3_ENDPOINT" s3 cp --recursive --only-show-errors "$dir/" "$url"; then
  printf '{"phase":"Failed","step":"s3-upload"}\n' >"$RESULT_FILE"
  exit 1
fi
printf '{"phase":"Succeeded","url":"%s"}\n' "$url" >"$RESULT_FILE"
echo "backup: copied to $url"
`

// BackupResult is the result line a backup container writes to its
// termination message (and standard output).
type BackupResult struct {
	// Phase is Succeeded or Failed.
	Phase string `json:"phase"`
	// BackupID and Path name the backup on the volume (dump step).
	BackupID string `json:"backupID,omitempty"`
	Path     string `json:"path,omitempty"`
	// SizeBytes is the size of the backup's files (dump step).
	SizeBytes int64 `json:"sizeBytes,omitempty"`
	// Engine and Version are the engine and the server version dumped.
	Engine  string `json:"engine,omitempty"`
	Version string `json:"version,omitempty"`
	// Created is when the backup completed (RFC 3339, UTC).
	Created string `json:"created,omitempty"`
	// URL is where the S3 step copied the backup.
	URL string `json:"url,omitempty"`
	// Step names what failed, ExitCode its exit code.
	Step     string `json:"step,omitempty"`
	ExitCode int    `json:"exitCode,omitempty"`
}

// ParseBackupResult reads a termination message written by a backup container.
func ParseBackupResult(message string) (BackupResult, error) {
	var r BackupResult
	message = strings.TrimSpace(message)
	if message == "" {
		return r, errors.New("no backup result")
	}
	if err := json.Unmarshal([]byte(message), &r); err != nil {
		return r, fmt.Errorf("reading the backup result: %w", err)
	}
	if r.Phase != fleetv1alpha1.BackupPhaseSucceeded && r.Phase != fleetv1alpha1.BackupPhaseFailed {
		return r, fmt.Errorf("reading the backup result: unknown phase %q", r.Phase)
	}
	return r, nil
}

// BackupResultsFromPod returns the results the terminated containers of a
// backup Job's pod wrote: the dump container's (BackupContainerName) and,
// when there is one, the S3 upload's. ok is false until the dump container
// terminated with a readable result.
func BackupResultsFromPod(pod *corev1.Pod) (dump, upload *BackupResult, ok bool) {
	statuses := append(append([]corev1.ContainerStatus{}, pod.Status.InitContainerStatuses...), pod.Status.ContainerStatuses...)
	for _, s := range statuses {
		t := s.State.Terminated
		if t == nil {
			continue
		}
		r, err := ParseBackupResult(t.Message)
		if err != nil {
			continue
		}
		switch s.Name {
		case BackupContainerName:
			dump = &r
		case BackupUploadContainerName:
			upload = &r
		}
	}
	return dump, upload, dump != nil
}
