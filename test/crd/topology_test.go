package crd

import (
	"testing"

	. "github.com/onsi/gomega"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleetv1alpha1 "github.com/fleetdb/fleetdb/apis/v1alpha1"
	"github.com/fleetdb/fleetdb/test/fleet"
)

// TestTopologyValidation proves the rules of spec.topology (Database) and
// spec.replication (MemberCluster) on a real API server.
func TestTopologyValidation(t *testing.T) {
	f := fleet.Start(t, fleet.Options{Members: []string{}})
	hub := f.Hub.Client
	const ps = `{replicas: 2, placement: {clusterNames: [eu-1, us-1]}, `
	invalid := []struct {
		name string
		obj  *unstructured.Unstructured
		want []string
	}{
		{"PrimaryStandby without primaryCluster", database(t, "t1", ps+`topology: {mode: PrimaryStandby}}`),
			[]string{"spec.topology", "primaryCluster is required"}},
		{"PrimaryStandby with an empty primaryCluster", database(t, "t2", ps+`topology: {mode: PrimaryStandby, primaryCluster: ""}}`),
			[]string{"spec.topology", "primaryCluster is required"}},
		{"primaryCluster on Independent", database(t, "t3", ps+`topology: {mode: Independent, primaryCluster: eu-1}}`),
			[]string{"spec.topology", "apply only to mode PrimaryStandby"}},
		{"failover target other than primaryCluster", database(t, "t4", ps+`topology: {mode: PrimaryStandby, primaryCluster: eu-1, failover: {targetCluster: us-1}}}`),
			[]string{"spec.topology", "failover.targetCluster must equal"}},
		{"PrimaryStandby on mysql", database(t, "t5", `{engine: mysql, topology: {mode: PrimaryStandby, primaryCluster: eu-1}}`),
			[]string{"PrimaryStandby needs engine postgres on backend CloudNativePG"}},
		{"PrimaryStandby on the StatefulSet backend", database(t, "t6", `{backend: StatefulSet, topology: {mode: PrimaryStandby, primaryCluster: eu-1}}`),
			[]string{"PrimaryStandby needs engine postgres on backend CloudNativePG"}},
		{"unknown mode", database(t, "t7", `{topology: {mode: MultiPrimary}}`), []string{"spec.topology.mode", "Unsupported value"}},
		{"restoreFrom on PrimaryStandby", database(t, "t9", ps+`topology: {mode: PrimaryStandby, primaryCluster: eu-1}, restoreFrom: {backupName: b1}}`),
			[]string{"spec.restoreFrom is not supported with topology PrimaryStandby"}},
		{"stepTimeout too short", database(t, "t8", ps+`topology: {mode: PrimaryStandby, primaryCluster: eu-1, stepTimeout: 1s}}`),
			[]string{"spec.topology.stepTimeout", "between 10s and 24h"}},
		{"durability on Independent", database(t, "t10", ps+`topology: {mode: Independent, durability: Asynchronous}}`),
			[]string{"spec.topology", "durability applies only to mode PrimaryStandby"}},
		{"unknown durability", database(t, "t11", ps+`topology: {mode: PrimaryStandby, primaryCluster: eu-1, durability: Eventually}}`),
			[]string{"spec.topology.durability", "Unsupported value"}},
		{"link on Independent", database(t, "t12", ps+`topology: {mode: Independent, link: {timeout: 30s}}}`),
			[]string{"spec.topology", "link applies only to mode PrimaryStandby"}},
		{"link timeout too short", database(t, "t13", ps+`topology: {mode: PrimaryStandby, primaryCluster: eu-1, link: {timeout: 1s}}}`),
			[]string{"spec.topology.link.timeout", "between 5s and 10m"}},
		{"link timeout too long", database(t, "t14", ps+`topology: {mode: PrimaryStandby, primaryCluster: eu-1, link: {timeout: 1h}}}`),
			[]string{"spec.topology.link.timeout", "between 5s and 10m"}},
		{"walKeepSize too small", database(t, "t15", ps+`topology: {mode: PrimaryStandby, primaryCluster: eu-1, link: {walKeepSize: 1Mi}}}`),
			[]string{"spec.topology.link.walKeepSize", "between 64Mi and 1Ti"}},
		{"walKeepSize as large as the volume", database(t, "t16", ps+`storage: {size: 2Gi}, topology: {mode: PrimaryStandby, primaryCluster: eu-1, link: {walKeepSize: 2Gi}}}`),
			[]string{"walKeepSize must be smaller than spec.storage.size"}},
		{"replication without hostTemplate", memberCluster(t, "r1", `{kubeconfigSecretRef: {name: b}, replication: {port: 5432}}`),
			[]string{"spec.replication.hostTemplate", "Required"}},
		{"replication host without $(DATABASE)", memberCluster(t, "r2", `{kubeconfigSecretRef: {name: b}, replication: {hostTemplate: "pg.$(NAMESPACE).eu-1.example.net"}}`),
			[]string{"spec.replication.hostTemplate", "must contain $(DATABASE) and $(NAMESPACE)"}},
		{"replication host without $(NAMESPACE)", memberCluster(t, "r3", `{kubeconfigSecretRef: {name: b}, replication: {hostTemplate: "$(DATABASE).eu-1.example.net"}}`),
			[]string{"spec.replication.hostTemplate", "must contain $(DATABASE) and $(NAMESPACE)"}},
		{"replication host not a DNS name", memberCluster(t, "r4", `{kubeconfigSecretRef: {name: b}, replication: {hostTemplate: "$(DATABASE)-rw.$(NAMESPACE).EU_1:5432"}}`),
			[]string{"spec.replication.hostTemplate", "must be a DNS name"}},
		{"replication port zero", memberCluster(t, "r5", `{kubeconfigSecretRef: {name: b}, replication: {hostTemplate: "$(DATABASE).$(NAMESPACE).example.net", port: 0}}`),
			[]string{"spec.replication.port"}},
		{"replication port too high", memberCluster(t, "r6", `{kubeconfigSecretRef: {name: b}, replication: {hostTemplate: "$(DATABASE).$(NAMESPACE).example.net", port: 70000}}`),
			[]string{"spec.replication.port"}},
	}
	for _, tc := range invalid {
		t.Run("rejects "+tc.name, func(t *testing.T) {
			g := NewWithT(t)
			err := hub.Create(ctx(t), tc.obj)
			g.Expect(err).To(HaveOccurred(), "the API server accepted an invalid object")
			g.Expect(apierrors.IsInvalid(err)).To(BeTrue(), "want an Invalid error, got %v", err)
			for _, w := range tc.want {
				g.Expect(err.Error()).To(ContainSubstring(w))
			}
		})
	}

	t.Run("accepts a PrimaryStandby Database with a forced failover and defaults", func(t *testing.T) {
		g := NewWithT(t)
		g.Expect(hub.Create(ctx(t), database(t, "ledger",
			ps+`topology: {mode: PrimaryStandby, primaryCluster: us-1, failover: {targetCluster: us-1, reason: "eu-1 lost"}}}`))).To(Succeed())
		var db fleetv1alpha1.Database
		g.Expect(hub.Get(ctx(t), client.ObjectKey{Namespace: "default", Name: "ledger"}, &db)).To(Succeed())
		g.Expect(db.TopologyMode()).To(Equal(fleetv1alpha1.TopologyPrimaryStandby))
		g.Expect(db.Spec.Topology.StepTimeout).NotTo(BeNil(), "the CRD defaults it")
		g.Expect(db.Spec.Topology.Durability).To(BeEmpty(), "not defaulted in the CRD (an Independent topology must not get it)")
		g.Expect(db.TopologyDurability()).To(Equal(fleetv1alpha1.DurabilitySynchronous), "unset is Synchronous")
		g.Expect(hub.Create(ctx(t), database(t, "ledger-async",
			ps+`topology: {mode: PrimaryStandby, primaryCluster: us-1, durability: Asynchronous}}`))).To(Succeed())
		g.Expect(hub.Create(ctx(t), database(t, "ledger-wan",
			ps+`storage: {size: 20Gi}, topology: {mode: PrimaryStandby, primaryCluster: us-1, link: {timeout: 2m, walKeepSize: 8Gi}}}`))).To(Succeed())
	})

	t.Run("topology mode is immutable", func(t *testing.T) {
		g := NewWithT(t)
		db := database(t, "moving", ps+`topology: {mode: PrimaryStandby, primaryCluster: eu-1}}`)
		g.Expect(hub.Create(ctx(t), db)).To(Succeed())
		g.Expect(unstructured.SetNestedField(db.Object, map[string]any{"mode": "Independent"}, "spec", "topology")).To(Succeed())
		err := hub.Update(ctx(t), db)
		g.Expect(apierrors.IsInvalid(err)).To(BeTrue(), "want Invalid, got %v", err)
		g.Expect(err.Error()).To(ContainSubstring("spec.topology.mode is immutable"))

		independent := database(t, "staying", `{}`)
		g.Expect(hub.Create(ctx(t), independent)).To(Succeed())
		g.Expect(unstructured.SetNestedField(independent.Object, map[string]any{"mode": "PrimaryStandby", "primaryCluster": "eu-1"}, "spec", "topology")).To(Succeed())
		err = hub.Update(ctx(t), independent)
		g.Expect(apierrors.IsInvalid(err)).To(BeTrue(), "an Independent Database cannot become PrimaryStandby; got %v", err)

		// primaryCluster may change (a switchover).
		g.Expect(hub.Get(ctx(t), client.ObjectKeyFromObject(db), db)).To(Succeed())
		g.Expect(unstructured.SetNestedField(db.Object, "us-1", "spec", "topology", "primaryCluster")).To(Succeed())
		g.Expect(hub.Update(ctx(t), db)).To(Succeed())
	})

	t.Run("accepts a MemberCluster replication endpoint and defaults the port", func(t *testing.T) {
		g := NewWithT(t)
		g.Expect(hub.Create(ctx(t), memberCluster(t, "eu-1",
			`{kubeconfigSecretRef: {name: eu-1-kubeconfig}, replication: {hostTemplate: "$(DATABASE)-rw.$(NAMESPACE).eu-1.example.net"}}`))).To(Succeed())
		var mc fleetv1alpha1.MemberCluster
		g.Expect(hub.Get(ctx(t), client.ObjectKey{Name: "eu-1"}, &mc)).To(Succeed())
		g.Expect(mc.Spec.Replication.Port).To(BeEquivalentTo(5432))
		g.Expect(mc.Spec.Replication.Host("team-a", "orders")).To(Equal("orders-rw.team-a.eu-1.example.net"))
	})
}
