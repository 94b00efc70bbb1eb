package topology

import (
	"slices"
	"strings"
	"time"

	fleetv1alpha1 "github.com/fleetdb/fleetdb/apis/v1alpha1"
)

// This file decides whom each member's CloudNativePG Cluster follows in a
// PrimaryStandby Database. The decision is a function of the Database's
// persisted status.topology (and nothing in memory), so a member sync renders
// the same after a hub restart as before it, and a member is only ever
// rendered primary once the status that allows it is stored.

// RenderedRole is what a member's Cluster is rendered with: replica.primary
// and, for the member being promoted in a planned switchover, the promotion
// token (in the same write).
type RenderedRole struct {
	// Primary is the member the Cluster treats as primary (itself on the primary).
	Primary string
	// PromotionToken is the old primary's demotion token, on the promoted member only.
	PromotionToken string
}

// stepOrder orders the steps: a forced promotion's Fence stands where a
// switchover's Demote does (both turn the old primary into a standby of the
// target).
var stepOrder = map[fleetv1alpha1.SwitchoverStep]int{
	fleetv1alpha1.StepCheckTarget:   0,
	fleetv1alpha1.StepDemote:        1,
	fleetv1alpha1.StepFence:         1,
	fleetv1alpha1.StepWaitDemotion:  2,
	fleetv1alpha1.StepPromote:       3,
	fleetv1alpha1.StepWaitPromotion: 4,
	fleetv1alpha1.StepRepoint:       5,
	fleetv1alpha1.StepDone:          6,
}

// reached is true when the switchover is at step s or past it.
func reached(sw *fleetv1alpha1.SwitchoverStatus, s fleetv1alpha1.SwitchoverStep) bool {
	return stepOrder[sw.Step] >= stepOrder[s]
}

// Decided is false for a PrimaryStandby Database whose primary the
// hub has not recorded yet: its members are not written until it has (a
// primaryCluster changed right after creation must not leave two members
// rendered primary).
func Decided(db *fleetv1alpha1.Database) bool {
	if db.TopologyMode() != fleetv1alpha1.TopologyPrimaryStandby {
		return true
	}
	return db.Status.Topology != nil && db.Status.Topology.PrimaryCluster != ""
}

// DecideRole is what member m's Cluster is rendered with, from the persisted
// status.topology; ok is false when the Database is not PrimaryStandby or its
// primary is not recorded yet.
//
// The rules that keep one primary: the old primary follows the target from
// Demote (or Fence) on; the target is rendered primary only from Promote on,
// which the hub enters only with the old primary's demotion token in hand
// (or, forced, with the old primary recorded as fenced); an abort, which
// renders the old primary primary again, is only taken before Promote.
func DecideRole(db *fleetv1alpha1.Database, m string) (RenderedRole, bool) {
	if !Decided(db) || db.TopologyMode() != fleetv1alpha1.TopologyPrimaryStandby {
		return RenderedRole{}, false
	}
	st := db.Status.Topology
	sw := st.Switchover
	if sw == nil {
		return RenderedRole{Primary: st.PrimaryCluster}, true
	}
	switch {
	case m == sw.To && reached(sw, fleetv1alpha1.StepPromote):
		return RenderedRole{Primary: sw.To, PromotionToken: sw.DemotionToken}, true
	case m == sw.To:
		return RenderedRole{Primary: sw.From}, true
	case m == sw.From && reached(sw, fleetv1alpha1.StepDemote):
		return RenderedRole{Primary: sw.To}, true
	case m == sw.From:
		return RenderedRole{Primary: sw.From}, true
	case slices.Contains(st.Fenced, m) || reached(sw, fleetv1alpha1.StepRepoint):
		// A fenced old primary of an earlier forced promotion follows the
		// newest primary there is, as the other standbys do once re-pointed.
		if reached(sw, fleetv1alpha1.StepPromote) {
			return RenderedRole{Primary: sw.To}, true
		}
	}
	return RenderedRole{Primary: st.PrimaryCluster}, true
}

// SynchronousStandbys are the members whose standbys a commit on member
// self's primary waits for (every one of them): with durability Synchronous,
// every other placed member except those fenced by a forced failover (a
// fenced old primary follows no one until it is rebuilt, and waiting for it
// would stop the new primary's commits); none with Asynchronous. A function
// of the stored status, like DecideRole: the same after a hub restart.
func SynchronousStandbys(db *fleetv1alpha1.Database, self string, placed []string) []string {
	if db.TopologyMode() != fleetv1alpha1.TopologyPrimaryStandby || db.TopologyDurability() != fleetv1alpha1.DurabilitySynchronous {
		return nil
	}
	var fenced []string
	if db.Status.Topology != nil {
		fenced = db.Status.Topology.Fenced
	}
	out := slices.DeleteFunc(slices.Clone(placed), func(m string) bool { return m == self || slices.Contains(fenced, m) })
	slices.Sort(out)
	return slices.Compact(out)
}

// RoleKey fingerprints decideRole for the plan: a member whose decision
// changed is woken (so is one whose synchronous standbys changed: the
// durability, or the members fenced).
func RoleKey(db *fleetv1alpha1.Database, m string) string {
	r, ok := DecideRole(db, m)
	if !ok {
		if db.TopologyMode() == fleetv1alpha1.TopologyPrimaryStandby {
			return "undecided"
		}
		return ""
	}
	key := r.Primary + "/" + r.PromotionToken + "/" + string(db.TopologyDurability()) + ":" + strings.Join(db.Status.Topology.Fenced, ",")
	// The old primary and the target are woken when a switchover starts, so
	// that CheckTarget decides on what they report after it started.
	if sw := db.Status.Topology.Switchover; sw != nil && sw.Step == fleetv1alpha1.StepCheckTarget && (m == sw.From || m == sw.To) {
		key += "/check:" + sw.Started.UTC().Format(time.RFC3339)
	}
	return key
}
