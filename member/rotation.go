package member

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"strconv"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	fleetv1alpha1 "github.com/fleetdb/fleetdb/apis/v1alpha1"
)

// Keys of the credentials Secret data used by credential rotation. They are
// in the hub Secret and, as every key is, in each member's copy.
const (
	// CredentialsRootPasswordKey holds mysql's root password. It is generated
	// once with the Database and never replaced; a Database created before it
	// existed gets it at its first rotation (root keeps the password it was
	// initialised with, the application user's at the time).
	CredentialsRootPasswordKey = "root-password"
	// CredentialsPendingPasswordKey holds the password a rotation moves to,
	// from its start until every member switched.
	CredentialsPendingPasswordKey = "pending-password"
	// CredentialsPreviousPasswordKey holds, in the Secret of a member that
	// switched before the rest of the fleet, the password the hub Secret
	// still has (so that a lost hub Secret is recovered right from it).
	CredentialsPreviousPasswordKey = "previous-password"
	// CredentialsRotationTokenKey holds the token of the rotation under way.
	CredentialsRotationTokenKey = "rotation-token"
	// CredentialsRotatedTokenKey holds the token of the last completed rotation.
	CredentialsRotatedTokenKey = "rotated-token"
)

// InRotation reports credentials (a Secret's data) that carry a rotation's
// state: a pending password or the token of the rotation under way.
func InRotation(data map[string][]byte) bool {
	return len(data[CredentialsPendingPasswordKey]) > 0 || len(data[CredentialsRotationTokenKey]) > 0
}

// RotationParams is everything RotationJob needs.
type RotationParams struct {
	// Database is the hub object.
	Database *fleetv1alpha1.Database
	// Cluster is the member cluster name (it selects the overrides: the
	// instances to rotate).
	Cluster string
	// Token is the rotation token (the annotation's value).
	Token string
	// Attempt numbers the Job (1, 2, ... after failures).
	Attempt int
	// StatefulSet is the Database's StatefulSet in the member; the Job is
	// owned by it, so that the garbage collector removes it with the workload.
	StatefulSet *appsv1.StatefulSet
	// ImageRepository as in Params.
	ImageRepository string
}

// RotationHash is the LabelRotation value of a token's Jobs.
func RotationHash(token string) string {
	sum := sha256.Sum256([]byte(token))
	return hex.EncodeToString(sum[:5])
}

// RotationJobName is the name of a rotation Job: at most 63 characters for
// a Database name of at most 40.
func RotationJobName(db, token string, attempt int) string {
	return db + "-rotate-" + RotationHash(token) + "-" + strconv.Itoa(attempt)
}

// RotationJobLabels select the rotation Jobs of a Database for one token.
func RotationJobLabels(db *fleetv1alpha1.Database, token string) map[string]string {
	l := Labels(db)
	delete(l, fleetv1alpha1.LabelDatabaseUID)
	l[fleetv1alpha1.LabelRotation] = RotationHash(token)
	return l
}

// RotationScript returns the shell script a rotation Job of engine e runs.
// It is idempotent: an instance that already accepts the new password is
// skipped, so a Job run again (after a hub restart, a lost Job) succeeds.
// Passwords come from the environment (kubelet fills it from the member
// Secret) and never reach a command line: they are passed to the clients in
// their password variables and to the SQL on standard input.
func RotationScript(e fleetv1alpha1.Engine) (string, error) {
	switch e {
	case fleetv1alpha1.EnginePostgres:
		return postgresRotation, nil
	case fleetv1alpha1.EngineMySQL:
		return mysqlRotation, nil
	}
	return "", fmt.Errorf("unknown engine %q", e)
}

// rotationPrelude refuses values that would need quoting in SQL: the hub
// generates passwords from the base64url alphabet and the user name "app".
const rotationPrelude = `set -eu
safe() { case "$2" in ''|*[!A-Za-z0-9_-]*) echo "rotation: $1 is empty or has characters other than A-Z a-z 0-9 _ -" >&2; exit 2;; esac; }
safe "the user name" "$DB_USER"
safe "the new password" "$NEW_PASSWORD"
`

// postgresRotation changes the application role's password on every
// instance, connecting as that role with its current password (a role may
// always change its own password). It connects only with sslmode
// verify-full (PGSSLMODE, PGSSLROOTCERT: rotationEnv): the instance must
// present a certificate of the Database's CA for the name the Job connects
// to before the password leaves the pod; it refuses to run otherwise.
const postgresRotation = rotationPrelude + `if [ "${PGSSLMODE:-}" != verify-full ] || [ ! -s "${PGSSLROOTCERT:-}" ]; then
  echo "rotation: refusing to send the password without TLS verified against the Database's CA (PGSSLMODE verify-full, PGSSLROOTCERT)" >&2
  exit 2
fi
export PGUSER="$DB_USER" PGPORT="$DB_PORT" PGDATABASE=postgres PGCONNECT_TIMEOUT=10
for host in $DB_HOSTS; do
  if PGPASSWORD="$NEW_PASSWORD" psql -h "$host" -w -Atq -c 'SELECT 1' >/dev/null 2>&1; then
    echo "rotation: $host already accepts the new password"
    continue
  fi
  printf "ALTER ROLE \"%s\" PASSWORD '%s';\n" "$DB_USER" "$NEW_PASSWORD" |
    PGPASSWORD="$CURRENT_PASSWORD" psql -h "$host" -w -q -v ON_ERROR_STOP=1 -f -
  PGPASSWORD="$NEW_PASSWORD" psql -h "$host" -w -Atq -c 'SELECT 1' >/dev/null
  echo "rotation: $host switched"
done
`

