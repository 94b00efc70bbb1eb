package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	. "github.com/onsi/gomega" //nolint:staticcheck // ST1001: gomega's DSL reads as assertions, as in Cluster API's test/framework
	coordinationv1 "k8s.io/api/coordination/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleetv1alpha1 "github.com/fleetdb/fleetdb/apis/v1alpha1"
	"github.com/fleetdb/fleetdb/hub"
	"github.com/fleetdb/fleetdb/test/fleet"
	"github.com/fleetdb/fleetdb/test/localfleet"
)

// AuditFleetOptions set a local fleet up so that every API server logs its
// writes (metadata only) the way the suite reads them (FailoverSpec,
// ShardingSpec): extra environment and files for localfleet.Options.
func AuditFleetOptions(fleetDir string) (env []string, files map[string][]byte) {
	return []string{"FLEET_AUDIT_POLICY=" + filepath.Join(fleetDir, auditPolicyFile)},
		map[string][]byte{auditPolicyFile: []byte(auditPolicy)}
}

// ShardingInput is the input of ShardingSpec.
type ShardingInput struct {
	T     testing.TB
	Fleet *Fleet
	// Hubs are hub replicas run with --sharding (three).
	Hubs *localfleet.HubSet
	// AuditLog is where a cluster's API server logs its writes.
	AuditLog func(cluster string) string
	// Databases created, each placed on every member; default 2.
	Databases int
	// HubNamespace holds the Leases and placements; default fleetdb-system.
	HubNamespace string
}

