package placement

import (
	"testing"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	fleetv1alpha1 "github.com/fleetdb/fleetdb/apis/v1alpha1"
)

func mc(name string, labels map[string]string, cordoned bool) fleetv1alpha1.MemberCluster {
	return fleetv1alpha1.MemberCluster{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels},
		Spec:       fleetv1alpha1.MemberClusterSpec{Unschedulable: cordoned},
	}
}

func TestResolvePlacement(t *testing.T) {
	prod := map[string]string{"tier": "prod"}
	fleet := []fleetv1alpha1.MemberCluster{
		mc("us-1", prod, false), mc("eu-1", prod, false), mc("eu-2", map[string]string{"tier": "dev"}, false),
		mc("ap-1", prod, true),
	}
	sel := &metav1.LabelSelector{MatchLabels: prod}
	tests := []struct {
		name      string
		placement fleetv1alpha1.PlacementSpec
		current   []string
		want      []string
		missing   []string
		cordoned  []string
	}{
		{name: "names keep their order", placement: fleetv1alpha1.PlacementSpec{ClusterNames: []string{"eu-2", "us-1"}}, want: []string{"eu-2", "us-1"}},
		{name: "selector matches by label, sorted by name", placement: fleetv1alpha1.PlacementSpec{ClusterSelector: sel}, want: []string{"eu-1", "us-1"}, cordoned: []string{"ap-1"}},
		{name: "names then selector, no duplicates", placement: fleetv1alpha1.PlacementSpec{ClusterNames: []string{"us-1", "eu-2"}, ClusterSelector: sel}, want: []string{"us-1", "eu-2", "eu-1"}, cordoned: []string{"ap-1"}},
		{name: "unknown names are reported", placement: fleetv1alpha1.PlacementSpec{ClusterNames: []string{"nowhere", "eu-1"}}, want: []string{"eu-1"}, missing: []string{"nowhere"}},
		{name: "unschedulable gets no new placement", placement: fleetv1alpha1.PlacementSpec{ClusterNames: []string{"ap-1"}}, want: nil, cordoned: []string{"ap-1"}},
		{name: "unschedulable keeps an existing placement", placement: fleetv1alpha1.PlacementSpec{ClusterNames: []string{"ap-1"}}, current: []string{"ap-1"}, want: []string{"ap-1"}},
		{name: "maxClusters caps deterministically", placement: fleetv1alpha1.PlacementSpec{ClusterSelector: sel, MaxClusters: ptr.To[int32](1)}, want: []string{"eu-1"}, cordoned: []string{"ap-1"}},
		{name: "maxClusters keeps current members first", placement: fleetv1alpha1.PlacementSpec{ClusterSelector: sel, MaxClusters: ptr.To[int32](1)}, current: []string{"us-1"}, want: []string{"us-1"}, cordoned: []string{"ap-1"}},
		{name: "nothing matches", placement: fleetv1alpha1.PlacementSpec{ClusterSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"tier": "x"}}}, want: nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			db := &fleetv1alpha1.Database{Spec: fleetv1alpha1.DatabaseSpec{Placement: tc.placement}}
			got, err := Resolve(db, fleet, tc.current)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(got.Targets).To(Equal(tc.want))
			g.Expect(got.Missing).To(Equal(tc.missing))
			g.Expect(got.Cordoned).To(Equal(tc.cordoned))
		})
	}

	t.Run("a drained member loses its placements, except a primary", func(t *testing.T) {
		g := NewWithT(t)
		drained := mc("eu-1", prod, false)
		drained.Spec.Drain = true
		fleet := []fleetv1alpha1.MemberCluster{mc("us-1", prod, false), drained}
		db := &fleetv1alpha1.Database{Spec: fleetv1alpha1.DatabaseSpec{Placement: fleetv1alpha1.PlacementSpec{ClusterSelector: sel}}}
		got, err := Resolve(db, fleet, []string{"eu-1", "us-1"})
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(got.Targets).To(Equal([]string{"us-1"}))
		g.Expect(got.Drained).To(Equal([]string{"eu-1"}))

		named := &fleetv1alpha1.Database{Spec: fleetv1alpha1.DatabaseSpec{Placement: fleetv1alpha1.PlacementSpec{ClusterNames: []string{"eu-1"}}}}
		got, err = Resolve(named, fleet, []string{"eu-1"})
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(got.Targets).To(BeEmpty())

		primary := named.DeepCopy()
		primary.Spec.Placement.ClusterNames = []string{"eu-1", "us-1"}
		primary.Spec.Topology = &fleetv1alpha1.TopologySpec{Mode: fleetv1alpha1.TopologyPrimaryStandby, PrimaryCluster: "eu-1"}
		got, err = Resolve(primary, fleet, []string{"eu-1", "us-1"})
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(got.Targets).To(Equal([]string{"eu-1", "us-1"}))
		g.Expect(got.DrainHeld).To(Equal([]string{"eu-1"}))
		// Not placed there yet: a drained member is never a new primary's home.
		got, err = Resolve(primary, fleet, []string{"us-1"})
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(got.Targets).To(Equal([]string{"us-1"}))
	})

	t.Run("an invalid selector is an error", func(t *testing.T) {
		g := NewWithT(t)
		db := &fleetv1alpha1.Database{Spec: fleetv1alpha1.DatabaseSpec{Placement: fleetv1alpha1.PlacementSpec{
			ClusterSelector: &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "tier", Operator: "Sometimes"}}},
		}}}
		_, err := Resolve(db, fleet, nil)
		g.Expect(err).To(MatchError(ContainSubstring("clusterSelector")))
	})
}