// mysqlRotation changes the application user's password on every instance,
// connecting as root (whose password never changes); mysql and MariaDB
// accept the statement alike.
const mysqlRotation = rotationPrelude + `for host in $DB_HOSTS; do
  if MYSQL_PWD="$NEW_PASSWORD" mysql -h "$host" -P "$DB_PORT" -u "$DB_USER" --connect-timeout=10 -e 'SELECT 1' >/dev/null 2>&1; then
    echo "rotation: $host already accepts the new password"
    continue
  fi
  printf "ALTER USER '%s'@'%%' IDENTIFIED BY '%s';\n" "$DB_USER" "$NEW_PASSWORD" |
    MYSQL_PWD="$ROOT_PASSWORD" mysql -h "$host" -P "$DB_PORT" -u root --connect-timeout=10
  MYSQL_PWD="$NEW_PASSWORD" mysql -h "$host" -P "$DB_PORT" -u "$DB_USER" --connect-timeout=10 -e 'SELECT 1' >/dev/null
  echo "rotation: $host switched"
done
`

// RotationJob renders the Job that moves every instance of the Database in
// one member to the pending password of the member's credentials Secret.
// It reads the current and the new password from that Secret: the member
// Secret must carry CredentialsPendingPasswordKey before the Job is created.
func RotationJob(p RotationParams) (*batchv1.Job, error) {
	db := p.Database
	if db == nil || p.StatefulSet == nil || p.Token == "" || p.Attempt < 1 {
		return nil, errors.New("rotation job: Database, StatefulSet, token and attempt are required")
	}
	r, script, err := jobRenderer(db, p.Cluster, p.ImageRepository, "rotation job", RotationScript)
	if err != nil {
		return nil, err
	}
	meta := r.meta(RotationJobName(db.Name, p.Token, p.Attempt))
	meta.Labels = maps.Clone(Labels(db))
	meta.Labels[fleetv1alpha1.LabelRotation] = RotationHash(p.Token)
	meta.Annotations[fleetv1alpha1.AnnotationRotationAttempt] = strconv.Itoa(p.Attempt)
	meta.OwnerReferences = []metav1.OwnerReference{{
		APIVersion: appsv1.SchemeGroupVersion.String(), Kind: "StatefulSet",
		Name: p.StatefulSet.Name, UID: p.StatefulSet.UID,
	}}
	c := r.eng.container(r.image(), secretName(db.Name), nil, corev1.ResourceRequirements{})
	container := corev1.Container{
		Name:            "rotate",
		Image:           c.Image,
		Command:         []string{"sh", "-c", script},
		Env:             rotationEnv(r),
		SecurityContext: c.SecurityContext,
	}
	pod := r.podSpec(podSelector(db))
	pod.Affinity = nil
	pod.Volumes = nil
	if db.Spec.Engine == fleetv1alpha1.EnginePostgres {
		// The CA certificate only: the server key stays out of the Job.
		container.VolumeMounts = []corev1.VolumeMount{instanceTLSVolumeMount()}
		pod.Volumes = []corev1.Volume{instanceTLSVolumeOf(db.Name, TLSCAKey)}
	}
	pod.Containers = []corev1.Container{container}
	pod.RestartPolicy = corev1.RestartPolicyNever
	return &batchv1.Job{
		TypeMeta:   typeMeta(batchv1.SchemeGroupVersion, "Job"),
		ObjectMeta: meta,
		Spec: batchv1.JobSpec{
			BackoffLimit:          ptrTo(int32(2)),
			ActiveDeadlineSeconds: ptrTo(int64(600)),
			Template:              corev1.PodTemplateSpec{Spec: pod},
		},
	}, nil
}

// rotationEnv is the Job's environment: the instances' addresses and the
// credentials from the member Secret.
func rotationEnv(r renderer) []corev1.EnvVar {
	secret := secretName(r.db.Name)
	hosts := make([]string, 0, r.eff.replicas)
	for i := range r.eff.replicas {
		hosts = append(hosts, fmt.Sprintf("%s-%d.%s", r.db.Name, i, headlessName(r.db.Name)))
	}
	env := []corev1.EnvVar{
		{Name: "DB_HOSTS", Value: strings.Join(hosts, " ")},
		{Name: "DB_PORT", Value: strconv.Itoa(int(r.eng.port))},
		secretEnv("DB_USER", secret, CredentialsUsernameKey),
		secretEnv("NEW_PASSWORD", secret, CredentialsPendingPasswordKey),
	}
	if r.db.Spec.Engine == fleetv1alpha1.EngineMySQL {
		return append(env, secretEnv("ROOT_PASSWORD", secret, CredentialsRootPasswordKey))
	}
	// verify-full: the hosts are "<name>-<i>.<name>-hl", which the server
	// certificate names (InstanceDNSNames), so the name is checked too.
	return append(env, secretEnv("CURRENT_PASSWORD", secret, CredentialsPasswordKey),
		corev1.EnvVar{Name: "PGSSLMODE", Value: "verify-full"},
		corev1.EnvVar{Name: "PGSSLROOTCERT", Value: RotationCAFile})
}

// SwitchedCredentials are the credentials a member that finished its
// rotation Job gets: the pending password as its password, the hub's as
// previous-password (the pending key stays until the hub switches too, so a
// Job run again still succeeds).
func SwitchedCredentials(creds map[string][]byte) map[string][]byte {
	out := maps.Clone(creds)
	out[CredentialsPasswordKey] = creds[CredentialsPendingPasswordKey]
	out[CredentialsPreviousPasswordKey] = creds[CredentialsPasswordKey]
	return out
}