// ShardingSpec runs on hub replicas with --sharding and proves:
//   - the members are split over the replicas: every member's fence Lease is
//     held by a live replica, and more than one replica holds fences;
//   - Databases placed on every member become Ready, and before the kill
//     every member is written by its fence holder only; at rest (a quiet
//     window once Ready) no replica writes anything, to a member or to the
//     hub, but its own liveness Leases, at most one peer Lease renewal per
//     ShardPeerRenew (fences are not renewed);
//   - a replica that owns members is killed with SIGKILL and a Database
//     changed: every one of its members' fences is taken by a surviving
//     replica, which writes the change to the member, and not before it
//     holds the fence (the takeover times are logged, not asserted);
//   - from the audit logs, no member object is written by two replicas at
//     overlapping times, and the killed one writes nothing after the kill;
//   - no Database's status leaves Ready for a wrong phase (Failed,
//     Degraded, Pending) from the first Ready to the end, and every member
//     holds exactly each Database's objects.
//
// It then goes on with the survivors (handover.join, handover.killLeader):
// a fourth replica joins and takes the members rendezvous hashing gives it,
// then the elected leader (the Database status writer) is killed with
// SIGKILL while a Database is created and another one changed.
func ShardingSpec(ctx context.Context, in ShardingInput) {
	t, f := in.T, in.Fleet
	g := NewWithT(t)
	ns := in.HubNamespace
	if ns == "" {
		ns = "fleetdb-system"
	}
	n := in.Databases
	if n == 0 {
		n = 2
	}
	members := f.MemberNames()
	owners := waitForShards(ctx, t, f, in.Hubs, ns, members)
	t.Logf("members by owner: %v", byOwner(owners))
	leader := replicaName(WaitForLeader(ctx, t, f, types.NamespacedName{Namespace: ns, Name: hub.LeaderElectionID}, ""))
	t.Logf("elected leader (the Database status writer): %s", leader)

	tenant := CreateNamespace(ctx, CreateNamespaceInput{T: t, Fleet: f, Prefix: "e2e-sharding"})
	DumpOnFailure(t, f, tenant)
	flaps := watchPhases(ctx, t, f, tenant)
	dbs := make([]*fleetv1alpha1.Database, n)
	for i := range n {
		db := NewDatabase(tenant, fmt.Sprintf("db-%02d", i), 1, members)
		db.Spec.Backend = fleetv1alpha1.BackendStatefulSet
		if i == n-1 {
			// The Database changed right after the kill below rolls out to
			// every member at once: with maxUnavailable 1 its change would
			// reach the members one after the other in name order, each
			// after the one before is Ready, and the takeover → first write
			// figure of a member late in that order would be the rollout's
			// pace, not the takeover's.
			db.Spec.Rollout.MaxUnavailable = int32(len(members))
		}
		g.Expect(f.Hub.Client.Create(ctx, db)).To(Succeed())
		dbs[i] = db
	}
	for _, db := range dbs {
		WaitForDatabaseReady(ctx, WaitForDatabaseReadyInput{T: t, Fleet: f, Key: client.ObjectKeyFromObject(db), Members: members, Replicas: 1})
	}
	expectShardedBackupRefused(ctx, t, f, dbs[0])
	// At rest: in a quiet window, no placement written, and no write by a
	// replica at all (hub or member) but its own peer Lease renewals and
	// the leader's Lease renewals.
	time.Sleep(3 * time.Second)
	quiet := time.Now()
	time.Sleep(15 * time.Second)
	expectNoPlacementWrites(t, in.AuditLog, quiet, time.Now())
	expectSilentAtRest(t, in.AuditLog, members, quiet, time.Now())
	g.Expect(ownersNow(ctx, g, f, ns, members)).To(Equal(owners), "the members' owners changed without a replica joining or leaving")

	victim := pickVictim(owners, leader)
	var lost []string
	for m, o := range owners {
		if o == victim {
			lost = append(lost, m)
		}
	}
	slices.Sort(lost)
	killed := time.Now()
	g.Expect(in.Hubs.Replica(victim).Kill()).To(Succeed())
	t.Logf("killed %s (leader: %t) with SIGKILL; its members: %v", victim, victim == leader, lost)
	// A change while the victim's members have no owner: their new owners
	// have a member write to make once they hold the fences (the takeover
	// → first member write figure).
	h := &handover{in: in, ns: ns, members: members, tenant: tenant, dbs: dbs,
		killed: map[string]time.Time{WaitForStandbyID(ctx, t, in.Hubs.Replica(victim)): killed}}
	pending := client.ObjectKeyFromObject(dbs[n-1])
	pendingMemory := resource.MustParse("40Mi")
	pendingGen := setMemoryRequest(ctx, g, f, pending, pendingMemory)

	acquired := waitForTakeover(ctx, t, f, ns, lost, victim, in.Hubs.Names())
	for _, db := range dbs {
		WaitForDatabaseReady(ctx, WaitForDatabaseReadyInput{T: t, Fleet: f, Key: client.ObjectKeyFromObject(db), Members: members, Replicas: 1})
	}
	h.expectConverged(ctx, pending, pendingGen, pendingMemory)
	expectExactMemberObjects(ctx, t, f, tenant, dbs)
	firstWrites := expectShardWriters(t, f, in.AuditLog, owners, killed)
	expectNoWriteBeforeFence(t, in.AuditLog, lost, killed, ownersNow(ctx, g, f, ns, members), acquired)
	g.Expect(flaps.bad()).To(BeEmpty(), "a Database's status left Ready for a wrong phase")

	var report []string
	for _, m := range lost {
		fw := "none"
		if w, ok := firstWrites[m]; ok {
			fw = fmt.Sprintf("%s (%s after the fence)", w.Sub(killed).Round(10*time.Millisecond), w.Sub(acquired[m]).Round(10*time.Millisecond))
		}
		report = append(report, fmt.Sprintf("%s: fence %s, first write %s", m, acquired[m].Sub(killed).Round(10*time.Millisecond), fw))
	}
	msg := fmt.Sprintf("e2e: sharding: %d members, %d replicas, SIGKILL of %s (leader %t) → takeover of its %d members: %s",
		len(members), len(in.Hubs.Names()), victim, victim == leader, len(lost), strings.Join(report, "; "))
	t.Log(msg)
	fmt.Fprintln(os.Stderr, msg)

	// A replica joins, then the leader is killed; the phase watch goes on.
	h.join(ctx)
	h.killLeader(ctx)
	flaps.stop()
	g.Expect(flaps.bad()).To(BeEmpty(), "a Database's status left Ready for a wrong phase")
}

