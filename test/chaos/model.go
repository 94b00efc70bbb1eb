package chaos

import (
	"slices"

	"k8s.io/apimachinery/pkg/types"

	fleetv1alpha1 "github.com/fleetdb/fleetdb/apis/v1alpha1"
)

// dbInfo is what the run asked of one Database.
type dbInfo struct {
	name      string
	backend   fleetv1alpha1.Backend
	placement []string
	policy    fleetv1alpha1.DeletionPolicy
	onRemoval fleetv1alpha1.PlacementRemovalPolicy
	final     fleetv1alpha1.FinalBackupPolicy
	// retainedOn are members the Database left under onPlacementRemoval
	// Retain: its StatefulSet-backend Secret stays there unlabelled, which
	// fleetdb never overwrites (SPEC 4.6), so the run does not place it
	// there again (a Conflict by design, not a finding).
	retainedOn map[string]bool
}

// objRef is a member object the run saw.
type objRef struct {
	Member, Kind, Name string
	UID                types.UID
}

// keptObj is an object a policy keeps: it must stay, with the same UID.
type keptObj struct {
	objRef
	Why string
}

// model is the run's record of what the fleet must be.
type model struct {
	live map[string]*dbInfo
	gone map[string]*dbInfo
	seq  int
	// snap is, per Database and member, the objects seen at the last
	// converged check: what a deletion or a placement removal acts on.
	snap map[string]map[string][]objRef
	// kept must stay; mustGo must be gone once the fleet converged.
	kept   []keptObj
	mustGo []objRef
	// backupClaims are members where a final backup volume claim must
	// appear (a Required final backup) and then stay.
	backupClaims []objRef
	// passwords are the passwords first seen, by member Secret UID; hub
	// ones by Database name.
	passwords    map[types.UID]string
	hubPasswords map[string]string
}

func newModel() *model {
	return &model{
		live: map[string]*dbInfo{}, gone: map[string]*dbInfo{},
		snap: map[string]map[string][]objRef{}, passwords: map[types.UID]string{}, hubPasswords: map[string]string{},
	}
}

// release records what a member keeps and what must go when db's objects
// there are torn down under policy (a deletion, or a placement removal
// under onPlacementRemoval, which maps onto the same policies).
func (m *model) release(db *dbInfo, member string, policy fleetv1alpha1.DeletionPolicy, why string) {
	for _, o := range m.snap[db.name][member] {
		keep := false
		switch policy {
		case fleetv1alpha1.DeletionPolicyOrphan:
			keep = true
		case fleetv1alpha1.DeletionPolicyRetain:
			keep = o.Kind == "PersistentVolumeClaim" || (o.Kind == "Secret" && o.Name == db.name+"-credentials")
		}
		// An object kept earlier may have been taken over again (a
		// CloudNativePG Database placed again where it left its Secret):
		// the latest policy decides.
		m.kept = slices.DeleteFunc(m.kept, func(k keptObj) bool { return k.UID == o.UID })
		if keep {
			m.kept = append(m.kept, keptObj{objRef: o, Why: why})
		} else {
			m.mustGo = append(m.mustGo, o)
		}
	}
	delete(m.snap[db.name], member)
}
