// Package placement is the hub's placement of a Database over the member
// clusters and the tenancy rule that decides which members a namespace may
// use. It is pure (no client): the hub's Database controller and the
// kubectl plugin's drain preview share it.
package placement

import (
	"fmt"
	"slices"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	fleetv1alpha1 "github.com/fleetdb/fleetdb/apis/v1alpha1"
)

// Result is the outcome of resolving a Database's placement.
type Result struct {
	// Targets are the chosen members, in deterministic order.
	Targets []string
	// Missing are named clusters that are not registered.
	Missing []string
	// Cordoned are named or selected clusters left out because they are unschedulable.
	Cordoned []string
	// Drained are named or selected clusters left out because they are
	// being drained (MemberCluster spec.drain).
	Drained []string
	// DrainHeld are draining clusters kept because they hold the primary of
	// a PrimaryStandby Database (a drain never drops a primary).
	DrainHeld []string
	// PrimaryHeld are members that left the placement otherwise (no longer
	// named or selected, over maxClusters, or their tenancy no longer
	// admits the namespace) but are kept because they hold the primary of
	// a PrimaryStandby Database (see HoldPrimary).
	PrimaryHeld []string
}

// HoldsPrimary reports whether member is, or is becoming, the primary of a
// PrimaryStandby Database: the one in the spec, the one in the status, or
// either end of a switchover under way (its source is primary until it is
// demoted, its target from the promotion on).
func HoldsPrimary(db *fleetv1alpha1.Database, member string) bool {
	if db.TopologyMode() != fleetv1alpha1.TopologyPrimaryStandby {
		return false
	}
	if t := db.Spec.Topology; t != nil && t.PrimaryCluster == member {
		return true
	}
	st := db.Status.Topology
	if st == nil {
		return false
	}
	if sw := st.Switchover; sw != nil && sw.Finished == nil && (sw.From == member || sw.To == member) {
		return true
	}
	return st.PrimaryCluster == member
}

// HoldPrimary keeps placed the members of current that res leaves out but
// that hold the primary of a PrimaryStandby Database (HoldsPrimary): no
// placement edit, label change or tenancy change tears the primary down
// before it is switched over, as no drain does (eligible). They are added
// to res.Targets (beyond maxClusters if need be) and listed in
// res.PrimaryHeld. registered are all the MemberClusters, whatever their
// tenancy: a member whose MemberCluster is gone or being deleted is not
// kept (the hub removes nothing there; status.leftBehind says so).
func HoldPrimary(db *fleetv1alpha1.Database, res Result, registered []fleetv1alpha1.MemberCluster, current []string) Result {
	for _, name := range current {
		if slices.Contains(res.Targets, name) || !HoldsPrimary(db, name) {
			continue
		}
		i := slices.IndexFunc(registered, func(m fleetv1alpha1.MemberCluster) bool { return m.Name == name })
		if i < 0 || !registered[i].DeletionTimestamp.IsZero() {
			continue
		}
		res.Targets = append(res.Targets, name)
		res.PrimaryHeld = append(res.PrimaryHeld, name)
	}
	return res
}

// Resolve chooses the members of a Database: the clusters named in
// spec.placement.clusterNames followed by the clusters its selector matches
// (by name), capped by maxClusters. Unschedulable members get no new
// placement but keep an existing one (current lists the members the
// Database is placed on now). Members already placed come first when the cap
// bites, so a new registration never moves a running Database.
func Resolve(db *fleetv1alpha1.Database, members []fleetv1alpha1.MemberCluster, current []string) (Result, error) {
	p := db.Spec.Placement
	var selector labels.Selector
	if p.ClusterSelector != nil {
		s, err := metav1.LabelSelectorAsSelector(p.ClusterSelector)
		if err != nil {
			return Result{}, fmt.Errorf("spec.placement.clusterSelector: %w", err)
		}
		selector = s
	}
	c := placementChoice{db: db, current: current, byName: make(map[string]*fleetv1alpha1.MemberCluster, len(members)), seen: map[string]bool{}}
	for i := range members {
		if members[i].DeletionTimestamp.IsZero() {
			c.byName[members[i].Name] = &members[i]
		}
	}
	for _, name := range p.ClusterNames {
		if c.byName[name] == nil {
			c.res.Missing = append(c.res.Missing, name)
			c.seen[name] = true
			continue
		}
		c.add(name)
	}
	if selector != nil {
		for _, name := range c.matching(selector) {
			c.add(name)
		}
	}
	c.res.Targets = capPlacement(c.candidates, p.MaxClusters, current)
	return c.res, nil
}

