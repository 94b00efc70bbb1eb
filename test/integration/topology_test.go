package integration

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"math/big"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleetv1alpha1 "github.com/fleetdb/fleetdb/apis/v1alpha1"
	"github.com/fleetdb/fleetdb/member"
)

// newPrimaryStandbyDB is a PrimaryStandby Database on the CloudNativePG
// backend placed on members, with primary as primaryCluster.
func newPrimaryStandbyDB(ns, name, primary string, members ...string) *fleetv1alpha1.Database {
	db := newCNPGDB(ns, name, members...)
	db.Spec.Topology = &fleetv1alpha1.TopologySpec{Mode: fleetv1alpha1.TopologyPrimaryStandby, PrimaryCluster: primary}
	return db
}

// setReplication sets (or, with an empty template, removes) a member's replication endpoint.
func setReplication(g Gomega, e *env, name, hostTemplate string) {
	var mc fleetv1alpha1.MemberCluster
	g.Expect(e.hub.Get(e.ctx, client.ObjectKey{Name: name}, &mc)).To(Succeed())
	mc.Spec.Replication = nil
	if hostTemplate != "" {
		mc.Spec.Replication = &fleetv1alpha1.ReplicationEndpoint{HostTemplate: hostTemplate, Port: 5432}
	}
	g.Expect(e.hub.Update(e.ctx, &mc)).To(Succeed())
}

