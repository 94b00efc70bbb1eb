package member

import (
	"errors"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	fleetv1alpha1 "github.com/fleetdb/fleetdb/apis/v1alpha1"
)

// Keys of the credentials Secret data (the same in the hub Secret and in every member).
const (
	// CredentialsUsernameKey holds the database user name.
	CredentialsUsernameKey = "username"
	// CredentialsPasswordKey holds the database user's password.
	CredentialsPasswordKey = "password"
)

// DefaultImageRepository is where the official engine images come from when
// Params.ImageRepository is empty: Docker Hub's library ("postgres", "mysql").
const DefaultImageRepository = "docker.io/library"

// Paths inside the database container.
const (
	dataVolume   = "data"
	configVolume = "config"
	configMount  = "/etc/fleetdb"
)

// engine is everything that differs between postgres and mysql.
type engine struct {
	// name is the image name, the container name and the port name.
	name string
	port int32
	// dataMount is where the "data" volume is mounted.
	dataMount string
	// configMount is where the ConfigMap is mounted (read-only), configFile the key in it.
	configMount string
	configFile  string
	config      string
	// command, when set, replaces the image's entrypoint (args follow it).
	command []string
	// args are appended to the image's entrypoint.
	args []string
	// initScript, when set, is a script of the ConfigMap (key initScriptKey)
	// that the image runs once, when it initialises an empty data directory:
	// mounted as initScriptDir/initScriptKey.
	initScript string
	// env builds the container environment from the credentials Secret,
	// whose data is creds.
	env func(secret string, creds map[string][]byte) []corev1.EnvVar
	// readiness is run with sh -c so that it can read the env; kubelet only
	// expands $(VAR) for literal env values, not for values from a Secret.
	readiness string
	// checkCredentials rejects credentials the image cannot use; its errors never contain a value.
	checkCredentials func(username string) error
}

var engines = map[fleetv1alpha1.Engine]engine{
	fleetv1alpha1.EnginePostgres: {
		name:      "postgres",
		port:      5432,
		dataMount: "/var/lib/postgresql/data",
		// The image reads the whole server configuration from config_file;
		// pg_hba.conf stays in PGDATA where initdb writes it.
		configMount: configMount,
		configFile:  "postgresql.conf",
		config: `# Managed by fleetdb: edits are overwritten.
listen_addresses = '*'
port = 5432
max_connections = 100
shared_buffers = 128MB
dynamic_shared_memory_type = posix
password_encryption = scram-sha-256
log_destination = 'stderr'
logging_collector = off
log_timezone = 'UTC'
timezone = 'UTC'
`,
		// The image makes POSTGRES_USER the superuser: that is "postgres",
		// whose password is random, drawn at each start and kept nowhere
		// (the image needs one to initialise; fleetdb never connects as
		// the superuser, and an administrator reaches it with kubectl exec
		// over the container's local socket, which initdb trusts). The
		// application user is created by initScript, no superuser (issue
		// 42, item 5: a superuser runs shell commands with COPY ... TO
		// PROGRAM). A data directory initialised before keeps the users
		// it has: see docs/security.md.
		command: []string{"sh", "-c", postgresStart, "postgres"},
		args:    []string{"-c", "config_file=" + configMount + "/postgresql.conf"},
		env: func(secret string, _ map[string][]byte) []corev1.EnvVar {
			return []corev1.EnvVar{
				{Name: "POSTGRES_USER", Value: "postgres"},
				secretEnv(postgresAppUserEnv, secret, CredentialsUsernameKey),
				secretEnv(postgresAppPasswordEnv, secret, CredentialsPasswordKey),
				// A sub-directory, so that a volume's lost+found does not stop initdb.
				{Name: "PGDATA", Value: "/var/lib/postgresql/data/pgdata"},
			}
		},
		initScript:       postgresAppUserScript,
		readiness:        `exec pg_isready -q -h 127.0.0.1 -p 5432 -U "$POSTGRES_USER"`,
		checkCredentials: func(string) error { return nil },
	},
	fleetv1alpha1.EngineMySQL: {
		name:      "mysql",
		port:      3306,
		dataMount: "/var/lib/mysql",
		// The image includes every file of /etc/mysql/conf.d.
		configMount: "/etc/mysql/conf.d",
		configFile:  "fleetdb.cnf",
		config: `# Managed by fleetdb: edits are overwritten.
[mysqld]
# A sub-directory, so that a volume's lost+found does not stop --initialize.
datadir = /var/lib/mysql/data
port = 3306
skip-name-resolve
character-set-server = utf8mb4
collation-server = utf8mb4_0900_ai_ci
max_connections = 151
`,
		env: func(secret string, creds map[string][]byte) []corev1.EnvVar {
			// root has a password of its own; a Database created before
			// that keeps root on the application password it was
			// initialised with until its first rotation records it.
			root := CredentialsPasswordKey
			if len(creds[CredentialsRootPasswordKey]) > 0 {
				root = CredentialsRootPasswordKey
			}
			return []corev1.EnvVar{
				secretEnv("MYSQL_ROOT_PASSWORD", secret, root),
				secretEnv("MYSQL_USER", secret, CredentialsUsernameKey),
				secretEnv("MYSQL_PASSWORD", secret, CredentialsPasswordKey),
			}
		},
		// MYSQL_PWD keeps the password off the command line.
		readiness: `MYSQL_PWD="$MYSQL_PASSWORD" exec mysqladmin ping --silent -h 127.0.0.1 -P 3306 -u "$MYSQL_USER"`,
		checkCredentials: func(username string) error {
			// The image refuses MYSQL_USER=root: root gets MYSQL_ROOT_PASSWORD.
			if username == "root" {
				return errors.New("the mysql image reserves the user name root; choose another user name")
			}
			return nil
		},
	},
}

