package member

import (
	"crypto/sha256"
	"encoding/hex"

	corev1 "k8s.io/api/core/v1"

	fleetv1alpha1 "github.com/fleetdb/fleetdb/apis/v1alpha1"
)

// TLS of the StatefulSet backend's PostgreSQL (issue 42, item 6): the
// server presents a certificate the hub issues from a CA of the Database's
// own (internal/pki IssueInstance, kept in a hub Secret: the CA key never
// leaves the hub), and the rotation Job, which sends ALTER ROLE with the new
// password, connects with sslmode verify-full against that CA. The member
// gets one kubernetes.io/tls Secret, InstanceTLSSecretName: the server
// certificate and key, mounted into the postgres container, and the CA
// certificate, the only key the rotation Job mounts.

// InstanceCertificates are the PEM data of the instance TLS Secret.
type InstanceCertificates struct {
	// CACert is the Database's instance CA certificate (never its key).
	CACert []byte
	// ServerCert and ServerKey are the instances' server certificate (for
	// InstanceDNSNames) and its private key.
	ServerCert, ServerKey []byte
}

// Fingerprint is the SHA-256 (hex) of the server certificate: what a
// sharded hub's placement names (DatabasePlacementSpec.InstanceCertificate).
func (c *InstanceCertificates) Fingerprint() string {
	sum := sha256.Sum256(c.ServerCert)
	return hex.EncodeToString(sum[:])
}

// complete reports whether every PEM block is there.
func (c *InstanceCertificates) complete() bool {
	return c != nil && len(c.CACert) > 0 && len(c.ServerCert) > 0 && len(c.ServerKey) > 0
}

// InstanceTLSSecretName is the member's kubernetes.io/tls Secret of the
// StatefulSet backend's PostgreSQL: tls.crt, tls.key and ca.crt.
func InstanceTLSSecretName(db string) string { return db + "-instance-tls" }

// instanceTLSVolume and instanceTLSMount are the Secret's volume and where
// the containers see it. Not under configMount: that is a read-only
// ConfigMap volume.
const (
	instanceTLSVolume = "tls"
	instanceTLSMount  = "/etc/fleetdb-tls"
)

// instanceKeyMode is the mode of the mounted files: kubelet writes a Secret
// volume's files as root and, with the pod's fsGroup (runAsID), gives them
// that group, so the key is root:999 0640 — the one group-readable key
// PostgreSQL accepts (be_tls_init / check_ssl_key_file_permissions: a key
// owned by root may be 0640, one owned by the server's user must be 0600).
const instanceKeyMode int32 = 0o640

// InstanceDNSNames are the names the server certificate of a Database's
// StatefulSet-backend instances carries: every instance by its headless
// Service name, "<name>-<i>.<name>-hl" as the rotation Job connects to it,
// short, with the namespace and with ".svc" (wildcards: one certificate
// serves every replica count and every member), and the client Service.
func InstanceDNSNames(namespace, name string) []string {
	hl := headlessName(name)
	return []string{
		"*." + hl, "*." + hl + "." + namespace, "*." + hl + "." + namespace + ".svc",
		name, name + "." + namespace, name + "." + namespace + ".svc",
	}
}

// postgresTLSConfig is added to postgresql.conf when the instances serve TLS.
const postgresTLSConfig = `# TLS with the certificate fleetdb issues for this Database.
ssl = on
ssl_cert_file = '` + instanceTLSMount + `/` + corev1.TLSCertKey + `'
ssl_key_file = '` + instanceTLSMount + `/` + corev1.TLSPrivateKeyKey + `'
ssl_min_protocol_version = 'TLSv1.2'
`

// instanceTLS reports whether the renderer's StatefulSet serves TLS: a
// postgres Database on the StatefulSet backend with certificates.
func (r renderer) instanceTLS() bool {
	return r.db.Spec.Engine == fleetv1alpha1.EnginePostgres && r.p.InstanceTLS.complete()
}

// instanceTLSSecret is the member Secret with the server certificate, its
// key and the CA certificate.
func (r renderer) instanceTLSSecret() *corev1.Secret {
	c := r.p.InstanceTLS
	return &corev1.Secret{
		TypeMeta:   typeMeta(corev1.SchemeGroupVersion, "Secret"),
		ObjectMeta: r.meta(InstanceTLSSecretName(r.db.Name)),
		Type:       corev1.SecretTypeTLS,
		Data: map[string][]byte{
			TLSCAKey:   append([]byte(nil), c.CACert...),
			TLSCertKey: append([]byte(nil), c.ServerCert...),
			TLSKeyKey:  append([]byte(nil), c.ServerKey...),
		},
	}
}

// instanceTLSVolumeOf is the Secret volume projecting keys of the
// Database's instance TLS Secret.
func instanceTLSVolumeOf(db string, keys ...string) corev1.Volume {
	items := make([]corev1.KeyToPath, 0, len(keys))
	for _, k := range keys {
		items = append(items, corev1.KeyToPath{Key: k, Path: k})
	}
	return corev1.Volume{
		Name: instanceTLSVolume,
		VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{
			SecretName: InstanceTLSSecretName(db), Items: items, DefaultMode: ptrTo(instanceKeyMode),
		}},
	}
}

func instanceTLSVolumeMount() corev1.VolumeMount {
	return corev1.VolumeMount{Name: instanceTLSVolume, MountPath: instanceTLSMount, ReadOnly: true}
}

// RotationCAFile is where the postgres rotation Job reads the CA
// certificate it verifies the instances with (PGSSLROOTCERT).
const RotationCAFile = instanceTLSMount + "/" + TLSCAKey
