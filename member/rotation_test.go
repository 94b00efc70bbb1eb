package member_test

import (
	"strings"
	"testing"

	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	fleetv1alpha1 "github.com/fleetdb/fleetdb/apis/v1alpha1"
	"github.com/fleetdb/fleetdb/member"
)

func rotationParams(db *fleetv1alpha1.Database) member.RotationParams {
	return member.RotationParams{
		Database: db, Cluster: "eu-1", Token: "2026-11-30", Attempt: 2,
		StatefulSet: &appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Name: db.Name, UID: "sts-uid"}},
	}
}

// envSources maps each env var to "secret/key" or its literal value.
func envSources(c corev1.Container) map[string]string {
	out := map[string]string{}
	for _, e := range c.Env {
		if e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil {
			out[e.Name] = e.ValueFrom.SecretKeyRef.Name + "/" + e.ValueFrom.SecretKeyRef.Key
			continue
		}
		out[e.Name] = e.Value
	}
	return out
}

func TestRotationJobPostgres(t *testing.T) {
	g := NewWithT(t)
	db := testDatabase(fleetv1alpha1.EnginePostgres, func(db *fleetv1alpha1.Database) {
		db.Spec.Overrides = []fleetv1alpha1.OverrideSpec{{ClusterNames: []string{"eu-1"}, Replicas: ptr(int32(2))}}
	})
	job, err := member.RotationJob(rotationParams(db))
	g.Expect(err).NotTo(HaveOccurred())

	g.Expect(job.Name).To(Equal(member.RotationJobName("orders", "2026-11-30", 2)))
	g.Expect(job.Namespace).To(Equal("team-a"))
	g.Expect(job.Labels).To(HaveKeyWithValue(fleetv1alpha1.LabelRotation, member.RotationHash("2026-11-30")))
	g.Expect(job.Labels).To(HaveKeyWithValue(fleetv1alpha1.LabelManagedBy, fleetv1alpha1.ManagedByValue))
	for k, v := range member.RotationJobLabels(db, "2026-11-30") {
		g.Expect(job.Labels).To(HaveKeyWithValue(k, v), "selectable by RotationJobLabels")
	}
	g.Expect(job.Annotations).To(HaveKeyWithValue(fleetv1alpha1.AnnotationRotationAttempt, "2"))
	g.Expect(job.OwnerReferences).To(ConsistOf(HaveField("UID", BeEquivalentTo("sts-uid"))), "collected with the StatefulSet")
	g.Expect(job.Spec.BackoffLimit).NotTo(BeNil())
	g.Expect(job.Spec.ActiveDeadlineSeconds).NotTo(BeNil())

	pod := job.Spec.Template.Spec
	g.Expect(job.Spec.Template.Labels).To(BeEmpty(), "the Job's pod must not match the client Service")
	g.Expect(pod.RestartPolicy).To(Equal(corev1.RestartPolicyNever))
	g.Expect(*pod.AutomountServiceAccountToken).To(BeFalse())
	g.Expect(pod.Containers).To(HaveLen(1))
	c := pod.Containers[0]
	g.Expect(c.Image).To(Equal("docker.io/library/postgres:17"))
	g.Expect(*c.SecurityContext.RunAsNonRoot || *pod.SecurityContext.RunAsNonRoot).To(BeTrue())
	g.Expect(c.Command[:2]).To(Equal([]string{"sh", "-c"}))
	g.Expect(c.Command[2]).To(ContainSubstring("ALTER ROLE"))
	g.Expect(envSources(c)).To(Equal(map[string]string{
		"DB_HOSTS":         "orders-0.orders-hl orders-1.orders-hl", // the override's 2 instances
		"DB_PORT":          "5432",
		"DB_USER":          "orders-credentials/username",
		"CURRENT_PASSWORD": "orders-credentials/password",
		"NEW_PASSWORD":     "orders-credentials/pending-password",
		// TLS verified against the Database's CA, for the host name.
		"PGSSLMODE":     "verify-full",
		"PGSSLROOTCERT": "/etc/fleetdb-tls/ca.crt",
	}))
	// The CA certificate alone, from the instance TLS Secret: the server key
	// never reaches the Job.
	g.Expect(pod.Volumes).To(HaveLen(1))
	v := pod.Volumes[0]
	g.Expect(v.Secret).NotTo(BeNil())
	g.Expect(v.Secret.SecretName).To(Equal(member.InstanceTLSSecretName("orders")))
	g.Expect(v.Secret.Items).To(Equal([]corev1.KeyToPath{{Key: "ca.crt", Path: "ca.crt"}}))
	g.Expect(c.VolumeMounts).To(ConsistOf(corev1.VolumeMount{Name: v.Name, MountPath: "/etc/fleetdb-tls", ReadOnly: true}))
	g.Expect(member.RotationCAFile).To(Equal("/etc/fleetdb-tls/ca.crt"))
}

