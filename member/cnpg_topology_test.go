package member_test

import (
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	fleetv1alpha1 "github.com/fleetdb/fleetdb/apis/v1alpha1"
	"github.com/fleetdb/fleetdb/member"
)

func testTopology(self, primary string) *member.Topology {
	return &member.Topology{
		Self:    self,
		Primary: primary,
		Peers: []member.Peer{
			{Name: "us-1", Host: "orders-rw.team-a.us-1.example.net", Port: 5432},
			{Name: "eu-1", Host: "orders-rw.team-a.eu-1.example.net", Port: 15432},
		},
		Certificates: member.TopologyCertificates{
			CACert:     []byte("ca-cert"),
			ServerCert: []byte("server-cert-" + self), ServerKey: []byte("server-key-" + self),
			ReplicationCert: []byte("repl-cert"), ReplicationKey: []byte("repl-key"),
		},
	}
}

func topologyParams(self, primary string) member.Params {
	return member.Params{Database: cnpgTestDatabase(), Cluster: self, Credentials: testCredentials(), Topology: testTopology(self, primary)}
}

func TestRenderTopologyPrimary(t *testing.T) {
	g := NewWithT(t)
	r := render(t, topologyParams("eu-1", "eu-1"))
	g.Expect(r.order).To(Equal([]string{"Namespace/team-a", "Secret/orders-credentials", "Secret/orders-topology-ca",
		"Secret/orders-topology-server", "Secret/orders-topology-replication", "Service/orders", "Cluster/orders"}))
	spec := r.cluster().Object["spec"].(map[string]any)
	g.Expect(spec["replica"]).To(Equal(map[string]any{"self": "eu-1", "primary": "eu-1", "source": "us-1"}),
		"a primary's source names a peer, as in CloudNativePG's documentation")
	g.Expect(spec["bootstrap"]).To(Equal(map[string]any{"initdb": map[string]any{
		"database": "app", "owner": "app", "secret": map[string]any{"name": "orders-credentials"},
	}}), "the primary starts a new database")
	g.Expect(spec["certificates"]).To(Equal(map[string]any{
		"serverCASecret": "orders-topology-ca", "clientCASecret": "orders-topology-ca",
		"serverTLSSecret": "orders-topology-server", "replicationTLSSecret": "orders-topology-replication",
	}), "no serverAltDNSNames: CloudNativePG's webhook refuses them beside a serverTLSSecret")
	ref := func(name, key string) map[string]any { return map[string]any{"name": name, "key": key} }
	g.Expect(spec["externalClusters"]).To(Equal([]any{
		map[string]any{
			"name": "eu-1",
			"connectionParameters": map[string]any{"host": "orders-rw.team-a.eu-1.example.net", "port": "15432",
				"user": "streaming_replica", "dbname": "postgres", "sslmode": "verify-full", "application_name": "fleetdb:eu-1"},
			"sslCert": ref("orders-topology-replication", "tls.crt"), "sslKey": ref("orders-topology-replication", "tls.key"),
			"sslRootCert": ref("orders-topology-ca", "ca.crt"),
		},
		map[string]any{
			"name": "us-1",
			"connectionParameters": map[string]any{"host": "orders-rw.team-a.us-1.example.net", "port": "5432",
				"user": "streaming_replica", "dbname": "postgres", "sslmode": "verify-full", "application_name": "fleetdb:eu-1"},
			"sslCert": ref("orders-topology-replication", "tls.crt"), "sslKey": ref("orders-topology-replication", "tls.key"),
			"sslRootCert": ref("orders-topology-ca", "ca.crt"),
		},
	}), "every member, sorted by name; the application_name is this member's, the name its standby has on the primary")
	g.Expect(spec["postgresql"]).To(Equal(map[string]any{"parameters": wanLink}),
		"no synchronous standbys: asynchronous commits; the link's parameters")

	ca := r.objs["Secret/orders-topology-ca"].(*corev1.Secret)
	g.Expect(ca.Data).To(Equal(map[string][]byte{"ca.crt": []byte("ca-cert")}), "the CA Secret holds no key")
	server := r.objs["Secret/orders-topology-server"].(*corev1.Secret)
	g.Expect(server.Type).To(Equal(corev1.SecretTypeTLS))
	g.Expect(server.Data).To(Equal(map[string][]byte{"tls.crt": []byte("server-cert-eu-1"), "tls.key": []byte("server-key-eu-1")}))
	repl := r.objs["Secret/orders-topology-replication"].(*corev1.Secret)
	g.Expect(repl.Type).To(Equal(corev1.SecretTypeTLS))
	g.Expect(repl.Data).To(Equal(map[string][]byte{"tls.crt": []byte("repl-cert"), "tls.key": []byte("repl-key")}))
	g.Expect(repl.Labels).To(HaveKeyWithValue(fleetv1alpha1.LabelDatabaseName, "orders"), "labelled like every member object")
	for _, s := range []*corev1.Secret{ca, server, repl} {
		g.Expect(s.Labels).To(HaveKeyWithValue("cnpg.io/reload", "true"), "CloudNativePG reloads %s when it changes", s.Name)
	}
}