// waitForShards waits until every member's fence is held by a replica of
// hubs, more than one replica holds fences (or rendezvous hashing gives them
// all to one), and the holders stay the same for a while (the replicas that
// started last took their share); it returns member → replica name.
func waitForShards(ctx context.Context, t testing.TB, f *Fleet, hubs *localfleet.HubSet, ns string, members []string) map[string]string {
	t.Helper()
	var owners map[string]string
	stableSince := time.Now()
	NewWithT(t).Eventually(func(g Gomega) {
		now := ownersNow(ctx, g, f, ns, members)
		for m, o := range now {
			g.Expect(hubs.Names()).To(ContainElement(o), "member %s: fence holder %q is none of the replicas", m, o)
		}
		// More than one replica holds fences, unless rendezvous hashing over
		// every replica's live peer Lease gives all the members to one (with
		// random replica identities, one time in nine for three of three).
		if len(byOwner(now)) <= 1 {
			peers := livePeers(ctx, g, f, ns)
			g.Expect(peers).To(HaveLen(len(hubs.Names())), "one replica holds every fence (%v) and not every replica's peer Lease is live", now)
			g.Expect(fenceIDs(ctx, g, f, ns, members)).To(Equal(hrwOwners(members, peers)),
				"one replica holds every fence (%v), which rendezvous hashing over the live peers does not give", now)
		}
		if !mapsEqual(now, owners) {
			owners, stableSince = now, time.Now()
		}
		g.Expect(time.Since(stableSince)).To(BeNumerically(">", 3*hub.ShardProbe), "the owners are still moving")
	}).WithContext(ctx).WithTimeout(3 * time.Minute).WithPolling(500 * time.Millisecond).Should(Succeed())
	return owners
}

// ownersNow reads every member's fence Lease: member → replica name ("" when
// free or its holder is not live).
func ownersNow(ctx context.Context, g Gomega, f *Fleet, ns string, members []string) map[string]string {
	out := readFences(ctx, g, f, ns, members)
	for m, id := range out {
		out[m] = shortID(id)
	}
	return out
}

// readFences reads every member's fence Lease: member → its holder's peer
// ID while that holder's own peer Lease is live (a fence is valid as long
// as its holder is: docs/sharding.md), "" otherwise.
func readFences(ctx context.Context, g Gomega, f *Fleet, ns string, members []string) map[string]string {
	live := livePeers(ctx, g, f, ns)
	out := map[string]string{}
	for _, m := range members {
		l := &coordinationv1.Lease{}
		g.Expect(f.Hub.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: hub.ShardFencePrefix + "-" + m}, l)).To(Succeed(), "fence of %s", m)
		if id := ptr.Deref(l.Spec.HolderIdentity, ""); slices.Contains(live, id) {
			out[m] = id
		} else {
			out[m] = ""
		}
	}
	return out
}

// expectSilentAtRest reads every audit log of the fleet: in [from, to) no
// replica wrote anything to a member, nor to the hub but Leases of its own
// liveness (its peer Lease, the elected leader's Lease), and no replica
// renewed its peer Lease more than once per ShardPeerRenew. It logs what
// it counted.
func expectSilentAtRest(t testing.TB, auditLog func(string) string, members []string, from, to time.Time) {
	t.Helper()
	g := NewWithT(t)
	var bad []string
	peerRenewals := map[string]int{}
	leaderRenewals := 0
	for _, c := range append([]string{"hub"}, members...) {
		writes, err := readAuditWrites(auditLog(c))
		g.Expect(err).NotTo(HaveOccurred())
		for _, w := range writes {
			if w.Replica == "" || w.Received.Before(from) || !w.Received.Before(to) {
				continue
			}
			_, name, _ := strings.Cut(w.Object, "/")
			switch {
			case c == "hub" && w.Resource == "leases" && w.Verb == "update" && strings.HasPrefix(name, hub.ShardPeerPrefix+"-"):
				peerRenewals[w.Replica]++
				continue
			case c == "hub" && w.Resource == "leases" && w.Verb == "update" && name == hub.LeaderElectionID:
				leaderRenewals++
				continue
			}
			bad = append(bad, fmt.Sprintf("%s: %s %s by %s at %s", c, w.Verb, w.Object, w.Replica, w.Received.Format(time.RFC3339Nano)))
		}
	}
	window := to.Sub(from)
	t.Logf("at rest for %s: %d other writes; peer Lease renewals by replica: %v; leader Lease renewals: %d", window.Round(time.Second), len(bad), peerRenewals, leaderRenewals)
	g.Expect(bad).To(BeEmpty(), "written at rest")
	for id, n := range peerRenewals {
		g.Expect(n).To(BeNumerically("<=", int(window/hub.ShardPeerRenew)+1), "%s renewed its peer Lease more than once per %s", id, hub.ShardPeerRenew)
	}
}

