package member_test

import (
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"

	fleetv1alpha1 "github.com/fleetdb/fleetdb/apis/v1alpha1"
	"github.com/fleetdb/fleetdb/member"
)

func testInstanceTLS() *member.InstanceCertificates {
	return &member.InstanceCertificates{CACert: []byte("ca-pem"), ServerCert: []byte("server-pem"), ServerKey: []byte("key-pem")}
}

// TestRenderPostgresInstanceTLS (issue 42, item 6): with the hub's instance
// certificates, the StatefulSet backend's postgres serves TLS from a
// kubernetes.io/tls Secret mounted with a key mode PostgreSQL accepts
// (root:fsGroup 0640), and a renewed certificate restarts the pods.
func TestRenderPostgresInstanceTLS(t *testing.T) {
	g := NewWithT(t)
	p := member.Params{Database: testDatabase(fleetv1alpha1.EnginePostgres), Cluster: "eu-1", Credentials: testCredentials(), InstanceTLS: testInstanceTLS()}
	r := render(t, p)

	g.Expect(r.order[:3]).To(Equal([]string{"Namespace/team-a", "Secret/orders-credentials", "Secret/orders-instance-tls"}), "the Secret before the pods that mount it")
	s := r.objs["Secret/orders-instance-tls"].(*corev1.Secret)
	g.Expect(s.Type).To(Equal(corev1.SecretTypeTLS))
	g.Expect(s.Data).To(Equal(map[string][]byte{"ca.crt": []byte("ca-pem"), "tls.crt": []byte("server-pem"), "tls.key": []byte("key-pem")}))
	g.Expect(s.Labels).To(HaveKeyWithValue(fleetv1alpha1.LabelDatabaseName, "orders"))

	cm := r.objs["ConfigMap/orders-config"].(*corev1.ConfigMap)
	conf := cm.Data["postgresql.conf"]
	g.Expect(conf).To(ContainSubstring("ssl = on"))
	g.Expect(conf).To(ContainSubstring("ssl_cert_file = '/etc/fleetdb-tls/tls.crt'"))
	g.Expect(conf).To(ContainSubstring("ssl_key_file = '/etc/fleetdb-tls/tls.key'"))

	pod := r.sts().Spec.Template.Spec
	g.Expect(*pod.SecurityContext.FSGroup).To(BeEquivalentTo(999), "the key's group: the postgres user reads it")
	var tlsVol *corev1.Volume
	for i := range pod.Volumes {
		if pod.Volumes[i].Secret != nil {
			tlsVol = &pod.Volumes[i]
		}
	}
	g.Expect(tlsVol).NotTo(BeNil())
	g.Expect(tlsVol.Secret.SecretName).To(Equal("orders-instance-tls"))
	g.Expect(tlsVol.Secret.Items).To(ConsistOf(corev1.KeyToPath{Key: "tls.crt", Path: "tls.crt"}, corev1.KeyToPath{Key: "tls.key", Path: "tls.key"}))
	g.Expect(*tlsVol.Secret.DefaultMode).To(BeEquivalentTo(0o640), "PostgreSQL refuses a group-readable key unless root owns it with 0640")
	g.Expect(pod.Containers[0].VolumeMounts).To(ContainElement(corev1.VolumeMount{Name: tlsVol.Name, MountPath: "/etc/fleetdb-tls", ReadOnly: true}))

	hash := func(p member.Params) string {
		return render(t, p).sts().Spec.Template.Annotations[fleetv1alpha1.AnnotationConfigHash]
	}
	renewed := *p.InstanceTLS
	renewed.ServerCert = []byte("renewed-pem")
	q := p
	q.InstanceTLS = &renewed
	g.Expect(hash(q)).NotTo(Equal(hash(p)), "a renewed certificate restarts the pods (PostgreSQL reads it at start)")
	q.InstanceTLS = nil
	g.Expect(hash(q)).NotTo(Equal(hash(p)), "turning TLS on restarts the pods of an existing Database")

	// Without certificates: no TLS (the hub never renders so), no Secret volume.
	plain := render(t, q)
	g.Expect(plain.objs).NotTo(HaveKey("Secret/orders-instance-tls"))
	g.Expect(plain.objs["ConfigMap/orders-config"].(*corev1.ConfigMap).Data["postgresql.conf"]).NotTo(ContainSubstring("ssl"))

	// Incomplete certificates are refused.
	q.InstanceTLS = &member.InstanceCertificates{CACert: []byte("ca-pem")}
	_, err := member.Render(q)
	g.Expect(err).To(MatchError(ContainSubstring("incomplete")))
	g.Expect(err.Error()).NotTo(ContainSubstring("ca-pem"))

	// mysql ignores them (docs/security.md).
	my := render(t, member.Params{Database: testDatabase(fleetv1alpha1.EngineMySQL), Cluster: "eu-1", Credentials: testCredentials(), InstanceTLS: testInstanceTLS()})
	g.Expect(my.objs).NotTo(HaveKey("Secret/orders-instance-tls"))
}

// TestInstanceDNSNames: the certificate names every instance as the
// rotation Job reaches it ("<name>-<i>.<name>-hl", RotationJob's DB_HOSTS).
func TestInstanceDNSNames(t *testing.T) {
	g := NewWithT(t)
	g.Expect(member.InstanceDNSNames("team-a", "orders")).To(ConsistOf(
		"*.orders-hl", "*.orders-hl.team-a", "*.orders-hl.team-a.svc", "orders", "orders.team-a", "orders.team-a.svc"))
}