// testTopologyWiring creates a PrimaryStandby Database over m1 (primary)
// and m2 (standby) and checks what each member gets: the Cluster's replica,
// externalClusters, bootstrap and certificates, and the certificate Secrets,
// which never carry the CA key; then a certificate near expiry is issued
// again and reaches its member.
func testTopologyWiring(t *testing.T, e *env) {
	g := NewWithT(t)
	ns := e.namespace("topology")
	g.Expect(e.hub.Create(e.ctx, newPrimaryStandbyDB(ns, "ledger", "m1", "m1", "m2"))).To(Succeed())

	// No replication endpoints yet: the Database waits, nothing reaches a member.
	g.Eventually(func(g Gomega) {
		ready := condition(e.getDB(ns, "ledger").Status.Conditions, fleetv1alpha1.ConditionReady)
		g.Expect(ready.Reason).To(Equal(fleetv1alpha1.ReasonWaitingForReplicationEndpoint))
		g.Expect(ready.Message).To(And(ContainSubstring("m1"), ContainSubstring("m2")))
	}).WithTimeout(eventually).WithPolling(poll).Should(Succeed())
	g.Expect(clusterInstances(e, "m1", ns, "ledger")).To(BeEquivalentTo(-1))

	for _, m := range []string{"m1", "m2"} {
		setReplication(g, e, m, "$(DATABASE)-rw.$(NAMESPACE)."+m+".fleet.test")
	}
	t.Cleanup(func() {
		for _, m := range []string{"m1", "m2"} {
			setReplication(NewWithT(t), e, m, "")
		}
	})
	g.Eventually(func(g Gomega) {
		db := e.getDB(ns, "ledger")
		g.Expect(db.Status.Phase).To(Equal(fleetv1alpha1.PhaseReady), "%+v", db.Status.Conditions)
		g.Expect(clusterEntry(db, "m1").Role).To(Equal(fleetv1alpha1.RolePrimary))
		g.Expect(clusterEntry(db, "m2").Role).To(Equal(fleetv1alpha1.RoleStandby))
	}).WithTimeout(eventually).WithPolling(poll).Should(Succeed())

	// At rest: no writes (the certificates are not issued again, the plan does not change).
	e.settle(g)
	e.writes.Reset()
	time.Sleep(3 * time.Second)
	g.Expect(e.hubWritesIn(ns)).To(BeEmpty(), "writes at rest")

	checkWiredCluster(g, e, ns, "m1", map[string]any{"self": "m1", "primary": "m1", "source": "m2"}, "initdb") // a primary's source names a peer (CloudNativePG's docs)
	checkWiredCluster(g, e, ns, "m2", map[string]any{"self": "m2", "primary": "m1", "source": "m1"}, "pg_basebackup")
	pki := checkTopologySecrets(g, e, ns)

	raw, err := json.Marshal(e.getDB(ns, "ledger").Status)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(string(raw)).NotTo(ContainSubstring("PRIVATE KEY"), "no key in the status")

	testTopologyRenewal(t, e, ns, pki)

	// primaryCluster must be a placed member.
	g.Expect(e.hub.Create(e.ctx, newPrimaryStandbyDB(ns, "stray", "m3", "m1", "m2"))).To(Succeed())
	g.Eventually(func(g Gomega) {
		st := condition(e.getDB(ns, "stray").Status.Conditions, fleetv1alpha1.ConditionStalled)
		g.Expect(st.Status).To(Equal(metav1.ConditionTrue))
		g.Expect(st.Reason).To(Equal(fleetv1alpha1.ReasonPrimaryNotPlaced))
	}).WithTimeout(eventually).WithPolling(poll).Should(Succeed())
	g.Expect(clusterInstances(e, "m1", ns, "stray")).To(BeEquivalentTo(-1))

	// Delete with Retain: the certificate Secrets (private keys) go from the
	// members, the credentials stay; created again, the Database runs again.
	db := e.getDB(ns, "ledger")
	db.Spec.DeletionPolicy = fleetv1alpha1.DeletionPolicyRetain
	g.Expect(e.hub.Update(e.ctx, db)).To(Succeed())
	g.Eventually(func(g Gomega) {
		u := member.NewCNPGCluster()
		g.Expect(e.member("m2").Get(e.ctx, client.ObjectKey{Namespace: ns, Name: "ledger"}, u)).To(Succeed())
		g.Expect(u.GetAnnotations()).To(HaveKeyWithValue(fleetv1alpha1.AnnotationDeletionPolicy, "Retain"))
	}).WithTimeout(eventually).WithPolling(poll).Should(Succeed())
	g.Expect(e.hub.Delete(e.ctx, e.getDB(ns, "ledger"))).To(Succeed())
	g.Eventually(func() bool {
		return apierrors.IsNotFound(e.hub.Get(e.ctx, client.ObjectKey{Namespace: ns, Name: "ledger"}, &fleetv1alpha1.Database{}))
	}).WithTimeout(eventually).WithPolling(poll).Should(BeTrue())
	for _, m := range []string{"m1", "m2"} {
		for _, name := range []string{member.TopologyCASecretName("ledger"), member.TopologyServerSecretName("ledger"), member.TopologyReplicationSecretName("ledger")} {
			err := e.member(m).Get(e.ctx, client.ObjectKey{Namespace: ns, Name: name}, &corev1.Secret{})
			g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "%s in %s: %v", name, m, err)
		}
		g.Expect(e.member(m).Get(e.ctx, client.ObjectKey{Namespace: ns, Name: "ledger-credentials"}, &corev1.Secret{})).To(Succeed())
	}
	g.Expect(e.hub.Create(e.ctx, newPrimaryStandbyDB(ns, "ledger", "m1", "m1", "m2"))).To(Succeed())
	g.Eventually(func(g Gomega) {
		g.Expect(e.getDB(ns, "ledger").Status.Phase).To(Equal(fleetv1alpha1.PhaseReady))
	}).WithTimeout(eventually).WithPolling(poll).Should(Succeed())

	// A member without CloudNativePG says so, as for any CloudNativePG Database.
	setReplication(g, e, "m3", "$(DATABASE)-rw.$(NAMESPACE).m3.fleet.test")
	t.Cleanup(func() { setReplication(NewWithT(t), e, "m3", "") })
	g.Expect(e.hub.Create(e.ctx, newPrimaryStandbyDB(ns, "atlas", "m1", "m1", "m3"))).To(Succeed())
	g.Eventually(func(g Gomega) {
		db := e.getDB(ns, "atlas")
		g.Expect(clusterEntry(db, "m1").Role).To(Equal(fleetv1alpha1.RolePrimary))
		g.Expect(clusterEntry(db, "m3").Reason).To(Equal(fleetv1alpha1.ReasonBackendMissing))
	}).WithTimeout(eventually).WithPolling(poll).Should(Succeed())

	// Leave nothing behind for the tests that follow (the endpoints go too).
	for _, name := range []string{"ledger", "stray", "atlas"} {
		g.Expect(e.hub.Delete(e.ctx, e.getDB(ns, name))).To(Succeed())
	}
	g.Eventually(func(g Gomega) {
		var list fleetv1alpha1.DatabaseList
		g.Expect(e.hub.List(e.ctx, &list, client.InNamespace(ns))).To(Succeed())
		g.Expect(list.Items).To(BeEmpty())
	}).WithTimeout(eventually).WithPolling(poll).Should(Succeed())
}