func byOwner(owners map[string]string) map[string][]string {
	out := map[string][]string{}
	for m, o := range owners {
		out[o] = append(out[o], m)
	}
	for o := range out {
		slices.Sort(out[o])
	}
	return out
}

func mapsEqual(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

// pickVictim is the replica to kill: the one owning the most members,
// preferring one that is not the leader (its members' takeover is then
// measured alone, the Database status writer staying where it is).
func pickVictim(owners map[string]string, leader string) string {
	counts := byOwner(owners)
	best := ""
	for o, ms := range counts {
		switch {
		case best == "":
			best = o
		case (best == leader) != (o == leader):
			if best == leader {
				best = o
			}
		case len(ms) > len(counts[best]) || (len(ms) == len(counts[best]) && o < best):
			best = o
		}
	}
	return best
}

// waitForTakeover waits until every lost member's fence is held by another
// live replica and returns, per member, when the new holder acquired it.
func waitForTakeover(ctx context.Context, t testing.TB, f *Fleet, ns string, lost []string, victim string, replicas []string) map[string]time.Time {
	t.Helper()
	out := map[string]time.Time{}
	NewWithT(t).Eventually(func(g Gomega) {
		for _, m := range lost {
			l := &coordinationv1.Lease{}
			g.Expect(f.Hub.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: hub.ShardFencePrefix + "-" + m}, l)).To(Succeed())
			o := shortID(ptr.Deref(l.Spec.HolderIdentity, ""))
			if !slices.Contains(livePeers(ctx, g, f, ns), ptr.Deref(l.Spec.HolderIdentity, "")) {
				o = ""
			}
			g.Expect(o).NotTo(BeEmpty(), "%s: no live fence holder yet", m)
			g.Expect(o).NotTo(Equal(victim), "%s: still held by the killed replica", m)
			g.Expect(replicas).To(ContainElement(o))
			g.Expect(l.Spec.AcquireTime).NotTo(BeNil())
			out[m] = l.Spec.AcquireTime.Time
		}
	}).WithContext(ctx).WithTimeout(2 * time.Minute).WithPolling(100 * time.Millisecond).Should(Succeed())
	return out
}

// expectNoPlacementWrites: the hub's audit log shows no placement written in [from, to).
func expectNoPlacementWrites(t testing.TB, auditLog func(string) string, from, to time.Time) {
	t.Helper()
	writes, err := readAuditWrites(auditLog("hub"))
	NewWithT(t).Expect(err).NotTo(HaveOccurred())
	var in []string
	for _, w := range writes {
		if w.Resource == "databaseplacements" && !w.Received.Before(from) && w.Received.Before(to) {
			in = append(in, fmt.Sprintf("%s %s by %s at %s", w.Verb, w.Object, w.Replica, w.Received.Format(time.RFC3339Nano)))
		}
	}
	NewWithT(t).Expect(in).To(BeEmpty(), "placements written at rest")
}

