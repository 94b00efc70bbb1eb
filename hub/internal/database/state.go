package database

import (
	"bytes"
	"maps"
	"slices"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/cache"

	fleetv1alpha1 "github.com/fleetdb/fleetdb/apis/v1alpha1"
	"github.com/fleetdb/fleetdb/hub/internal/dbstatus"
	"github.com/fleetdb/fleetdb/internal/statusmsg"
	"github.com/fleetdb/fleetdb/member"
)

// memberRole says what a member sync does for one Database in one member.
type memberRole int

const (
	// roleNone: the member has nothing to do with the Database.
	roleNone memberRole = iota
	// roleApply: render and apply the current generation, then observe.
	roleApply
	// roleHold: the rollout has not reached this member yet; observe only.
	roleHold
	// roleTeardown: remove the Database's objects per its deletion policy.
	roleTeardown
)

// plan is what the Database controller decided for one Database; member
// syncs act on it. It is replaced as a whole, never mutated after publishing.
type plan struct {
	uid        types.UID
	generation int64
	policy     fleetv1alpha1.DeletionPolicy
	// allowed are targets that may run the current generation.
	allowed map[string]bool
	// targets are the placed members.
	targets map[string]bool
	// teardown are members to remove the Database from (dropped from
	// placement, or all of them when the Database is deleted).
	teardown map[string]bool
	// traceparent of the change that produced this plan.
	traceparent string
	// finalBackup is the final backup the teardowns take first (nil: none).
	finalBackup *finalBackupPlan
	// credentials of the Database (from its hub Secret), so that member syncs
	// need not read a Secret the hub cache may not have seen yet; nil in a
	// deletion plan.
	credentials map[string][]byte
	// topology is each target's PrimaryStandby wiring (replica, peers,
	// certificates); nil for an Independent Database.
	topology map[string]*member.Topology
	// instanceTLS are the certificates of a postgres Database's instances on
	// the StatefulSet backend, the same for every member; nil otherwise.
	instanceTLS *member.InstanceCertificates
	// instanceCertificate is, in a plan read from a sharded hub's placement,
	// the fingerprint of the instance certificate the leader's plan has
	// (the owner reads it from the hub Secret: remoteInstanceTLS).
	instanceCertificate string
	// nodeMaintenance are the members whose MemberCluster has
	// spec.nodeMaintenance.inProgress: their CloudNativePG Clusters are
	// rendered with a maintenance window (member.Params.NodeMaintenance).
	nodeMaintenance map[string]bool
	// rotationHeld are the standby members of a PrimaryStandby Database
	// whose switch to a rotation's pending password waits for the primary
	// member's (rotationHeldMembers).
	rotationHeld map[string]bool
	// absentSecrets are the members where the credential recovery of this
	// reconcile found no credentials Secret (nil: none known); the first
	// member sync of each takes that answer instead of reading again.
	absentSecrets *absentSecrets
	// roles fingerprint, per member, what its CloudNativePG Cluster is
	// rendered with in a PrimaryStandby topology (roleKey): a member whose
	// entry changed is woken (topology carries what it renders; both derive
	// from the Database's stored status, see decideRole).
	roles map[string]string
	// adopt is the UID the Database's AnnotationAdoptCredentials names: its
	// change wakes every member (one refused for retained claims may go on).
	adopt types.UID
}

// absentSecretsFresh bounds how old the credential recovery's NotFound may
// be for a member sync to take it instead of reading the Secret itself.
const absentSecretsFresh = 5 * time.Second

// absentSecrets are the members where the credential recovery read the
// Database's credentials Secret from the member's API server and it was
// not there, and when the reads started. A new Database's first member
// sync takes that answer (once per member, within absentSecretsFresh)
// instead of reading the same Secret again before its apply: one member
// round trip less before the first write. The read it replaces was a read
// before a write anyway; the answer is a few tens of milliseconds older.
// It is the one part of a plan that changes after publishing (take), under
// its own lock.
type absentSecrets struct {
	mu      sync.Mutex
	at      time.Time
	members map[string]bool
}

func newAbsentSecrets(at time.Time, members []string) *absentSecrets {
	if len(members) == 0 {
		return nil
	}
	a := &absentSecrets{at: at, members: map[string]bool{}}
	for _, m := range members {
		a.members[m] = true
	}
	return a
}