// checkWiredCluster checks one member's Cluster wiring.
func checkWiredCluster(g Gomega, e *env, ns, m string, replica map[string]any, bootstrap string) {
	u := member.NewCNPGCluster()
	g.Expect(e.member(m).Get(e.ctx, client.ObjectKey{Namespace: ns, Name: "ledger"}, u)).To(Succeed())
	spec := u.Object["spec"].(map[string]any)
	g.Expect(spec["replica"]).To(Equal(replica))
	g.Expect(spec["bootstrap"]).To(HaveKey(bootstrap))
	g.Expect(spec["certificates"]).To(Equal(map[string]any{
		"serverCASecret": "ledger-topology-ca", "clientCASecret": "ledger-topology-ca",
		"serverTLSSecret": "ledger-topology-server", "replicationTLSSecret": "ledger-topology-replication",
	}), "no serverAltDNSNames beside serverTLSSecret: CloudNativePG's webhook refuses them")
	ext, _, _ := unstructured.NestedSlice(u.Object, "spec", "externalClusters")
	g.Expect(ext).To(HaveLen(2))
	for i, peer := range []string{"m1", "m2"} {
		c := ext[i].(map[string]any)
		g.Expect(c["name"]).To(Equal(peer))
		g.Expect(c["connectionParameters"]).To(Equal(map[string]any{
			"host": "ledger-rw." + ns + "." + peer + ".fleet.test", "port": "5432",
			"user": "streaming_replica", "dbname": "postgres", "sslmode": "verify-full",
			"application_name": "fleetdb:" + m,
		}), "a standby in %s connects as fleetdb:%s, the name the primary's synchronous_standby_names lists", m, m)
	}
	other := map[string]string{"m1": "m2", "m2": "m1"}[m]
	g.Expect(spec["postgresql"]).To(Equal(map[string]any{"synchronous": map[string]any{
		"method": "any", "number": int64(1), "maxStandbyNamesFromCluster": int64(0),
		"standbyNamesPre": []any{"fleetdb:" + other}, "dataDurability": "required",
	}, "parameters": map[string]any{
		// spec.topology.link's defaults: for a WAN, not CloudNativePG's 5s
		// and 512MB; at least 512MB of WAL on the tests' 1Gi volume.
		"wal_sender_timeout": "30000ms", "wal_receiver_timeout": "30000ms", "wal_keep_size": "512MB",
	}}), "durability Synchronous (the default): %s's commits wait for %s's standby", m, other)
}

// checkTopologySecrets checks the member certificate Secrets against the
// hub's PKI Secret and returns the latter.
func checkTopologySecrets(g Gomega, e *env, ns string) *corev1.Secret {
	var pki corev1.Secret
	g.Expect(e.hub.Get(e.ctx, client.ObjectKey{Namespace: ns, Name: "ledger-topology-pki"}, &pki)).To(Succeed())
	g.Expect(pki.Data).To(HaveKey("ca.key"))
	g.Expect(metav1.GetControllerOf(&pki).Kind).To(Equal("Database"))
	caKey := pki.Data["ca.key"]
	roots := x509.NewCertPool()
	g.Expect(roots.AppendCertsFromPEM(pki.Data["ca.crt"])).To(BeTrue())
	for _, m := range []string{"m1", "m2"} {
		var ca, server, repl corev1.Secret
		g.Expect(e.member(m).Get(e.ctx, client.ObjectKey{Namespace: ns, Name: "ledger-topology-ca"}, &ca)).To(Succeed())
		g.Expect(ca.Data).To(Equal(map[string][]byte{"ca.crt": pki.Data["ca.crt"]}), "the CA certificate alone")
		g.Expect(e.member(m).Get(e.ctx, client.ObjectKey{Namespace: ns, Name: "ledger-topology-server"}, &server)).To(Succeed())
		g.Expect(server.Type).To(Equal(corev1.SecretTypeTLS))
		g.Expect(server.Data["tls.crt"]).To(Equal(pki.Data["server-"+m+".crt"]))
		cert := parsePEMCert(g, server.Data["tls.crt"])
		_, err := cert.Verify(x509.VerifyOptions{DNSName: "ledger-rw." + ns + "." + m + ".fleet.test", Roots: roots})
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(e.member(m).Get(e.ctx, client.ObjectKey{Namespace: ns, Name: "ledger-topology-replication"}, &repl)).To(Succeed())
		g.Expect(parsePEMCert(g, repl.Data["tls.crt"]).Subject.CommonName).To(Equal("streaming_replica"))

		var all corev1.SecretList
		g.Expect(e.member(m).List(e.ctx, &all, client.InNamespace(ns))).To(Succeed())
		for _, s := range all.Items {
			for k, v := range s.Data {
				g.Expect(bytes.Contains(v, caKey)).To(BeFalse(), "the CA key is in %s/%s[%s] of %s", s.Namespace, s.Name, k, m)
			}
		}
	}
	return &pki
}