// setMemoryRequest changes a Database's memory request and returns its new generation.
func setMemoryRequest(ctx context.Context, g Gomega, f *Fleet, key types.NamespacedName, memory resource.Quantity) int64 {
	var gen int64
	g.Expect(retry.RetryOnConflict(retry.DefaultRetry, func() error {
		db := &fleetv1alpha1.Database{}
		if err := f.Hub.Client.Get(ctx, key, db); err != nil {
			return err
		}
		db.Spec.Resources.Requests.Memory = ptr.To(memory)
		if err := f.Hub.Client.Update(ctx, db); err != nil {
			return err
		}
		gen = db.Generation
		return nil
	})).To(Succeed())
	return gen
}

// expectNoWriteBeforeFence reads the audit logs of the members taken over
// after killed: each is written only by its new owner (owners, replica
// names), and not before that owner took its fence (acquired): a standby
// makes no member write before it holds the fence.
func expectNoWriteBeforeFence(t testing.TB, auditLog func(string) string, lost []string, killed time.Time, owners map[string]string, acquired map[string]time.Time) {
	t.Helper()
	g := NewWithT(t)
	for _, m := range lost {
		writes, err := readAuditWrites(auditLog(m))
		g.Expect(err).NotTo(HaveOccurred())
		var bad []string
		for _, w := range writes {
			if !countedWrite(w) || w.Replica == "" || w.Received.Before(killed) {
				continue
			}
			if r := replicaName(w.Replica); r != owners[m] || w.Received.Before(acquired[m]) {
				bad = append(bad, fmt.Sprintf("%s %s by %s at %s (fence taken by %s at %s)", w.Verb, w.Object, r,
					w.Received.Format(time.RFC3339Nano), owners[m], acquired[m].Format(time.RFC3339Nano)))
			}
		}
		g.Expect(bad).To(BeEmpty(), "%s: written after the kill by another replica than its new owner, or before it held the fence", m)
	}
}

// expectShardWriters reads every member's audit log and proves: before the
// kill, a member is written only by its fence holder; the killed replica
// writes nothing after the kill; no object is written by two replicas at
// overlapping times. It returns each member's first write after the kill.
func expectShardWriters(t testing.TB, f *Fleet, auditLog func(string) string, owners map[string]string, killed time.Time) map[string]time.Time {
	t.Helper()
	g := NewWithT(t)
	first := map[string]time.Time{}
	for _, m := range f.MemberNames() {
		writes, err := readAuditWrites(auditLog(m))
		g.Expect(err).NotTo(HaveOccurred())
		spans := writeSpans{} // object → replica → span
		var foreign []string
		for _, w := range writes {
			if !countedWrite(w) || w.Replica == "" {
				continue
			}
			r := replicaName(w.Replica)
			if w.Received.Before(killed) && r != owners[m] {
				foreign = append(foreign, fmt.Sprintf("%s %s by %s at %s", w.Verb, w.Object, r, w.Received.Format(time.RFC3339Nano)))
			}
			if !w.Received.Before(killed) {
				if _, ok := first[m]; !ok {
					first[m] = w.Received
				}
			}
			spans.add(w.Object, r, w.Received)
		}
		g.Expect(foreign).To(BeEmpty(), "%s: written before the kill by a replica other than its owner %s", m, owners[m])
		spans.expectNoOverlap(g, m)
	}
	return first
}

// phaseWatch records every Database's phase transitions in a namespace.
type phaseWatch struct {
	mu   sync.Mutex
	last map[string]fleetv1alpha1.Phase
	// readyGen is the generation each Database was last Ready on (its
	// status's observedGeneration).
	readyGen map[string]int64
	wrong    []string
	cancel   context.CancelFunc
	done     chan struct{}
}