// take reports whether the Secret was found absent in cluster, at most
// absentSecretsFresh before now, and forgets it: a later sync reads again.
func (a *absentSecrets) take(cluster string, now time.Time) bool {
	if a == nil {
		return false
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	absent := a.members[cluster]
	delete(a.members, cluster)
	return absent && now.Sub(a.at) <= absentSecretsFresh
}

func (p *plan) role(cluster string) memberRole {
	switch {
	case p.teardown[cluster]:
		return roleTeardown
	case p.allowed[cluster]:
		return roleApply
	case p.targets[cluster]:
		return roleHold
	}
	return roleNone
}

// changedMembers are the members whose work differs between prev and p:
// every member of p for another Database, generation, deletion policy or
// credentials (a rotation), else those whose role changed.
func (p *plan) changedMembers(prev *plan) []string {
	members := map[string]bool{}
	for _, m := range []map[string]bool{p.targets, p.teardown} {
		for name := range m {
			members[name] = true
		}
	}
	if prev == nil || prev.uid != p.uid || prev.generation != p.generation || prev.policy != p.policy || prev.adopt != p.adopt ||
		!maps.EqualFunc(prev.credentials, p.credentials, bytes.Equal) || !sameInstanceTLS(prev.instanceTLS, p.instanceTLS) {
		return sortedKeys(members)
	}
	var out []string
	for _, name := range sortedKeys(members) {
		if p.role(name) != prev.role(name) || p.roles[name] != prev.roles[name] || p.nodeMaintenance[name] != prev.nodeMaintenance[name] ||
			p.rotationHeld[name] != prev.rotationHeld[name] ||
			!sameTopology(p.topology[name], prev.topology[name]) {
			out = append(out, name)
		}
	}
	return out
}

// sameInstanceTLS compares two plans' instance certificates.
func sameInstanceTLS(a, b *member.InstanceCertificates) bool {
	if a == nil || b == nil {
		return a == b
	}
	return bytes.Equal(a.CACert, b.CACert) && bytes.Equal(a.ServerCert, b.ServerCert) && bytes.Equal(a.ServerKey, b.ServerKey)
}

// sameTopology compares two members' wiring, certificates included.
func sameTopology(a, b *member.Topology) bool {
	if a == nil || b == nil {
		return a == b
	}
	ca, cb := a.Certificates, b.Certificates
	return a.Self == b.Self && a.Primary == b.Primary && a.PromotionToken == b.PromotionToken &&
		slices.Equal(a.Peers, b.Peers) &&
		bytes.Equal(ca.CACert, cb.CACert) && bytes.Equal(ca.ServerCert, cb.ServerCert) && bytes.Equal(ca.ServerKey, cb.ServerKey) &&
		bytes.Equal(ca.ReplicationCert, cb.ReplicationCert) && bytes.Equal(ca.ReplicationKey, cb.ReplicationKey)
}

// memberResult is what the last member sync observed for one Database in
// one member (dbstatus.Result: the status is computed from it).
type memberResult = dbstatus.Result

// rotationReport and restoreReport are what a member sync found about a
// credential rotation and spec.restoreFrom in its member.
type (
	rotationReport = dbstatus.RotationReport
	restoreReport  = dbstatus.RestoreReport
)

// state is the in-memory meeting point of the two controllers.
type state struct {
	mu      sync.RWMutex
	plans   map[types.NamespacedName]*plan
	results map[types.NamespacedName]map[string]*memberResult
	// released are Databases (by UID) whose finalizer the hub removed
	// recently: a reconcile on a cache that still shows them does nothing.
	released *cache.LRUExpireCache
	// statusHeld: per Database, when a routine status was first held back
	// since its last status write (see holdStatus).
	statusHeld map[types.NamespacedName]time.Time
}

const (
	// releasedMemory is how long a released Database is remembered.
	releasedMemory = time.Minute
	// releasedEntries bounds the released Databases remembered.
	releasedEntries = 4096
)

func newState() *state {
	return &state{
		plans:      map[types.NamespacedName]*plan{},
		results:    map[types.NamespacedName]map[string]*memberResult{},
		released:   cache.NewLRUExpireCache(releasedEntries),
		statusHeld: map[types.NamespacedName]time.Time{},
	}
}

// markFinalized remembers that the finalizer of the Database uid was removed.
func (s *state) markFinalized(uid types.UID) {
	s.released.Add(uid, struct{}{}, releasedMemory)
}

// finalized reports whether the finalizer of the Database uid was removed recently.
func (s *state) finalized(uid types.UID) bool {
	_, ok := s.released.Get(uid)
	return ok
}

func (s *state) plan(key types.NamespacedName) *plan {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.plans[key]
}

func (s *state) setPlan(key types.NamespacedName, p *plan) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.plans[key] = p
}