func TestHoldPrimary(t *testing.T) {
	g := NewWithT(t)
	fleet := []fleetv1alpha1.MemberCluster{mc("us-1", nil, false), mc("eu-1", nil, false), mc("eu-2", nil, false)}
	db := &fleetv1alpha1.Database{Spec: fleetv1alpha1.DatabaseSpec{
		Placement: fleetv1alpha1.PlacementSpec{ClusterNames: []string{"us-1"}},
		Topology:  &fleetv1alpha1.TopologySpec{Mode: fleetv1alpha1.TopologyPrimaryStandby, PrimaryCluster: "us-1"},
	}}
	db.Status.Topology = &fleetv1alpha1.TopologyStatus{PrimaryCluster: "eu-1",
		Switchover: &fleetv1alpha1.SwitchoverStatus{From: "eu-1", To: "us-1"}}
	current := []string{"eu-1", "eu-2", "us-1"}
	placed, err := Resolve(db, fleet, current)
	g.Expect(err).NotTo(HaveOccurred())
	got := HoldPrimary(db, placed, fleet, current)
	g.Expect(got.Targets).To(Equal([]string{"us-1", "eu-1"}), "the source of the switchover under way stays; a standby goes")
	g.Expect(got.PrimaryHeld).To(Equal([]string{"eu-1"}))

	// Done: the old primary is a standby like any other.
	done := db.DeepCopy()
	done.Status.Topology = &fleetv1alpha1.TopologyStatus{PrimaryCluster: "us-1"}
	g.Expect(HoldPrimary(done, placed, fleet, current).PrimaryHeld).To(BeEmpty())

	// A MemberCluster being deleted is not kept (the hub removes nothing there).
	going := []fleetv1alpha1.MemberCluster{mc("us-1", nil, false), mc("eu-1", nil, false)}
	now := metav1.Now()
	going[1].DeletionTimestamp = &now
	g.Expect(HoldPrimary(db, placed, going, current).PrimaryHeld).To(BeEmpty())

	// An Independent Database holds no primary.
	indep := db.DeepCopy()
	indep.Spec.Topology = nil
	g.Expect(HoldPrimary(indep, placed, fleet, current).Targets).To(Equal([]string{"us-1"}))
}