func TestRenderTopologyStandby(t *testing.T) {
	g := NewWithT(t)
	p := topologyParams("us-1", "eu-1")
	spec := render(t, p).cluster().Object["spec"].(map[string]any)
	g.Expect(spec["replica"]).To(Equal(map[string]any{"self": "us-1", "primary": "eu-1", "source": "eu-1"}))
	g.Expect(spec["bootstrap"]).To(Equal(map[string]any{"pg_basebackup": map[string]any{
		"source": "eu-1", "database": "app", "owner": "app", "secret": map[string]any{"name": "orders-credentials"},
	}}), "a standby streams its data from the primary")
	g.Expect(spec["certificates"]).NotTo(HaveKey("serverAltDNSNames"), "the server certificate carries the peer host itself")

	p.Topology.PromotionToken = "token"
	p.Topology.Primary = "us-1"
	spec = render(t, p).cluster().Object["spec"].(map[string]any)
	g.Expect(spec["replica"]).To(Equal(map[string]any{"self": "us-1", "primary": "us-1", "source": "eu-1", "promotionToken": "token"}))
}

func TestRenderTopologySynchronous(t *testing.T) {
	g := NewWithT(t)
	for _, self := range []string{"eu-1", "us-1"} { // the primary and the standby render the same
		p := topologyParams(self, "eu-1")
		p.Topology.Peers = append(p.Topology.Peers, member.Peer{Name: "orders-2", Host: "h", Port: 5432})
		p.Topology.SynchronousStandbys = []string{"eu-1", "orders-2", "us-1"}
		spec := render(t, p).cluster().Object["spec"].(map[string]any)
		var want []any
		for _, m := range []string{"eu-1", "orders-2", "us-1"} {
			if m != self {
				want = append(want, "fleetdb:"+m)
			}
		}
		g.Expect(spec["postgresql"]).To(Equal(map[string]any{"parameters": wanLink, "synchronous": map[string]any{
			"method": "any", "number": int64(2), "maxStandbyNamesFromCluster": int64(0),
			"standbyNamesPre": want, "dataDurability": "required",
		}}), "%s: every one of the other members' standbys, never its own instances (a member named orders-2 is not the instance orders-2)", self)
	}
}

// wanLink are the link's parameters of a PrimaryStandby Database without
// spec.topology.link on a 10Gi volume: 30s timeouts, a quarter of the
// volume of WAL kept.
var wanLink = map[string]any{"wal_sender_timeout": "30000ms", "wal_receiver_timeout": "30000ms", "wal_keep_size": "2560MB"}