// watchPhases watches the Databases of ns from now on: a Database that was
// Ready and then shows Failed, Degraded or Pending, or leaves Ready without a
// change of its spec, is a flap (see phaseWatch.see).
func watchPhases(ctx context.Context, t testing.TB, f *Fleet, ns string) *phaseWatch {
	t.Helper()
	cfg := rest.CopyConfig(f.Hub.Config)
	cfg.Timeout = 0 // a client timeout would end the watch
	wc, err := client.NewWithWatch(cfg, client.Options{Scheme: fleet.Scheme})
	NewWithT(t).Expect(err).NotTo(HaveOccurred())
	wctx, cancel := context.WithCancel(ctx)
	pw := &phaseWatch{last: map[string]fleetv1alpha1.Phase{}, readyGen: map[string]int64{}, cancel: cancel, done: make(chan struct{})}
	w, err := wc.Watch(wctx, &fleetv1alpha1.DatabaseList{}, client.InNamespace(ns))
	NewWithT(t).Expect(err).NotTo(HaveOccurred())
	go func() {
		defer close(pw.done)
		defer w.Stop()
		for ev := range w.ResultChan() {
			db, ok := ev.Object.(*fleetv1alpha1.Database)
			if !ok || ev.Type == watch.Deleted {
				continue
			}
			pw.see(db)
		}
	}()
	return pw
}

// see records one Database as watched: once it was Ready, Failed, Degraded
// and Pending are wrong; any other phase than Ready is wrong too unless its
// spec changed since (a rollout is Provisioning until it is done).
func (p *phaseWatch) see(db *fleetv1alpha1.Database) {
	p.mu.Lock()
	defer p.mu.Unlock()
	prev, now := p.last[db.Name], db.Status.Phase
	wrongPhase := now == fleetv1alpha1.PhaseFailed || now == fleetv1alpha1.PhaseDegraded || now == fleetv1alpha1.PhasePending
	switch {
	case prev == fleetv1alpha1.PhaseReady && wrongPhase:
		p.wrong = append(p.wrong, fmt.Sprintf("%s: %s → %s at %s (%s)", db.Name, prev, now, time.Now().Format(time.RFC3339Nano),
			Condition(db.Status.Conditions, fleetv1alpha1.ConditionDegraded).Message))
	case prev == fleetv1alpha1.PhaseReady && now != prev && now != "" && db.Generation == p.readyGen[db.Name]:
		p.wrong = append(p.wrong, fmt.Sprintf("%s: left Ready for %s on the same generation %d at %s", db.Name, now, db.Generation,
			time.Now().Format(time.RFC3339Nano)))
	}
	if now == fleetv1alpha1.PhaseReady {
		// The generation the status is about: a spec change alone is seen
		// with the previous status (Ready on the previous generation).
		p.readyGen[db.Name] = db.Status.ObservedGeneration
	}
	if now != "" {
		p.last[db.Name] = now
	}
}

func (p *phaseWatch) stop() {
	p.cancel()
	<-p.done
}

func (p *phaseWatch) bad() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.wrong)
}

// ForbiddenLines are the lines of the replicas' logs in which the hub API
// server refused the hub's own identity (deploy/rbac lacks a permission).
func ForbiddenLines(hubs *localfleet.HubSet) []string { return forbiddenLines(hubs) }

// writeSpans are, per member object, each writer's first and last write.
type writeSpans map[string]map[string]*span

type span struct{ first, last time.Time }

// add records a write of obj by writer at at.
func (ws writeSpans) add(obj, writer string, at time.Time) {
	if ws[obj] == nil {
		ws[obj] = map[string]*span{}
	}
	s := ws[obj][writer]
	if s == nil {
		s = &span{first: at}
		ws[obj][writer] = s
	}
	s.last = at
}

// expectNoOverlap fails when an object of cluster was written by two
// writers at overlapping times.
func (ws writeSpans) expectNoOverlap(g Gomega, cluster string) {
	for obj, by := range ws {
		var ids []string
		for id := range by {
			ids = append(ids, id)
		}
		slices.Sort(ids)
		for i := range ids {
			for j := i + 1; j < len(ids); j++ {
				a, b := by[ids[i]], by[ids[j]]
				overlap := !a.last.Before(b.first) && !b.last.Before(a.first)
				g.Expect(overlap).To(BeFalse(), "%s: %s written by %s (%s..%s) and %s (%s..%s)", cluster, obj,
					ids[i], a.first.Format(time.RFC3339Nano), a.last.Format(time.RFC3339Nano),
					ids[j], b.first.Format(time.RFC3339Nano), b.last.Format(time.RFC3339Nano))
			}
		}
	}
}
