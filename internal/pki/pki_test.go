package pki

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	fleetv1alpha1 "github.com/fleetdb/fleetdb/apis/v1alpha1"
)

func pkiDatabase() *fleetv1alpha1.Database {
	return &fleetv1alpha1.Database{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "orders"}}
}

var pkiHosts = map[string]string{"eu-1": "orders-rw.team-a.eu-1.example.net", "us-1": "orders-rw.team-a.us-1.example.net"}

func TestIssueTopologyPKI(t *testing.T) {
	g := NewWithT(t)
	now := time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC)
	data, pki, err := Issue(pkiDatabase(), nil, pkiHosts, now)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(pki.Certs).To(HaveLen(2))

	ca, err := parseCert(data[pkiCACert])
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(ca.IsCA).To(BeTrue())
	g.Expect(ca.NotAfter.Sub(now)).To(BeNumerically(">", 9*365*24*time.Hour))
	roots := x509.NewCertPool()
	roots.AddCert(ca)

	for name, host := range pkiHosts {
		c := pki.Certs[name]
		g.Expect(c.CACert).To(Equal(data[pkiCACert]))
		for _, b := range [][]byte{c.CACert, c.ServerCert, c.ServerKey, c.ReplicationCert, c.ReplicationKey} {
			g.Expect(bytes.Contains(b, data[pkiCAKey])).To(BeFalse(), "the CA key never goes to a member")
		}
		_, err := tls.X509KeyPair(c.ServerCert, c.ServerKey)
		g.Expect(err).NotTo(HaveOccurred())
		server, _ := parseCert(c.ServerCert)
		for _, dns := range []string{host, "orders-rw", "orders-rw.team-a.svc", "orders.team-a"} {
			_, err = server.Verify(x509.VerifyOptions{DNSName: dns, Roots: roots, CurrentTime: now,
				KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}})
			g.Expect(err).NotTo(HaveOccurred(), "server certificate of %s for %s", name, dns)
		}
		g.Expect(server.NotAfter).To(Equal(now.Add(leafLifetime)))
	}
	client, _ := parseCert(pki.Certs["eu-1"].ReplicationCert)
	g.Expect(client.Subject.CommonName).To(Equal("streaming_replica"))
	_, err = client.Verify(x509.VerifyOptions{Roots: roots, CurrentTime: now, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(pki.Renew).To(Equal(now.Add(leafLifetime - certRenewBefore)))
	g.Expect(pki.Issued).To(ConsistOf("CA", "replication", "server eu-1", "server us-1"))

	// A pass before renewal is due changes nothing.
	again, kept, err := Issue(pkiDatabase(), data, pkiHosts, now.Add(59*24*time.Hour))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(again).To(Equal(data))
	g.Expect(kept.Issued).To(BeEmpty())
}

func TestIssueTopologyPKIRenewsNearExpiry(t *testing.T) {
	g := NewWithT(t)
	now := time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC)
	data, _, err := Issue(pkiDatabase(), nil, pkiHosts, now)
	g.Expect(err).NotTo(HaveOccurred())

	later := now.Add(61 * 24 * time.Hour) // 29 days left
	renewed, pki, err := Issue(pkiDatabase(), data, pkiHosts, later)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(renewed[pkiCACert]).To(Equal(data[pkiCACert]), "the CA is kept")
	g.Expect(renewed[pkiCAKey]).To(Equal(data[pkiCAKey]))
	for _, k := range []string{pkiReplCrt, pkiReplKey, pkiServerCert("eu-1"), pkiServerKey("us-1")} {
		g.Expect(renewed[k]).NotTo(Equal(data[k]), k)
	}
	server, _ := parseCert(pki.Certs["us-1"].ServerCert)
	g.Expect(server.NotAfter).To(Equal(later.Add(leafLifetime)))
	g.Expect(pki.Issued).To(ConsistOf("replication", "server eu-1", "server us-1"))
}