// spec.topology.link replaces CloudNativePG's in-cluster defaults (5s,
// 512MB) on every member; the default WAL kept follows the volume, within
// 512Mi and 4Gi.
func TestRenderTopologyLink(t *testing.T) {
	g := NewWithT(t)
	params := func(self string, mutate func(*fleetv1alpha1.Database)) map[string]any {
		p := topologyParams(self, "eu-1")
		mutate(p.Database)
		spec := render(t, p).cluster().Object["spec"].(map[string]any)
		return spec["postgresql"].(map[string]any)["parameters"].(map[string]any)
	}
	for _, self := range []string{"eu-1", "us-1"} {
		got := params(self, func(db *fleetv1alpha1.Database) {
			db.Spec.Topology = &fleetv1alpha1.TopologySpec{Mode: fleetv1alpha1.TopologyPrimaryStandby, PrimaryCluster: "eu-1"}
			db.Spec.Topology.Link = &fleetv1alpha1.TopologyLinkSpec{
				Timeout: &metav1.Duration{Duration: 90 * time.Second}, WALKeepSize: ptr(resource.MustParse("3Gi")),
			}
		})
		g.Expect(got).To(Equal(map[string]any{"wal_sender_timeout": "90000ms", "wal_receiver_timeout": "90000ms", "wal_keep_size": "3072MB"}), self)
	}
	for size, want := range map[string]string{"1Gi": "512MB", "10Gi": "2560MB", "100Gi": "4096MB"} {
		got := params("eu-1", func(db *fleetv1alpha1.Database) { db.Spec.Storage.Size = resource.MustParse(size) })
		g.Expect(got).To(HaveKeyWithValue("wal_keep_size", want), "a %s volume", size)
	}
	got := params("eu-1", func(db *fleetv1alpha1.Database) {
		db.Spec.Topology = &fleetv1alpha1.TopologySpec{Mode: fleetv1alpha1.TopologyPrimaryStandby, PrimaryCluster: "eu-1",
			Link: &fleetv1alpha1.TopologyLinkSpec{WALKeepSize: ptr(resource.MustParse("1500k"))}}
	})
	g.Expect(got).To(HaveKeyWithValue("wal_keep_size", "2MB"), "rounded up to whole megabytes")
}

// With durability Synchronous and more than one instance in the primary
// member, CloudNativePG never promotes one of the member's own
// (asynchronous) standbys: it could lack commits the other members
// acknowledged. A standby member, one instance, or Asynchronous keep
// CloudNativePG's own failover.
func TestRenderTopologyNoLocalFailover(t *testing.T) {
	g := NewWithT(t)
	spec := func(self string, replicas int32, synchronous bool) map[string]any {
		p := topologyParams(self, "eu-1")
		p.Database.Spec.Replicas = replicas
		if synchronous {
			p.Topology.SynchronousStandbys = []string{"eu-1", "us-1"}
		}
		return render(t, p).cluster().Object["spec"].(map[string]any)
	}
	g.Expect(spec("eu-1", 2, true)).To(HaveKeyWithValue("failoverDelay", int64(2147483647)), "the primary member, two instances")
	g.Expect(spec("eu-1", 1, true)).NotTo(HaveKey("failoverDelay"), "one instance: nothing to promote")
	g.Expect(spec("us-1", 2, true)).NotTo(HaveKey("failoverDelay"), "a standby member: its designated primary holds no commit of its own")
	g.Expect(spec("eu-1", 2, false)).NotTo(HaveKey("failoverDelay"), "Asynchronous: commits do not wait for the other members")
}