// placementChoice collects a Database's candidate members in order.
type placementChoice struct {
	db         *fleetv1alpha1.Database
	current    []string
	byName     map[string]*fleetv1alpha1.MemberCluster
	seen       map[string]bool
	candidates []string
	res        Result
}

// add makes a registered member a candidate once, if it is eligible.
func (c *placementChoice) add(name string) {
	if !c.seen[name] && c.eligible(name) {
		c.candidates = append(c.candidates, name)
	}
	c.seen[name] = true
}

// eligible: draining members only keep a primary they hold; unschedulable
// ones only keep an existing placement. What is left out is recorded.
func (c *placementChoice) eligible(name string) bool {
	m := c.byName[name]
	if m == nil {
		return false
	}
	placed := slices.Contains(c.current, name)
	if m.Spec.Drain {
		if placed && HoldsPrimary(c.db, name) {
			c.res.DrainHeld = append(c.res.DrainHeld, name)
			return true
		}
		c.res.Drained = append(c.res.Drained, name)
		return false
	}
	if m.Spec.Unschedulable && !placed {
		c.res.Cordoned = append(c.res.Cordoned, name)
		return false
	}
	return true
}

// matching are the registered members the selector matches, by name.
func (c *placementChoice) matching(selector labels.Selector) []string {
	names := make([]string, 0, len(c.byName))
	for name, m := range c.byName {
		if selector.Matches(labels.Set(m.Labels)) {
			names = append(names, name)
		}
	}
	slices.Sort(names)
	return names
}

// capPlacement cuts candidates to maxClusters, stable under the cap:
// members placed now first, then candidate order.
func capPlacement(candidates []string, maxClusters *int32, current []string) []string {
	if maxClusters == nil || len(candidates) <= int(*maxClusters) {
		return candidates
	}
	slices.SortStableFunc(candidates, func(a, b string) int {
		ca, cb := slices.Contains(current, a), slices.Contains(current, b)
		switch {
		case ca && !cb:
			return -1
		case cb && !ca:
			return 1
		}
		return 0
	})
	return candidates[:*maxClusters]
}

// BackupPrimary is the member a backup of db's data in member cluster is
// taken from instead of cluster: for a PrimaryStandby Database whose
// cluster is a standby member, the member that is primary now
// (status.topology.primaryCluster; spec.topology.primaryCluster before the
// hub recorded one). "" when cluster takes its own: an Independent
// Database, or cluster is the primary.
//
// A standby member's Cluster is a CloudNativePG replica cluster, a hot
// standby: a pg_dump there runs in one long transaction that WAL replay can
// cancel ("canceling statement due to conflict with recovery", whenever
// replay waits longer than max_standby_streaming_delay; PostgreSQL's
// "Handling Query Conflicts" in high-availability.sgml). The primary has
// no such conflict, and holds the same data.
func BackupPrimary(db *fleetv1alpha1.Database, cluster string) string {
	if db == nil || db.Spec.Topology == nil || db.Spec.Topology.Mode != fleetv1alpha1.TopologyPrimaryStandby {
		return ""
	}
	primary := db.Spec.Topology.PrimaryCluster
	if st := db.Status.Topology; st != nil && st.PrimaryCluster != "" {
		primary = st.PrimaryCluster
	}
	if primary == cluster {
		return ""
	}
	return primary
}