// resultChange is what a new member result changed.
type resultChange int

const (
	// resultSame: nothing but timestamps.
	resultSame resultChange = iota
	// resultProgress: details (ready replicas, message, endpoint), or a step
	// on the way to Ready (Pending, Provisioning).
	resultProgress
	// resultPhase: the member turned Ready, failed (Degraded, Conflict,
	// Unreachable) or is being or was torn down: what users and the rollout wait for.
	resultPhase
)

// record stores a member result and reports what it changed.
func (s *state) record(key types.NamespacedName, cluster string, r *memberResult) resultChange {
	s.mu.Lock()
	defer s.mu.Unlock()
	m := s.results[key]
	if m == nil {
		m = map[string]*memberResult{}
		s.results[key] = m
	}
	prev := m[cluster]
	redactResult(r)
	m[cluster] = r
	switch {
	case r.SameAs(prev):
		return resultSame
	case prev != nil && prev.Status.Phase == r.Status.Phase && prev.TornDown == r.TornDown && prev.Unreachable == r.Unreachable &&
		dbstatus.BackupPhase(prev.FinalBackup) == dbstatus.BackupPhase(r.FinalBackup):
		return resultProgress
	case r.Status.Phase == fleetv1alpha1.ClusterPhasePending || r.Status.Phase == fleetv1alpha1.ClusterPhaseProvisioning:
		return resultProgress
	}
	return resultPhase
}

// redactResult removes member addresses from every message of a member
// result. Every result reaches the Database's status (which its tenants read)
// through record, so this is the one place that keeps a member's API server
// address out of it, whichever path wrote the message (a member error is
// often a URL of the member's API server).
func redactResult(r *memberResult) {
	r.Status.Message = statusmsg.RedactAddresses(r.Status.Message)
	r.Rotation.Waiting = statusmsg.RedactAddresses(r.Rotation.Waiting)
	r.Restore.Message = statusmsg.RedactAddresses(r.Restore.Message)
	if r.FinalBackup != nil && r.FinalBackup.Message != "" {
		fb := *r.FinalBackup
		fb.Message = statusmsg.RedactAddresses(fb.Message)
		r.FinalBackup = &fb
	}
}

// resultsFor returns a copy of the results of a Database.
func (s *state) resultsFor(key types.NamespacedName) map[string]*memberResult {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return maps.Clone(s.results[key])
}

// dropResult forgets one member's result (after its teardown was accounted for).
func (s *state) dropResult(key types.NamespacedName, cluster string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.results[key], cluster)
}

// forget drops everything about a Database that is gone.
func (s *state) forget(key types.NamespacedName) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.plans, key)
	delete(s.results, key)
	delete(s.statusHeld, key)
}

// databasesOn lists the Databases whose plan involves the cluster.
func (s *state) databasesOn(cluster string) []types.NamespacedName {
	s.mu.RLock()
	defer s.mu.RUnlock()
	var out []types.NamespacedName
	for key, p := range s.plans {
		if p.targets[cluster] || p.teardown[cluster] {
			out = append(out, key)
		}
	}
	return out
}

// traceparentOrEmpty is the plan's traceparent; "" for no plan.
func (p *plan) traceparentOrEmpty() string {
	if p == nil {
		return ""
	}
	return p.traceparent
}

// PlannedOn reports the uid of the Database key's plan and whether it
// places the Database on cluster; ok is false without a plan (the sweep's
// view of the plans).
func (s *state) PlannedOn(key types.NamespacedName, cluster string) (uid types.UID, placed, ok bool) {
	p := s.plan(key)
	if p == nil {
		return "", false, false
	}
	return p.uid, p.role(cluster) != roleNone, true
}
