// Package pki is the certificate authority of a PrimaryStandby Database's
// replication: it creates the CA once, issues and renews the server
// certificate of each member and the streaming_replica client certificate,
// and keeps nothing itself (the hub stores what it returns in a Secret). It
// is pure: no client, no clock of its own.
package pki

import (
	"bytes"
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

// Error is a terminal error about the hub's PKI Secret: it is not the
// Database's, or its CA cannot be read (someone edited it).
type Error struct{ Msg string }

func (e Error) Error() string { return e.Msg }

// Set is what Issue returns: the certificates per member, and when the
// first of them is due for renewal.
type Set struct {
	Certs map[string]member.TopologyCertificates
	Renew time.Time
	// Issued names the certificates this pass issued ("CA", "replication",
	// "server <member>"); empty when every one was kept.
	Issued []string
}

// Issue returns the Secret data with every certificate the
// members need valid (kept from old where it still is) and the per-member
// certificates. Entries of members no longer placed are dropped.
func Issue(db *fleetv1alpha1.Database, old map[string][]byte, hosts map[string]string, now time.Time) (map[string][]byte, Set, error) {
	ca, err := loadOrCreateCA(db, old, "replication", now)
	if err != nil {
		return nil, Set{}, err
	}
	data := map[string][]byte{pkiCACert: ca.certPEM, pkiCAKey: ca.keyPEM}
	set := Set{Certs: map[string]member.TopologyCertificates{}}
	if !bytes.Equal(old[pkiCACert], ca.certPEM) {
		set.Issued = append(set.Issued, "CA")
	}
	leaf := func(what, certKey, keyKey string, tmpl *x509.Certificate) error {
		certPEM, keyPEM, notAfter, err := ca.leaf(old[certKey], old[keyKey], tmpl, now)
		if err != nil {
			return err
		}
		if !bytes.Equal(old[certKey], certPEM) {
			set.Issued = append(set.Issued, what)
		}
		data[certKey], data[keyKey] = certPEM, keyPEM
		if due := notAfter.Add(-certRenewBefore); set.Renew.IsZero() || due.Before(set.Renew) {
			set.Renew = due
		}
		return nil
	}
	if err := leaf("replication", pkiReplCrt, pkiReplKey, clientTemplate()); err != nil {
		return nil, Set{}, err
	}
	for _, m := range slices.Sorted(maps.Keys(hosts)) {
		if err := leaf("server "+m, pkiServerCert(m), pkiServerKey(m), serverTemplate(db, hosts[m])); err != nil {
			return nil, Set{}, err
		}
		set.Certs[m] = member.TopologyCertificates{
			CACert:     data[pkiCACert],
			ServerCert: data[pkiServerCert(m)], ServerKey: data[pkiServerKey(m)],
			ReplicationCert: data[pkiReplCrt], ReplicationKey: data[pkiReplKey],
		}
	}
	return data, set, nil
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
func loadOrCreateCA(db *fleetv1alpha1.Database, old map[string][]byte, what string, now time.Time) (*authority, error) {
	if len(old[pkiCACert]) == 0 && len(old[pkiCAKey]) == 0 {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			return nil, fmt.Errorf("generating the CA key: %w", err)
		}
		tmpl := &x509.Certificate{
			Subject:               pkix.Name{CommonName: fmt.Sprintf("fleetdb %s/%s %s CA", db.Namespace, db.Name, what)},
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
	secret := "topology" // the replication CA's hub Secret is the topology PKI's
	if what != "replication" {
		secret = what
	}
	cert, err := parseCert(old[pkiCACert])
	if err != nil || !cert.IsCA {
		return nil, Error{"the " + secret + " PKI secret holds a CA certificate the hub cannot read; restore it"}
	}
	key, err := parseKey(old[pkiCAKey])
	if err != nil || !key.PublicKey.Equal(cert.PublicKey) {
		return nil, Error{"the " + secret + " PKI secret holds a CA key the hub cannot read or that does not match its certificate; restore it"}
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
	_, set, err := Issue(db, nil, hosts, now)
	return set.Certs, err
}

// Keys of the hub Secret that keeps a StatefulSet-backend Database's
// instance PKI (its CA beside pkiCACert and pkiCAKey).
const (
	pkiInstanceCrt = "instance.crt"
	pkiInstanceKey = "instance.key"
)

// InstanceSet is what IssueInstance returns: the certificates every member
// gets (one server certificate serves every instance in every member: their
// names are the same everywhere) and when it is due for renewal.
type InstanceSet struct {
	Certs  member.InstanceCertificates
	Renew  time.Time
	Issued []string
}

// IssueInstance returns the Secret data of a StatefulSet-backend Database's
// instance PKI (a CA of its own, created once, and the server certificate
// of its PostgreSQL instances for member.InstanceDNSNames) with the
// certificate kept from old while it is still good, and what the members
// get. The CA's key is in the data only, never in the InstanceSet.
func IssueInstance(db *fleetv1alpha1.Database, old map[string][]byte, now time.Time) (map[string][]byte, InstanceSet, error) {
	ca, err := loadOrCreateCA(db, old, "instance", now)
	if err != nil {
		return nil, InstanceSet{}, err
	}
	var set InstanceSet
	if !bytes.Equal(old[pkiCACert], ca.certPEM) {
		set.Issued = append(set.Issued, "CA")
	}
	tmpl := &x509.Certificate{
		Subject:     pkix.Name{CommonName: db.Name},
		DNSNames:    member.InstanceDNSNames(db.Namespace, db.Name),
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	certPEM, keyPEM, notAfter, err := ca.leaf(old[pkiInstanceCrt], old[pkiInstanceKey], tmpl, now)
	if err != nil {
		return nil, InstanceSet{}, err
	}
	if !bytes.Equal(old[pkiInstanceCrt], certPEM) {
		set.Issued = append(set.Issued, "server")
	}
	set.Renew = notAfter.Add(-certRenewBefore)
	set.Certs = member.InstanceCertificates{CACert: ca.certPEM, ServerCert: certPEM, ServerKey: keyPEM}
	data := map[string][]byte{pkiCACert: ca.certPEM, pkiCAKey: ca.keyPEM, pkiInstanceCrt: certPEM, pkiInstanceKey: keyPEM}
	return data, set, nil
}

// InstanceCertificatesOf returns what the members get from the data of a
// Database's instance PKI Secret (IssueInstance's), issuing nothing: a
// sharded hub's member owner renders the certificate the leader issued.
// ok is false while a part is missing.
func InstanceCertificatesOf(data map[string][]byte) (member.InstanceCertificates, bool) {
	c := member.InstanceCertificates{CACert: data[pkiCACert], ServerCert: data[pkiInstanceCrt], ServerKey: data[pkiInstanceKey]}
	return c, len(c.CACert) > 0 && len(c.ServerCert) > 0 && len(c.ServerKey) > 0
}

// IssueInstanceCertificates returns the certificates a new StatefulSet-backend
// Database's members get, keeping nothing: for tests that put them in front
// of a real PostgreSQL.
func IssueInstanceCertificates(db *fleetv1alpha1.Database, now time.Time) (member.InstanceCertificates, error) {
	_, set, err := IssueInstance(db, nil, now)
	return set.Certs, err
}