func TestIssueTopologyPKIFollowsPlacementAndHosts(t *testing.T) {
	g := NewWithT(t)
	now := time.Now()
	data, _, err := Issue(pkiDatabase(), nil, pkiHosts, now)
	g.Expect(err).NotTo(HaveOccurred())

	hosts := map[string]string{"eu-1": "orders.eu-1.other.example", "ap-1": "orders-rw.team-a.ap-1.example.net"}
	next, pki, err := Issue(pkiDatabase(), data, hosts, now)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(next).NotTo(HaveKey(pkiServerCert("us-1")), "a member no longer placed loses its certificate")
	g.Expect(next[pkiServerCert("eu-1")]).NotTo(Equal(data[pkiServerCert("eu-1")]), "another host, another certificate")
	g.Expect(next[pkiReplCrt]).To(Equal(data[pkiReplCrt]))
	server, _ := parseCert(pki.Certs["eu-1"].ServerCert)
	g.Expect(server.DNSNames).To(ContainElement("orders.eu-1.other.example"))
}

func TestIssueTopologyPKIRefusesAnUnreadableCA(t *testing.T) {
	g := NewWithT(t)
	data, _, err := Issue(pkiDatabase(), nil, pkiHosts, time.Now())
	g.Expect(err).NotTo(HaveOccurred())
	data[pkiCAKey] = []byte("garbage")
	_, _, err = Issue(pkiDatabase(), data, pkiHosts, time.Now())
	var broken Error
	g.Expect(err).To(BeAssignableToTypeOf(broken), "never replace a CA the members trust")
}

// TestIssueInstancePKI: a StatefulSet-backend Database's instance CA signs
// one server certificate valid for every instance name the rotation Job
// connects to; the CA key stays in the hub data; the certificate is kept
// until it is due and then issued again from the same CA.
func TestIssueInstancePKI(t *testing.T) {
	g := NewWithT(t)
	now := time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC)
	data, set, err := IssueInstance(pkiDatabase(), nil, now)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(set.Issued).To(Equal([]string{"CA", "server"}))
	c := set.Certs
	g.Expect(c.CACert).To(Equal(data[pkiCACert]))
	for _, b := range [][]byte{c.CACert, c.ServerCert, c.ServerKey} {
		g.Expect(bytes.Contains(b, data[pkiCAKey])).To(BeFalse(), "the CA key never goes to a member")
	}
	ca, err := parseCert(c.CACert)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(ca.Subject.CommonName).To(Equal("fleetdb team-a/orders instance CA"))
	roots := x509.NewCertPool()
	roots.AddCert(ca)
	pair, err := tls.X509KeyPair(c.ServerCert, c.ServerKey)
	g.Expect(err).NotTo(HaveOccurred())
	leaf, err := x509.ParseCertificate(pair.Certificate[0])
	g.Expect(err).NotTo(HaveOccurred())
	for _, host := range []string{"orders-0.orders-hl", "orders-7.orders-hl.team-a.svc", "orders.team-a"} {
		_, err := leaf.Verify(x509.VerifyOptions{DNSName: host, Roots: roots, CurrentTime: now})
		g.Expect(err).NotTo(HaveOccurred(), host)
	}
	_, err = leaf.Verify(x509.VerifyOptions{DNSName: "other-0.other-hl", Roots: roots, CurrentTime: now})
	g.Expect(err).To(HaveOccurred(), "another Database's instances are not named")
	g.Expect(set.Renew).To(Equal(leaf.NotAfter.Add(-certRenewBefore)))

	again, kept, err := IssueInstance(pkiDatabase(), data, now.Add(24*time.Hour))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(kept.Issued).To(BeEmpty())
	g.Expect(again).To(Equal(data))

	renewed, next, err := IssueInstance(pkiDatabase(), data, set.Renew.Add(time.Hour))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(next.Issued).To(Equal([]string{"server"}))
	g.Expect(renewed[pkiCACert]).To(Equal(data[pkiCACert]), "the CA is never replaced")
	g.Expect(renewed[pkiInstanceCrt]).NotTo(Equal(data[pkiInstanceCrt]))
}
