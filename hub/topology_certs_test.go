package hub

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	fleetv1alpha1 "github.com/fleetdb/fleetdb/apis/v1alpha1"
	"github.com/fleetdb/fleetdb/member"
)

func pkiDatabase() *fleetv1alpha1.Database {
	return &fleetv1alpha1.Database{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "orders"}}
}

var pkiHosts = map[string]string{"eu-1": "orders-rw.team-a.eu-1.example.net", "us-1": "orders-rw.team-a.us-1.example.net"}

func TestIssueTopologyPKI(t *testing.T) {
	g := NewWithT(t)
	now := time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC)
	data, pki, err := issueTopologyPKI(pkiDatabase(), nil, pkiHosts, now)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(pki.certs).To(HaveLen(2))

	ca, err := parseCert(data[pkiCACert])
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(ca.IsCA).To(BeTrue())
	g.Expect(ca.NotAfter.Sub(now)).To(BeNumerically(">", 9*365*24*time.Hour))
	roots := x509.NewCertPool()
	roots.AddCert(ca)

	for name, host := range pkiHosts {
		c := pki.certs[name]
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
	client, _ := parseCert(pki.certs["eu-1"].ReplicationCert)
	g.Expect(client.Subject.CommonName).To(Equal("streaming_replica"))
	_, err = client.Verify(x509.VerifyOptions{Roots: roots, CurrentTime: now, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(pki.renew).To(Equal(now.Add(leafLifetime - certRenewBefore)))
	g.Expect(pki.issued).To(ConsistOf("CA", "replication", "server eu-1", "server us-1"))

	// A pass before renewal is due changes nothing.
	again, kept, err := issueTopologyPKI(pkiDatabase(), data, pkiHosts, now.Add(59*24*time.Hour))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(again).To(Equal(data))
	g.Expect(kept.issued).To(BeEmpty())
}

func TestIssueTopologyPKIRenewsNearExpiry(t *testing.T) {
	g := NewWithT(t)
	now := time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC)
	data, _, err := issueTopologyPKI(pkiDatabase(), nil, pkiHosts, now)
	g.Expect(err).NotTo(HaveOccurred())

	later := now.Add(61 * 24 * time.Hour) // 29 days left
	renewed, pki, err := issueTopologyPKI(pkiDatabase(), data, pkiHosts, later)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(renewed[pkiCACert]).To(Equal(data[pkiCACert]), "the CA is kept")
	g.Expect(renewed[pkiCAKey]).To(Equal(data[pkiCAKey]))
	for _, k := range []string{pkiReplCrt, pkiReplKey, pkiServerCert("eu-1"), pkiServerKey("us-1")} {
		g.Expect(renewed[k]).NotTo(Equal(data[k]), k)
	}
	server, _ := parseCert(pki.certs["us-1"].ServerCert)
	g.Expect(server.NotAfter).To(Equal(later.Add(leafLifetime)))
	g.Expect(pki.issued).To(ConsistOf("replication", "server eu-1", "server us-1"))
}

func TestIssueTopologyPKIFollowsPlacementAndHosts(t *testing.T) {
	g := NewWithT(t)
	now := time.Now()
	data, _, err := issueTopologyPKI(pkiDatabase(), nil, pkiHosts, now)
	g.Expect(err).NotTo(HaveOccurred())

	hosts := map[string]string{"eu-1": "orders.eu-1.other.example", "ap-1": "orders-rw.team-a.ap-1.example.net"}
	next, pki, err := issueTopologyPKI(pkiDatabase(), data, hosts, now)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(next).NotTo(HaveKey(pkiServerCert("us-1")), "a member no longer placed loses its certificate")
	g.Expect(next[pkiServerCert("eu-1")]).NotTo(Equal(data[pkiServerCert("eu-1")]), "another host, another certificate")
	g.Expect(next[pkiReplCrt]).To(Equal(data[pkiReplCrt]))
	server, _ := parseCert(pki.certs["eu-1"].ServerCert)
	g.Expect(server.DNSNames).To(ContainElement("orders.eu-1.other.example"))
}

func TestIssueTopologyPKIRefusesAnUnreadableCA(t *testing.T) {
	g := NewWithT(t)
	data, _, err := issueTopologyPKI(pkiDatabase(), nil, pkiHosts, time.Now())
	g.Expect(err).NotTo(HaveOccurred())
	data[pkiCAKey] = []byte("garbage")
	_, _, err = issueTopologyPKI(pkiDatabase(), data, pkiHosts, time.Now())
	var broken errTopologyPKI
	g.Expect(err).To(BeAssignableToTypeOf(broken), "never replace a CA the members trust")
}

func TestTopologyFor(t *testing.T) {
	g := NewWithT(t)
	db := pkiDatabase()
	db.Spec.Topology = &fleetv1alpha1.TopologySpec{Mode: fleetv1alpha1.TopologyPrimaryStandby, PrimaryCluster: "eu-1"}
	peers := []member.Peer{{Name: "eu-1", Host: "a", Port: 5432}, {Name: "us-1", Host: "b", Port: 5432}}
	top := topologyFor(db, "us-1", peers, member.TopologyCertificates{})
	g.Expect(top.Self).To(Equal("us-1"))
	g.Expect(top.Primary).To(Equal("eu-1"))
	g.Expect(top.PromotionToken).To(BeEmpty())
	g.Expect(top.Peers).To(Equal(peers))

	db.Status.Topology = &fleetv1alpha1.TopologyStatus{Mode: fleetv1alpha1.TopologyPrimaryStandby, PrimaryCluster: "us-1"}
	g.Expect(topologyFor(db, "eu-1", peers, member.TopologyCertificates{}).Primary).To(Equal("us-1"), "the primary the hub last promoted")
}
