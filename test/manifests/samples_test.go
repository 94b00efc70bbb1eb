package manifests

import (
	"strings"
	"testing"

	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	fleetv1alpha1 "github.com/fleetdb/fleetdb/apis/v1alpha1"
)

func TestSamples(t *testing.T) {
	t.Run("database", func(t *testing.T) {
		g := NewWithT(t)
		docs := splitYAML(readFile(t, "deploy/samples/database.yaml"))
		g.Expect(docs).To(HaveLen(1))
		db, ok := decodeStrict(t, "deploy/samples/database.yaml", docs[0]).(*fleetv1alpha1.Database)
		g.Expect(ok).To(BeTrue(), "the sample is a Database")
		g.Expect(db.Namespace).NotTo(BeEmpty())
		g.Expect(db.Spec.Engine).To(Equal(fleetv1alpha1.EnginePostgres))
		g.Expect(db.Spec.Replicas).To(Equal(int32(3)))
		g.Expect(db.EffectiveBackend()).To(Equal(fleetv1alpha1.BackendCloudNativePG), "the sample runs on CloudNativePG")
		g.Expect(db.Spec.Storage.Size.Cmp(resource.MustParse("1Gi"))).To(BeZero(), "1Gi of storage")
		g.Expect(db.Spec.Placement.ClusterSelector).NotTo(BeNil())
		g.Expect(db.Spec.Placement.ClusterSelector.MatchLabels).To(HaveKeyWithValue("fleetdb.io/sample", "true"))

		// The kind fleet's members carry the labels the sample selects.
		sel, err := metav1.LabelSelectorAsSelector(db.Spec.Placement.ClusterSelector)
		g.Expect(err).NotTo(HaveOccurred())
		kindLabels := labels.Set{}
		for _, kv := range strings.Split(submatch(t, "Makefile", `(?m)^KIND_MEMBER_LABELS\s*:?=\s*(\S+)\s*$`), ",") {
			k, v, _ := strings.Cut(kv, "=")
			kindLabels[k] = v
		}
		g.Expect(sel.Matches(kindLabels)).To(BeTrue(), "the sample places on the kind members (%v)", kindLabels)
	})

	t.Run("database-primary-standby", func(t *testing.T) {
		g := NewWithT(t)
		docs := splitYAML(readFile(t, "deploy/samples/database-primary-standby.yaml"))
		g.Expect(docs).To(HaveLen(1))
		db, ok := decodeStrict(t, "deploy/samples/database-primary-standby.yaml", docs[0]).(*fleetv1alpha1.Database)
		g.Expect(ok).To(BeTrue(), "the sample is a Database")
		g.Expect(db.TopologyMode()).To(Equal(fleetv1alpha1.TopologyPrimaryStandby))
		g.Expect(db.EffectiveBackend()).To(Equal(fleetv1alpha1.BackendCloudNativePG))
		// make run's fleet: member-1 and member-2, joined with a replication endpoint.
		g.Expect(db.Spec.Placement.ClusterNames).To(Equal([]string{"member-1", "member-2"}))
		g.Expect(db.Spec.Topology.PrimaryCluster).To(Equal("member-1"))
		g.Expect(readFile(t, "hack/fleet.sh")).To(ContainSubstring("--replication-host-template"), "the local fleet sets spec.replication")
	})

	t.Run("databasebackup and restore", func(t *testing.T) {
		g := NewWithT(t)
		src, ok := decodeStrict(t, "deploy/samples/database.yaml", splitYAML(readFile(t, "deploy/samples/database.yaml"))[0]).(*fleetv1alpha1.Database)
		g.Expect(ok).To(BeTrue())
		docs := splitYAML(readFile(t, "deploy/samples/databasebackup.yaml"))
		g.Expect(docs).To(HaveLen(1))
		b, ok := decodeStrict(t, "deploy/samples/databasebackup.yaml", docs[0]).(*fleetv1alpha1.DatabaseBackup)
		g.Expect(ok).To(BeTrue(), "the sample is a DatabaseBackup")
		g.Expect(b.Namespace).To(Equal(src.Namespace))
		g.Expect(b.Spec.DatabaseName).To(Equal(src.Name), "it backs up the sample Database")

		docs = splitYAML(readFile(t, "deploy/samples/database-restore.yaml"))
		g.Expect(docs).To(HaveLen(1))
		db, ok := decodeStrict(t, "deploy/samples/database-restore.yaml", docs[0]).(*fleetv1alpha1.Database)
		g.Expect(ok).To(BeTrue(), "the restore sample is a Database")
		g.Expect(db.Namespace).To(Equal(src.Namespace))
		g.Expect(db.Name).NotTo(Equal(src.Name))
		g.Expect(db.Spec.RestoreFrom).NotTo(BeNil())
		g.Expect(db.Spec.RestoreFrom.BackupName).To(Equal(b.Name), "it restores the sample DatabaseBackup")
		g.Expect(db.Spec.Engine).To(Equal(src.Spec.Engine))
		g.Expect(db.Spec.Placement).To(Equal(src.Spec.Placement), "on the members the backup covers")
	})

	t.Run("membercluster", func(t *testing.T) {
		g := NewWithT(t)
		docs := splitYAML(readFile(t, "deploy/samples/membercluster.yaml"))
		g.Expect(docs).To(HaveLen(1))
		mc, ok := decodeStrict(t, "deploy/samples/membercluster.yaml", docs[0]).(*fleetv1alpha1.MemberCluster)
		g.Expect(ok).To(BeTrue(), "the sample is a MemberCluster")
		g.Expect(mc.Namespace).To(BeEmpty(), "MemberCluster is cluster-scoped")
		g.Expect(mc.Labels).To(HaveKeyWithValue("fleetdb.io/sample", "true"))
		// The names kubectl fleetdb join uses.
		ref := mc.Spec.KubeconfigSecretRef
		g.Expect(ref.Namespace).To(BeEmpty(), "the Secret is in the hub's namespace; the API refuses another")
		g.Expect(ref.Name).To(Equal(mc.Name + "-kubeconfig"))
		g.Expect(ref.Key).To(Equal("kubeconfig"))
	})
}
