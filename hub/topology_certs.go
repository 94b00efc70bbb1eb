package hub

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"maps"
	"math/big"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	fleetv1alpha1 "github.com/fleetdb/fleetdb/apis/v1alpha1"
	"github.com/fleetdb/fleetdb/member"
)

// Lifetimes of the certificates the hub issues for a PrimaryStandby
// Database's replication. A leaf certificate is issued again once less than
// certRenewBefore of it remains, and never outlives the CA.
const (
	caLifetime      = 10 * 365 * 24 * time.Hour
	leafLifetime    = 90 * 24 * time.Hour
	certRenewBefore = 30 * 24 * time.Hour
	// certBackdate covers clocks a little behind the hub's.
	certBackdate = time.Hour
)

// Keys of the hub Secret that keeps a Database's replication PKI.
const (
	pkiCACert  = "ca.crt"
	pkiCAKey   = "ca.key"
	pkiReplCrt = "replication.crt"
	pkiReplKey = "replication.key"
)

func pkiServerCert(m string) string { return "server-" + m + ".crt" }
func pkiServerKey(m string) string  { return "server-" + m + ".key" }

// topologyPKIName is the hub Secret with the Database's CA (certificate and
// private key) and the certificates it issued. Only the hub reads it: the
// CA key never goes to a member.
func topologyPKIName(db *fleetv1alpha1.Database) string { return db.Name + "-topology-pki" }

// errTopologyPKI is a terminal error about the hub's PKI Secret: it is not
// the Database's, or its CA cannot be read (someone edited it).
type errTopologyPKI struct{ msg string }

func (e errTopologyPKI) Error() string { return e.msg }

// topologyPKI is what ensureTopologyPKI returns: the certificates per
// member, and when the first of them is due for renewal.
type topologyPKI struct {
	certs map[string]member.TopologyCertificates
	renew time.Time
	// issued names the certificates this pass issued ("CA", "replication",
	// "server <member>"); empty when every one was kept.
	issued []string
}

// ensureTopologyPKI keeps the Database's replication PKI in its hub Secret
// (owned by the Database, like the credentials) and returns each member's
// certificates. hosts maps every placed member to its replication host.
//
// The CA is created once and never replaced: a new CA would break trust
// between members until every one of them had the new certificates. Leaf
// certificates (a server certificate per member for its host and in-cluster
// names, one streaming_replica client certificate) are issued when missing,
// when they no longer match (another host, another CA) and when less than
// certRenewBefore of their life remains. A Secret of that name that is not
// the Database's is never touched (errTopologyPKI).
func ensureTopologyPKI(ctx context.Context, c client.Client, live client.Reader, db *fleetv1alpha1.Database,
	hosts map[string]string, now time.Time) (topologyPKI, error) {
	var s corev1.Secret
	key := client.ObjectKey{Namespace: db.Namespace, Name: topologyPKIName(db)}
	err := c.Get(ctx, key, &s)
	if apierrors.IsNotFound(err) {
		err = live.Get(ctx, key, &s) // the cache may lag behind a create
	}
	switch {
	case apierrors.IsNotFound(err):
		return createTopologyPKI(ctx, c, db, key, hosts, now)
	case err != nil:
		return topologyPKI{}, fmt.Errorf("reading the topology PKI secret: %w", err)
	}
	if leftoverOf(&s, db) {
		if err := adopt(ctx, c, db, &s); err != nil {
			return topologyPKI{}, err
		}
	}
	if !metav1.IsControlledBy(&s, db) {
		return topologyPKI{}, errTopologyPKI{fmt.Sprintf("secret %s exists and is not owned by this Database; rename or remove it", key)}
	}
	data, pki, err := issueTopologyPKI(db, s.Data, hosts, now)
	if err != nil {
		return topologyPKI{}, err
	}
	if maps.EqualFunc(data, s.Data, bytes.Equal) {
		return pki, nil // a member dropped from placement only removes entries
	}
	patch := client.MergeFromWithOptions(s.DeepCopy(), client.MergeFromWithOptimisticLock{})
	s.Data = data
	if err := c.Patch(ctx, &s, patch); err != nil {
		return topologyPKI{}, fmt.Errorf("renewing the topology certificates: %w", err)
	}
	return pki, nil
}