// The postgres image's initialisation scripts: initScriptDir holds the
// files its entrypoint runs (or, for *.sh not executable, sources) once, on
// an empty data directory (docker-entrypoint.sh docker_process_init_files,
// docker-library/postgres); initScriptKey is fleetdb's, in the ConfigMap.
const (
	initScriptDir = "/docker-entrypoint-initdb.d"
	initScriptKey = "fleetdb-app-user.sh"
)

// The application user's name and password in the postgres container.
const (
	postgresAppUserEnv     = "FLEETDB_APP_USER"
	postgresAppPasswordEnv = "FLEETDB_APP_PASSWORD"
)

// postgresStart runs the image's entrypoint with a superuser password drawn
// from /dev/urandom (48 hex digits) and kept nowhere: the image refuses to
// initialise without one, and nothing of fleetdb's uses it.
const postgresStart = `POSTGRES_PASSWORD="$(od -An -v -N24 -tx1 /dev/urandom | tr -d ' \n')"
export POSTGRES_PASSWORD
exec docker-entrypoint.sh "$@"`

// postgresAppUserScript creates the application user as CloudNativePG's
// initdb does (no superuser, no CREATEDB, CREATEROLE, REPLICATION or
// BYPASSRLS) and its database, named after it and owned by it. The
// entrypoint sources it with its temporary server running on the local
// socket; docker_process_sql connects as the superuser. psql's :"..." and
// :'...' quote the name and the password.
const postgresAppUserScript = `# Managed by fleetdb: the application user, no superuser, owning its database.
case "$` + postgresAppUserEnv + `" in
  ''|postgres) echo "fleetdb: the application user may be neither empty nor postgres (the superuser)" >&2; exit 1;;
esac
POSTGRES_DB= docker_process_sql --dbname postgres --set user="$` + postgresAppUserEnv + `" --set password="$` + postgresAppPasswordEnv + `" <<'EOSQL'
CREATE ROLE :"user" LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOREPLICATION NOBYPASSRLS PASSWORD :'password';
CREATE DATABASE :"user" OWNER :"user";
EOSQL
`