// testTopologyRenewal replaces m2's server certificate in the hub's PKI
// Secret by one that expires in ten days: the hub issues a new one, and the
// new one reaches m2. m2 counts as renewed (Ready) only once its Cluster
// reports the new Secret's version: its simulated operator is off until the
// Secret was written, so it reports the old one meanwhile.
func testTopologyRenewal(t *testing.T, e *env, ns string, pki *corev1.Secret) {
	g := NewWithT(t)
	e.sim.enable("m2", false)
	defer e.sim.enable("m2", true)
	old := nearExpiryCert(g, pki, "ledger-rw."+ns+".m2.fleet.test")
	patch := client.MergeFrom(pki.DeepCopy())
	pki.Data["server-m2.crt"], pki.Data["server-m2.key"] = old.cert, old.key
	g.Expect(e.hub.Patch(e.ctx, pki, patch)).To(Succeed())
	// Any change of the Database makes the hub look at its certificates
	// (at rest it does when the first is due).
	db := e.getDB(ns, "ledger")
	dbPatch := client.MergeFrom(db.DeepCopy())
	metav1.SetMetaDataAnnotation(&db.ObjectMeta, "test.fleetdb.io/poke", "1")
	g.Expect(e.hub.Patch(e.ctx, db, dbPatch)).To(Succeed())

	g.Eventually(func(g Gomega) {
		var cur, server corev1.Secret
		g.Expect(e.hub.Get(e.ctx, client.ObjectKeyFromObject(pki), &cur)).To(Succeed())
		renewed := parsePEMCert(g, cur.Data["server-m2.crt"])
		g.Expect(time.Until(renewed.NotAfter)).To(BeNumerically(">", 80*24*time.Hour), "issued again")
		g.Expect(e.member("m2").Get(e.ctx, client.ObjectKey{Namespace: ns, Name: "ledger-topology-server"}, &server)).To(Succeed())
		g.Expect(server.Data["tls.crt"]).To(Equal(cur.Data["server-m2.crt"]), "the new certificate reached the member")
		g.Expect(server.Data["tls.key"]).To(Equal(cur.Data["server-m2.key"]))
	}).WithTimeout(eventually).WithPolling(poll).Should(Succeed())
	g.Eventually(e.eventSeen(ns, "CertificatesIssued", "server m2")).WithTimeout(eventually).WithPolling(poll).Should(Succeed())

	// Written, not taken: the Cluster still reports the Secret version it had.
	g.Eventually(func(g Gomega) {
		m2 := clusterEntry(e.getDB(ns, "ledger"), "m2")
		g.Expect(m2.Phase).To(Equal(fleetv1alpha1.ClusterPhaseProvisioning))
		g.Expect(m2.Message).To(And(ContainSubstring("renewed certificates"), ContainSubstring("ledger-topology-server")))
	}).WithTimeout(eventually).WithPolling(poll).Should(Succeed())
	e.sim.enable("m2", true)
	g.Eventually(func(g Gomega) {
		u := member.NewCNPGCluster()
		g.Expect(e.member("m2").Get(e.ctx, client.ObjectKey{Namespace: ns, Name: "ledger"}, u)).To(Succeed())
		var server corev1.Secret
		g.Expect(e.member("m2").Get(e.ctx, client.ObjectKey{Namespace: ns, Name: "ledger-topology-server"}, &server)).To(Succeed())
		g.Expect(member.CNPGSecretVersions(u)).To(HaveKeyWithValue("ledger-topology-server", server.ResourceVersion))
		g.Expect(clusterEntry(e.getDB(ns, "ledger"), "m2").Phase).To(Equal(fleetv1alpha1.ClusterPhaseReady))
	}).WithTimeout(eventually).WithPolling(poll).Should(Succeed())
}

type pemPair struct{ cert, key []byte }

// nearExpiryCert issues, with the Database's CA, a server certificate for
// host that has ten days left.
func nearExpiryCert(g Gomega, pki *corev1.Secret, host string) pemPair {
	ca := parsePEMCert(g, pki.Data["ca.crt"])
	block, _ := pem.Decode(pki.Data["ca.key"])
	caKey, err := x509.ParseECPrivateKey(block.Bytes)
	g.Expect(err).NotTo(HaveOccurred())
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	g.Expect(err).NotTo(HaveOccurred())
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(42), Subject: pkix.Name{CommonName: host},
		DNSNames:  append([]string{host}, member.ServerDNSNames(pki.Namespace, "ledger")...),
		NotBefore: time.Now().Add(-80 * 24 * time.Hour), NotAfter: time.Now().Add(10 * 24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	g.Expect(err).NotTo(HaveOccurred())
	keyDER, err := x509.MarshalECPrivateKey(key)
	g.Expect(err).NotTo(HaveOccurred())
	return pemPair{
		cert: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		key:  pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}),
	}
}

func parsePEMCert(g Gomega, b []byte) *x509.Certificate {
	block, _ := pem.Decode(b)
	g.Expect(block).NotTo(BeNil())
	cert, err := x509.ParseCertificate(block.Bytes)
	g.Expect(err).NotTo(HaveOccurred())
	return cert
}