// createTopologyPKI creates the hub Secret with a new CA and every certificate.
func createTopologyPKI(ctx context.Context, c client.Client, db *fleetv1alpha1.Database, key client.ObjectKey,
	hosts map[string]string, now time.Time) (topologyPKI, error) {
	data, pki, err := issueTopologyPKI(db, nil, hosts, now)
	if err != nil {
		return topologyPKI{}, err
	}
	s := corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name, Labels: map[string]string{
			fleetv1alpha1.LabelManagedBy:         fleetv1alpha1.ManagedByValue,
			fleetv1alpha1.LabelDatabaseNamespace: db.Namespace,
			fleetv1alpha1.LabelDatabaseName:      db.Name,
		}},
		Type: corev1.SecretTypeOpaque,
		Data: data,
	}
	if err := controllerutil.SetControllerReference(db, &s, c.Scheme()); err != nil {
		return topologyPKI{}, fmt.Errorf("owning the topology PKI secret: %w", err)
	}
	if err := c.Create(ctx, &s); err != nil {
		// AlreadyExists: another pass created it; the next reconcile reads it.
		return topologyPKI{}, fmt.Errorf("creating the topology PKI secret: %w", err)
	}
	return pki, nil
}

// issueTopologyPKI returns the Secret data with every certificate the
// members need valid (kept from old where it still is) and the per-member
// certificates. Entries of members no longer placed are dropped.
func issueTopologyPKI(db *fleetv1alpha1.Database, old map[string][]byte, hosts map[string]string, now time.Time) (map[string][]byte, topologyPKI, error) {
	ca, err := loadOrCreateCA(db, old, now)
	if err != nil {
		return nil, topologyPKI{}, err
	}
	data := map[string][]byte{pkiCACert: ca.certPEM, pkiCAKey: ca.keyPEM}
	pki := topologyPKI{certs: map[string]member.TopologyCertificates{}}
	if !bytes.Equal(old[pkiCACert], ca.certPEM) {
		pki.issued = append(pki.issued, "CA")
	}
	leaf := func(what, certKey, keyKey string, tmpl *x509.Certificate) error {
		certPEM, keyPEM, notAfter, err := ca.leaf(old[certKey], old[keyKey], tmpl, now)
		if err != nil {
			return err
		}
		if !bytes.Equal(old[certKey], certPEM) {
			pki.issued = append(pki.issued, what)
		}
		data[certKey], data[keyKey] = certPEM, keyPEM
		if due := notAfter.Add(-certRenewBefore); pki.renew.IsZero() || due.Before(pki.renew) {
			pki.renew = due
		}
		return nil
	}
	if err := leaf("replication", pkiReplCrt, pkiReplKey, clientTemplate()); err != nil {
		return nil, topologyPKI{}, err
	}
	for _, m := range slices.Sorted(maps.Keys(hosts)) {
		if err := leaf("server "+m, pkiServerCert(m), pkiServerKey(m), serverTemplate(db, hosts[m])); err != nil {
			return nil, topologyPKI{}, err
		}
		pki.certs[m] = member.TopologyCertificates{
			CACert:     data[pkiCACert],
			ServerCert: data[pkiServerCert(m)], ServerKey: data[pkiServerKey(m)],
			ReplicationCert: data[pkiReplCrt], ReplicationKey: data[pkiReplKey],
		}
	}
	return data, pki, nil
}

