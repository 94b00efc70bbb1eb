package database

import (
	"testing"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	fleetv1alpha1 "github.com/fleetdb/fleetdb/apis/v1alpha1"
	"github.com/fleetdb/fleetdb/member"
)

func pkiDatabase() *fleetv1alpha1.Database {
	return &fleetv1alpha1.Database{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "orders"}}
}

func TestTopologyFor(t *testing.T) {
	g := NewWithT(t)
	db := pkiDatabase()
	db.Spec.Topology = &fleetv1alpha1.TopologySpec{Mode: fleetv1alpha1.TopologyPrimaryStandby, PrimaryCluster: "eu-1"}
	peers := []member.Peer{{Name: "eu-1", Host: "a", Port: 5432}, {Name: "us-1", Host: "b", Port: 5432}, {Name: "ap-1", Host: "c", Port: 5432}}
	top := topologyFor(db, "us-1", peers, member.TopologyCertificates{})
	g.Expect(top.Self).To(Equal("us-1"))
	g.Expect(top.Primary).To(Equal("eu-1"))
	g.Expect(top.PromotionToken).To(BeEmpty())
	g.Expect(top.Peers).To(Equal(peers))
	g.Expect(top.SynchronousStandbys).To(Equal([]string{"ap-1", "eu-1"}), "durability unset is Synchronous: every other member")

	db.Status.Topology = &fleetv1alpha1.TopologyStatus{Mode: fleetv1alpha1.TopologyPrimaryStandby, PrimaryCluster: "us-1"}
	g.Expect(topologyFor(db, "eu-1", peers, member.TopologyCertificates{}).Primary).To(Equal("us-1"), "the primary the hub last promoted")

	// A forced failover fenced eu-1: the others no longer wait for it.
	db.Status.Topology.Fenced = []string{"eu-1"}
	g.Expect(topologyFor(db, "us-1", peers, member.TopologyCertificates{}).SynchronousStandbys).To(Equal([]string{"ap-1"}))
	db.Status.Topology.Fenced = []string{"ap-1", "eu-1"}
	g.Expect(topologyFor(db, "us-1", peers, member.TopologyCertificates{}).SynchronousStandbys).To(BeEmpty(), "nothing left to wait for")
	db.Spec.Topology.Durability = fleetv1alpha1.DurabilityAsynchronous
	db.Status.Topology.Fenced = nil
	g.Expect(topologyFor(db, "us-1", peers, member.TopologyCertificates{}).SynchronousStandbys).To(BeEmpty(), "Asynchronous")
}