// PostgresAppUserScript is the script the StatefulSet backend's postgres
// runs once, when it initialises its data directory (test/engines runs it
// against a real server).
func PostgresAppUserScript() string { return postgresAppUserScript }

func engineFor(e fleetv1alpha1.Engine) (engine, error) {
	eng, ok := engines[e]
	if !ok {
		return engine{}, fmt.Errorf("unknown engine %q", e)
	}
	return eng, nil
}

func secretEnv(name, secret, key string) corev1.EnvVar {
	return corev1.EnvVar{
		Name: name,
		ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
			LocalObjectReference: corev1.LocalObjectReference{Name: secret},
			Key:                  key,
		}},
	}
}

// container is the database container of the StatefulSet's pods.
func (e engine) container(image, secret string, creds map[string][]byte, resources corev1.ResourceRequirements) corev1.Container {
	tcp := corev1.ProbeHandler{TCPSocket: &corev1.TCPSocketAction{Port: intstr.FromString(e.name)}}
	return corev1.Container{
		Name:         e.name,
		Image:        image,
		Command:      e.command,
		Args:         e.args,
		Ports:        []corev1.ContainerPort{{Name: e.name, ContainerPort: e.port, Protocol: corev1.ProtocolTCP}},
		Env:          e.env(secret, creds),
		VolumeMounts: e.volumeMounts(),
		Resources:    resources,
		// A first start initialises the data directory with the server
		// listening on a socket only: the startup probe gives it ten minutes
		// before liveness may restart the container.
		StartupProbe: &corev1.Probe{
			ProbeHandler: tcp, PeriodSeconds: 5, TimeoutSeconds: 3, FailureThreshold: 120,
		},
		LivenessProbe: &corev1.Probe{
			ProbeHandler: tcp, PeriodSeconds: 10, TimeoutSeconds: 5, FailureThreshold: 6,
		},
		ReadinessProbe: &corev1.Probe{
			ProbeHandler: corev1.ProbeHandler{Exec: &corev1.ExecAction{
				Command: []string{"sh", "-c", e.readiness},
			}},
			PeriodSeconds: 10, TimeoutSeconds: 5, FailureThreshold: 3,
		},
		SecurityContext: containerSecurityContext(),
	}
}

// volumeMounts are the database container's: the data, the ConfigMap, and
// the ConfigMap's initScript where the image runs it.
func (e engine) volumeMounts() []corev1.VolumeMount {
	mounts := []corev1.VolumeMount{
		{Name: dataVolume, MountPath: e.dataMount},
		{Name: configVolume, MountPath: e.configMount, ReadOnly: true},
	}
	if e.initScript != "" {
		mounts = append(mounts, corev1.VolumeMount{Name: configVolume, MountPath: initScriptDir + "/" + initScriptKey, SubPath: initScriptKey, ReadOnly: true})
	}
	return mounts
}

// ptrTo returns a pointer to v.
func ptrTo[T any](v T) *T { return &v }

// podSecurityContext is the pod security context of every fleetdb pod (the
// database and its Jobs): the images' non-root user, RuntimeDefault seccomp.
func podSecurityContext() *corev1.PodSecurityContext {
	return &corev1.PodSecurityContext{
		RunAsNonRoot:   ptrTo(true),
		RunAsUser:      ptrTo(runAsID),
		RunAsGroup:     ptrTo(runAsID),
		FSGroup:        ptrTo(runAsID),
		SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
	}
}

// containerSecurityContext is the security context of every fleetdb
// container: non-root, no privilege escalation, no capabilities.
func containerSecurityContext() *corev1.SecurityContext {
	return &corev1.SecurityContext{
		RunAsNonRoot:             ptrTo(true),
		AllowPrivilegeEscalation: ptrTo(false),
		Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
		SeccompProfile:           &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
	}
}