func serverTemplate(db *fleetv1alpha1.Database, host string) *x509.Certificate {
	return &x509.Certificate{
		Subject:     pkix.Name{CommonName: host},
		DNSNames:    append([]string{host}, member.ServerDNSNames(db.Namespace, db.Name)...),
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
}

func clientTemplate() *x509.Certificate {
	return &x509.Certificate{
		Subject:     pkix.Name{CommonName: member.ReplicationUser},
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
}

// authority is a Database's CA.
type authority struct {
	cert            *x509.Certificate
	key             *ecdsa.PrivateKey
	certPEM, keyPEM []byte
}

// loadOrCreateCA reads the CA from old, or creates one when old has none.
// A CA that is there but cannot be read is an error: replacing it would
// break the trust between the members.
func loadOrCreateCA(db *fleetv1alpha1.Database, old map[string][]byte, now time.Time) (*authority, error) {
	if len(old[pkiCACert]) == 0 && len(old[pkiCAKey]) == 0 {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			return nil, fmt.Errorf("generating the CA key: %w", err)
		}
		tmpl := &x509.Certificate{
			Subject:               pkix.Name{CommonName: fmt.Sprintf("fleetdb %s/%s replication CA", db.Namespace, db.Name)},
			IsCA:                  true,
			BasicConstraintsValid: true,
			KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
		}
		certPEM, err := sign(tmpl, tmpl, &key.PublicKey, key, now, now.Add(caLifetime))
		if err != nil {
			return nil, err
		}
		keyPEM, err := encodeKey(key)
		if err != nil {
			return nil, err
		}
		old = map[string][]byte{pkiCACert: certPEM, pkiCAKey: keyPEM}
	}
	cert, err := parseCert(old[pkiCACert])
	if err != nil || !cert.IsCA {
		return nil, errTopologyPKI{"the topology PKI secret holds a CA certificate the hub cannot read; restore it"}
	}
	key, err := parseKey(old[pkiCAKey])
	if err != nil || !key.PublicKey.Equal(cert.PublicKey) {
		return nil, errTopologyPKI{"the topology PKI secret holds a CA key the hub cannot read or that does not match its certificate; restore it"}
	}
	return &authority{cert: cert, key: key, certPEM: old[pkiCACert], keyPEM: old[pkiCAKey]}, nil
}

// leaf returns the certificate and key in certPEM/keyPEM when they are still
// good for tmpl (signed by the CA, same names, more than certRenewBefore
// left), else a new key and certificate.
func (a *authority) leaf(certPEM, keyPEM []byte, tmpl *x509.Certificate, now time.Time) ([]byte, []byte, time.Time, error) {
	if cert, err := parseCert(certPEM); err == nil && a.stillGood(cert, keyPEM, tmpl, now) {
		return certPEM, keyPEM, cert.NotAfter, nil
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, time.Time{}, fmt.Errorf("generating a certificate key: %w", err)
	}
	notAfter := now.Add(leafLifetime)
	if a.cert.NotAfter.Before(notAfter) {
		notAfter = a.cert.NotAfter
	}
	certPEM, err = sign(tmpl, a.cert, &key.PublicKey, a.key, now, notAfter)
	if err != nil {
		return nil, nil, time.Time{}, err
	}
	keyPEM, err = encodeKey(key)
	return certPEM, keyPEM, notAfter, err
}

func (a *authority) stillGood(cert *x509.Certificate, keyPEM []byte, tmpl *x509.Certificate, now time.Time) bool {
	key, err := parseKey(keyPEM)
	return err == nil && key.PublicKey.Equal(cert.PublicKey) &&
		cert.CheckSignatureFrom(a.cert) == nil &&
		cert.Subject.CommonName == tmpl.Subject.CommonName && slices.Equal(cert.DNSNames, tmpl.DNSNames) &&
		now.Add(certRenewBefore).Before(cert.NotAfter)
}

// sign issues tmpl (with a random serial and the validity window) signed by parent's key.
func sign(tmpl, parent *x509.Certificate, pub *ecdsa.PublicKey, signer *ecdsa.PrivateKey, now, notAfter time.Time) ([]byte, error) {
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return nil, fmt.Errorf("generating a serial number: %w", err)
	}
	t := *tmpl
	t.SerialNumber = serial
	t.NotBefore, t.NotAfter = now.Add(-certBackdate), notAfter
	if tmpl == parent {
		parent = &t
	}
	der, err := x509.CreateCertificate(rand.Reader, &t, parent, pub, signer)
	if err != nil {
		return nil, fmt.Errorf("issuing certificate %q: %w", tmpl.Subject.CommonName, err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), nil
}

// encodeKey is the SEC 1 ("EC PRIVATE KEY") PEM form PostgreSQL and
// CloudNativePG read.
func encodeKey(key *ecdsa.PrivateKey) ([]byte, error) {
	der, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, fmt.Errorf("encoding a private key: %w", err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der}), nil
}

func parseCert(b []byte) (*x509.Certificate, error) {
	block, _ := pem.Decode(b)
	if block == nil || block.Type != "CERTIFICATE" {
		return nil, errors.New("no PEM certificate")
	}
	return x509.ParseCertificate(block.Bytes)
}

func parseKey(b []byte) (*ecdsa.PrivateKey, error) {
	block, _ := pem.Decode(b)
	if block == nil || block.Type != "EC PRIVATE KEY" {
		return nil, errors.New("no PEM EC private key")
	}
	return x509.ParseECPrivateKey(block.Bytes)
}

// IssueTopologyCertificates returns the certificates the hub issues for a
// new PrimaryStandby Database placed on the members of hosts (member name
// to replication host), as each member gets them. It keeps nothing: it is
// for tests that put the certificates in front of a real PostgreSQL.
func IssueTopologyCertificates(db *fleetv1alpha1.Database, hosts map[string]string, now time.Time) (map[string]member.TopologyCertificates, error) {
	_, pki, err := issueTopologyPKI(db, nil, hosts, now)
	return pki.certs, err
}
