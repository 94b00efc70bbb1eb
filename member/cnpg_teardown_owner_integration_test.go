package member_test

import (
	"encoding/json"
	"testing"

	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleetv1alpha1 "github.com/fleetdb/fleetdb/apis/v1alpha1"
	"github.com/fleetdb/fleetdb/member"
	"github.com/fleetdb/fleetdb/test/fleet"
)

// TestCNPGTeardownOwnership: the CloudNativePG teardown touches only the
// Owner's Clusters, as every other kind's, and the final backup's
// HasWorkload sees exactly what the teardown would touch: a Cluster of
// another hub, or of an earlier Database of the same name (written before
// hub identities), is neither deleted, hibernated nor stripped, whatever
// the policy, and is no workload of the Owner's.
func TestCNPGTeardownOwnership(t *testing.T) {
	if testing.Short() {
		t.Skip("integration test: starts kube-apiservers")
	}
	f := fleet.Start(t, fleet.Options{Members: []string{"cnpg"}})
	ctx := fleet.Context(t)
	c := f.Member("cnpg").Client

	cases := []struct {
		name string
		// hub labels the Cluster (LabelHubID; empty: none, as before hub identities).
		hub   string
		owner func(db *fleetv1alpha1.Database) member.Owner
	}{
		{"another hub's Cluster", "hub-b", func(db *fleetv1alpha1.Database) member.Owner {
			return member.Owner{Namespace: db.Namespace, Name: db.Name, UID: db.UID, HubID: "hub-a"}
		}},
		{"an earlier Database's Cluster of the same name", "", func(db *fleetv1alpha1.Database) member.Owner {
			return member.Owner{Namespace: db.Namespace, Name: db.Name, UID: types.UID("a-later-database"), HubID: "hub-a"}
		}},
	}
	policies := []fleetv1alpha1.DeletionPolicy{fleetv1alpha1.DeletionPolicyDelete, fleetv1alpha1.DeletionPolicyRetain, fleetv1alpha1.DeletionPolicyOrphan}
	for i, tc := range cases {
		for j, policy := range policies {
			t.Run(tc.name+" "+string(policy), func(t *testing.T) {
				g := NewWithT(t)
				ns := "cnpg-own-" + string(rune('a'+i)) + string(rune('a'+j))
				db := cnpgDatabase(ns, 2)
				cnpgApply(t, ctx, c, db, member.NewMemo())
				if tc.hub != "" {
					u := getCluster(t, ctx, c, ns)
					patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"labels": map[string]any{fleetv1alpha1.LabelHubID: tc.hub}}})
					g.Expect(c.Patch(ctx, u, client.RawPatch(types.MergePatchType, patch))).To(Succeed())
				}
				before := getCluster(t, ctx, c, ns)
				owner := tc.owner(db)

				has, err := member.HasWorkload(ctx, c, owner)
				g.Expect(err).NotTo(HaveOccurred())
				g.Expect(has).To(BeFalse(), "the Cluster is not the Owner's: no workload of its to back up")

				for pass := 0; pass < 3; pass++ {
					_, err := member.Teardown(ctx, c, owner, policy, nil)
					g.Expect(err).NotTo(HaveOccurred())
				}
				after := getCluster(t, ctx, c, ns)
				g.Expect(after.GetDeletionTimestamp()).To(BeNil(), "not deleted")
				g.Expect(after.GetAnnotations()).NotTo(HaveKey("cnpg.io/hibernation"), "not hibernated")
				g.Expect(after.GetLabels()).To(Equal(before.GetLabels()), "not stripped")
			})
		}
	}
}