func TestStandbyApplicationName(t *testing.T) {
	g := NewWithT(t)
	g.Expect(member.StandbyApplicationName("eu-1")).To(Equal("fleetdb:eu-1"))
	long := strings.Repeat("a", 63)
	name := member.StandbyApplicationName(long)
	g.Expect(len(name)).To(Equal(63), "PostgreSQL keeps 63 bytes of an application_name")
	other := member.StandbyApplicationName(strings.Repeat("a", 62) + "b")
	g.Expect(other).NotTo(Equal(name), "two long names that share the kept prefix stay apart")
	g.Expect(len(member.StandbyApplicationName(strings.Repeat("a", 55)))).To(Equal(63))
	g.Expect(member.StandbyApplicationName(strings.Repeat("a", 55))).To(Equal("fleetdb:" + strings.Repeat("a", 55)))
}

func TestRenderTopologyRefusesIncompleteWiring(t *testing.T) {
	for name, mutate := range map[string]func(*member.Params){
		"primary not a peer": func(p *member.Params) { p.Topology.Primary = "ap-1" },
		"self not a peer":    func(p *member.Params) { p.Topology.Self = "ap-1" },
		"peer without host":  func(p *member.Params) { p.Topology.Peers[0].Host = "" },
		"no server key":      func(p *member.Params) { p.Topology.Certificates.ServerKey = nil },
		"StatefulSet backend": func(p *member.Params) {
			p.Database.Spec.Backend = fleetv1alpha1.BackendStatefulSet
			p.Database.Spec.Replicas = 1
		},
	} {
		t.Run(name, func(t *testing.T) {
			p := topologyParams("us-1", "eu-1")
			mutate(&p)
			_, err := member.Render(p)
			NewWithT(t).Expect(err).To(HaveOccurred())
		})
	}
}

func TestReadReplicationStatusAndRole(t *testing.T) {
	g := NewWithT(t)
	u := member.NewCNPGCluster()
	u.SetName("orders")
	u.Object["spec"] = map[string]any{"instances": int64(2), "replica": map[string]any{"self": "us-1", "primary": "eu-1", "source": "eu-1"}}
	u.Object["status"] = map[string]any{
		"phase": "Cluster in healthy state", "readyInstances": int64(2), "currentPrimary": "orders-1",
		"demotionToken": "dt", "lastPromotionToken": "lpt",
		"switchReplicaClusterStatus": map[string]any{"inProgress": true},
		"conditions":                 []any{map[string]any{"type": "Ready", "status": "True"}},
		// A replica cluster: status.timelineID is the one from before its
		// demotion; the designated primary's reported timeline is current.
		"systemID": "7401234567890123456", "timelineID": int64(3),
		"instancesReportedState": map[string]any{
			"orders-1": map[string]any{"isPrimary": false, "timeLineID": int64(4)},
			"orders-2": map[string]any{"isPrimary": false, "timeLineID": int64(3)},
		},
	}
	g.Expect(member.ReadReplicationStatus(u)).To(Equal(member.ReplicationStatus{
		Primary: "eu-1", DemotionToken: "dt", LastPromotionToken: "lpt", SwitchInProgress: true, Healthy: true, CurrentPrimary: "orders-1",
		SystemID: "7401234567890123456", TimelineID: 4,
	}))
	reported := u.Object["status"].(map[string]any)["instancesReportedState"].(map[string]any)
	reported["orders-2"].(map[string]any)["isPrimary"] = true
	g.Expect(member.ReadReplicationStatus(u).RunsPrimary).To(BeTrue(), "an instance still runs as a primary")
	standby := member.ReplicationStatus{SystemID: "7401234567890123456", TimelineID: 4}
	g.Expect(standby.StreamsFrom(&member.ReplicationStatus{SystemID: "7401234567890123456", TimelineID: 4})).To(BeTrue())
	g.Expect(standby.StreamsFrom(&member.ReplicationStatus{SystemID: "7401234567890123456", TimelineID: 5})).To(BeFalse(), "another timeline")
	g.Expect(standby.StreamsFrom(&member.ReplicationStatus{SystemID: "7409999999999999999", TimelineID: 4})).To(BeFalse(), "another system")
	g.Expect((&member.ReplicationStatus{}).StreamsFrom(&member.ReplicationStatus{})).To(BeFalse(), "nothing reported")
	u.Object["status"].(map[string]any)["readyInstances"] = int64(1)
	g.Expect(member.ReadReplicationStatus(u).Healthy).To(BeFalse(), "an instance is not ready")
}