func TestRotationJobMySQL(t *testing.T) {
	g := NewWithT(t)
	job, err := member.RotationJob(rotationParams(testDatabase(fleetv1alpha1.EngineMySQL)))
	g.Expect(err).NotTo(HaveOccurred())
	c := job.Spec.Template.Spec.Containers[0]
	g.Expect(c.Image).To(Equal("docker.io/library/mysql:8.4"))
	g.Expect(c.Command[2]).To(ContainSubstring("ALTER USER"))
	g.Expect(envSources(c)).To(Equal(map[string]string{
		"DB_HOSTS":      "orders-0.orders-hl orders-1.orders-hl orders-2.orders-hl",
		"DB_PORT":       "3306",
		"DB_USER":       "orders-credentials/username",
		"ROOT_PASSWORD": "orders-credentials/root-password",
		"NEW_PASSWORD":  "orders-credentials/pending-password",
	}))
	g.Expect(job.Spec.Template.Spec.Volumes).To(BeEmpty(), "mysql: no instance TLS (docs/security.md)")
}

func TestRotationJobName(t *testing.T) {
	g := NewWithT(t)
	long := strings.Repeat("a", 40) // the longest Database name the CRD allows
	g.Expect(len(member.RotationJobName(long, strings.Repeat("t", 253), 999))).To(BeNumerically("<=", 63))
	g.Expect(member.RotationJobName("orders", "a", 1)).NotTo(Equal(member.RotationJobName("orders", "b", 1)))

	_, err := member.RotationJob(member.RotationParams{Database: testDatabase(fleetv1alpha1.EnginePostgres), Token: "t", Attempt: 1})
	g.Expect(err).To(HaveOccurred(), "no StatefulSet to own the Job")
}

// The scripts never put a password on a command line: they read the
// environment and feed SQL on standard input.
func TestRotationScriptsKeepPasswordsOffCommandLines(t *testing.T) {
	g := NewWithT(t)
	for _, e := range []fleetv1alpha1.Engine{fleetv1alpha1.EnginePostgres, fleetv1alpha1.EngineMySQL} {
		script, err := member.RotationScript(e)
		g.Expect(err).NotTo(HaveOccurred())
		for _, line := range strings.Split(script, "\n") {
			if strings.Contains(line, "PASSWORD") && (strings.Contains(line, "psql") || strings.Contains(line, "mysql ")) {
				g.Expect(line).To(MatchRegexp(`^\s*(if )?(PGPASSWORD|MYSQL_PWD)="\$[A-Z_]+" (psql|mysql) `),
					"%s: a client gets a password only through its environment variable: %q", e, line)
			}
		}
	}
}

func TestMySQLRootPassword(t *testing.T) {
	g := NewWithT(t)
	rootEnv := func(creds map[string][]byte) string {
		r := render(t, member.Params{Database: testDatabase(fleetv1alpha1.EngineMySQL), Cluster: "eu-1", Credentials: creds})
		return envSources(r.sts().Spec.Template.Spec.Containers[0])["MYSQL_ROOT_PASSWORD"]
	}
	// A Database created before root had its own password keeps root where it was initialised.
	g.Expect(rootEnv(testCredentials())).To(Equal("orders-credentials/password"))
	creds := testCredentials()
	creds[member.CredentialsRootPasswordKey] = []byte("root-secret")
	g.Expect(rootEnv(creds)).To(Equal("orders-credentials/root-password"))
}

func TestSwitchedCredentials(t *testing.T) {
	g := NewWithT(t)
	creds := testCredentials()
	creds[member.CredentialsPendingPasswordKey] = []byte("new")
	out := member.SwitchedCredentials(creds)
	g.Expect(string(out[member.CredentialsPasswordKey])).To(Equal("new"))
	g.Expect(string(out[member.CredentialsPendingPasswordKey])).To(Equal("new"))
	g.Expect(string(out[member.CredentialsPreviousPasswordKey])).To(Equal("s3cr3t-value"))
	g.Expect(string(creds[member.CredentialsPasswordKey])).To(Equal("s3cr3t-value"), "the input is not changed")
}
