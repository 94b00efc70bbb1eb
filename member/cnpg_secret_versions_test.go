package member_test

import (
	"strings"
	"testing"

	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/fleetdb/fleetdb/member"
)

// TestCNPGSecretsHaveReportedVersions: every Secret fleetdb renders for a
// CloudNativePG Cluster is one whose version CloudNativePG v1.30.0 records
// in status.secretsResourceVersion at each reconcile
// (refreshSecretResourceVersions, internal/controller/cluster_status.go:
// the application Secret GetApplicationSecretName names, the four Secrets
// of status.certificates, and the externalClusters' password, sslKey,
// sslCert and sslRootCert Secrets, GetExternalClusterSecrets in
// api/v1/cluster_funcs.go), and one fleetdb waits on under a key it reads
// (CNPGSecretVersions: the application key and the four certificate keys).
// A Secret the Cluster names only in externalClusters would be recorded
// under externalClusterSecretVersion, which fleetdb does not read: this
// test fails if one is ever rendered (docs/cloudnativepg.md, "Secrets and
// the versions CloudNativePG reports").
func TestCNPGSecretsHaveReportedVersions(t *testing.T) {
	for name, p := range map[string]member.Params{
		"Shared":                 {Database: cnpgTestDatabase(), Cluster: "eu-1", Credentials: testCredentials()},
		"PrimaryStandby primary": topologyParams("eu-1", "eu-1"),
		"PrimaryStandby standby": topologyParams("eu-1", "us-1"),
	} {
		t.Run(name, func(t *testing.T) {
			g := NewWithT(t)
			r := render(t, p)
			u := r.cluster()
			spec := u.Object["spec"].(map[string]any)

			// What CloudNativePG reads, as refreshSecretResourceVersions does.
			recorded := map[string]bool{}
			app := u.GetName() + "-app" // GetApplicationSecretName's default
			for _, method := range []string{"recovery", "pg_basebackup", "initdb"} {
				if n, _, _ := unstructured.NestedString(spec, "bootstrap", method, "secret", "name"); n != "" {
					app = n
					break
				}
			}
			recorded[app] = true
			for _, field := range []string{"serverCASecret", "clientCASecret", "serverTLSSecret", "replicationTLSSecret"} {
				if n, _, _ := unstructured.NestedString(spec, "certificates", field); n != "" {
					recorded[n] = true
				}
			}
			external := map[string]bool{}
			ecs, _, _ := unstructured.NestedSlice(spec, "externalClusters")
			for _, ec := range ecs {
				for _, ref := range []string{"password", "sslKey", "sslCert", "sslRootCert"} {
					if n, _, _ := unstructured.NestedString(ec.(map[string]any), ref, "name"); n != "" {
						recorded[n], external[n] = true, true
					}
				}
			}

			// What fleetdb waits on: a status with every key CloudNativePG fills.
			versions := map[string]any{}
			for _, key := range []string{"applicationSecretVersion", "serverSecretVersion", "serverCaSecretVersion",
				"clientCaSecretVersion", "replicationSecretVersion"} {
				versions[key] = "1"
			}
			g.Expect(unstructured.SetNestedMap(u.Object, versions, "status", "secretsResourceVersion")).To(Succeed())
			waited := member.CNPGSecretVersions(u)

			var secrets []string
			for _, k := range r.order {
				if n, ok := strings.CutPrefix(k, "Secret/"); ok {
					secrets = append(secrets, n)
				}
			}
			g.Expect(secrets).NotTo(BeEmpty())
			for _, n := range secrets {
				g.Expect(recorded).To(HaveKey(n), "Secret %s: CloudNativePG records no version of it", n)
				g.Expect(waited).To(HaveKey(n), "Secret %s: fleetdb reads no version of it", n)
			}
			for n := range external {
				g.Expect(waited).To(HaveKey(n), "externalClusters' Secret %s is also a certificate Secret, whose key fleetdb reads", n)
			}
		})
	}
}