// An instance CloudNativePG could not read (isPrimary false, timeLineID 0),
// or one with a volume claim (status.instanceNames) that it did not ask
// (no entry: its pod pending, terminating on a lost node, or gone), may
// still run a primary: no report of the Cluster then proves that none does.
func TestUnreadInstancesProveNothing(t *testing.T) {
	g := NewWithT(t)
	u := member.NewCNPGCluster()
	u.SetName("orders")
	status := map[string]any{
		"currentPrimary": "orders-1", "instanceNames": []any{"orders-1", "orders-2"},
		"instancesReportedState": map[string]any{
			"orders-1": map[string]any{"isPrimary": false, "timeLineID": int64(4)},
			"orders-2": map[string]any{"isPrimary": false, "timeLineID": int64(4)},
		},
	}
	u.Object["status"] = status
	r := member.ReadReplicationStatus(u)
	g.Expect(r.UnreadInstances).To(BeEmpty())
	g.Expect(r.NoPrimaryProven()).To(BeTrue(), "every instance read, none a primary")

	reported := status["instancesReportedState"].(map[string]any)
	reported["orders-1"] = map[string]any{"isPrimary": false, "timeLineID": int64(0)}
	r = member.ReadReplicationStatus(u)
	g.Expect(r.UnreadInstances).To(Equal([]string{"orders-1"}))
	g.Expect(r.NoPrimaryProven()).To(BeFalse(), "the operator could not read orders-1")

	delete(reported, "orders-1")
	r = member.ReadReplicationStatus(u)
	g.Expect(r.UnreadInstances).To(Equal([]string{"orders-1"}), "orders-1 has a volume claim but no report")
	g.Expect(r.NoPrimaryProven()).To(BeFalse())

	// No instanceNames (a status written before CloudNativePG listed
	// them): the current primary still counts.
	delete(status, "instanceNames")
	g.Expect(member.ReadReplicationStatus(u).UnreadInstances).To(Equal([]string{"orders-1"}))
	delete(status, "instancesReportedState")
	g.Expect(member.ReadReplicationStatus(u).NoPrimaryProven()).To(BeFalse(), "nothing reported at all")

	reported["orders-1"] = map[string]any{"isPrimary": true, "timeLineID": int64(4)}
	status["instancesReportedState"] = reported
	g.Expect(member.ReadReplicationStatus(u).NoPrimaryProven()).To(BeFalse(), "a primary")
}

func TestApplyBodyKeepsTheLiveBootstrap(t *testing.T) {
	g := NewWithT(t)
	// The member was a standby when its Cluster was created; a switchover
	// made it the primary, whose rendering asks for initdb.
	live := render(t, topologyParams("us-1", "eu-1")).cluster()
	promoted := render(t, topologyParams("us-1", "us-1")).cluster()
	body, err := member.ApplyBody(promoted, live)
	g.Expect(err).NotTo(HaveOccurred())
	b, _, _ := unstructured.NestedMap(body.Object, "spec", "bootstrap")
	g.Expect(b).To(HaveKey("pg_basebackup"), "CloudNativePG's bootstrap is immutable")
	primary, _, _ := unstructured.NestedString(body.Object, "spec", "replica", "primary")
	g.Expect(primary).To(Equal("us-1"), "the rest of the rendering goes through")

	body, err = member.ApplyBody(promoted, nil)
	g.Expect(err).NotTo(HaveOccurred())
	b, _, _ = unstructured.NestedMap(body.Object, "spec", "bootstrap")
	g.Expect(b).To(HaveKey("initdb"), "a new Cluster takes the rendered bootstrap")
}
