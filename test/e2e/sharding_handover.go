package e2e

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	. "github.com/onsi/gomega" //nolint:staticcheck // ST1001: gomega's DSL reads as assertions, as in Cluster API's test/framework
	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/multicluster-runtime/pkg/manager/coordinator/sharded/sharder"
	"sigs.k8s.io/multicluster-runtime/pkg/util/sanitize"

	fleetv1alpha1 "github.com/fleetdb/fleetdb/apis/v1alpha1"
	"github.com/fleetdb/fleetdb/hub"
)

// joinReplica is the replica ShardingSpec starts after the first kill.
const joinReplica = "hub-3"

// joinAttempts bounds how often the joining replica is started (each
// process has a new identity) until rendezvous hashing gives it a member;
// one that wins none is stopped cleanly (its peer Lease is deleted, nothing
// moved).
const joinAttempts = 4

// shardPeerLabel marks the replicas' peer Leases (hub/internal/sharding/peers.go).
const shardPeerLabel = "fleetdb.io/shard-peer"

// handover is the second half of ShardingSpec, on the replicas that
// survived its first kill: a replica joins (join), then the leader is
// killed (killLeader). Every identity a replica ever had is told apart (a
// name started again is a new identity).
type handover struct {
	in      ShardingInput
	ns      string
	members []string
	tenant  string
	dbs     []*fleetv1alpha1.Database
	// killed: replica identity → when it was SIGKILLed.
	killed map[string]time.Time
}

// peerID is a replica identity ("hub-0_<uuid>") as the sharded coordinator
// names it in its peer and fence Leases ("hub-0-<uuid>").
func peerID(replicaID string) string { return sanitize.DNS1123(replicaID) }

// runningPeers are the peer IDs of the replicas whose latest process runs.
func (h *handover) runningPeers(ctx context.Context) []string {
	var out []string
	for _, name := range h.in.Hubs.Names() {
		p := h.in.Hubs.Replica(name)
		if exited, _ := p.Exited(); !exited {
			out = append(out, peerID(WaitForStandbyID(ctx, h.in.T, p)))
		}
	}
	return out
}

// livePeers are the peer IDs whose peer Lease is current, as the replicas'
// registries see them.
func livePeers(ctx context.Context, g Gomega, f *Fleet, ns string) []string {
	var list coordinationv1.LeaseList
	g.Expect(f.Hub.Client.List(ctx, &list, client.InNamespace(ns), client.MatchingLabels{shardPeerLabel: "true"})).To(Succeed())
	var out []string
	for _, l := range list.Items {
		if id := liveHolder(&l); id != "" {
			out = append(out, id)
		}
	}
	slices.Sort(out)
	return out
}

// liveHolder is a Lease's holder identity while it is current, else "".
func liveHolder(l *coordinationv1.Lease) string {
	id := ptr.Deref(l.Spec.HolderIdentity, "")
	if id == "" || l.Spec.RenewTime == nil || l.Spec.LeaseDurationSeconds == nil {
		return ""
	}
	if time.Now().After(l.Spec.RenewTime.Add(time.Duration(*l.Spec.LeaseDurationSeconds) * time.Second)) {
		return ""
	}
	return id
}

// fenceIDs reads every member's fence: member → holder peer ID ("" when
// free or expired).
func fenceIDs(ctx context.Context, g Gomega, f *Fleet, ns string, members []string) map[string]string {
	return readFences(ctx, g, f, ns, members)
}

// hrwOwners is the owner rendezvous hashing picks for every member among
// peers: the choice of multicluster-runtime's sharder, which the
// coordinator of every replica makes.
func hrwOwners(members, peers []string) map[string]string {
	h := sharder.NewHRW()
	infos := make([]sharder.PeerInfo, len(peers))
	for i, p := range peers {
		infos[i] = sharder.PeerInfo{ID: p, Weight: 1}
	}
	out := map[string]string{}
	for _, m := range members {
		for _, p := range infos {
			if h.ShouldOwn(m, infos, p) {
				out[m] = p.ID
			}
		}
	}
	return out
}

// join starts joinReplica and proves: the members rendezvous hashing now
// gives it move to it (their fences) and no other member moves; their
// placements are reported by it; every Database stays Ready; from the
// audit logs, no member object is written by two identities at
// overlapping times. The time from the start to each fence taken is logged.
func (h *handover) join(ctx context.Context) {
	t, f := h.in.T, h.in.Fleet
	g := NewWithT(t)
	before := fenceIDs(ctx, g, f, h.ns, h.members)
	for m, o := range before {
		g.Expect(o).NotTo(BeEmpty(), "%s: no live owner before the join", m)
	}
	var (
		self    string
		want    map[string]string
		moved   []string
		started time.Time
	)
	for attempt := 1; ; attempt++ {
		started = time.Now()
		p, err := h.in.Hubs.Start(joinReplica)
		g.Expect(err).NotTo(HaveOccurred())
		self = peerID(WaitForStandbyID(ctx, t, p))
		running := h.runningPeers(ctx)
		slices.Sort(running)
		var peers []string
		g.Eventually(func(g Gomega) {
			peers = livePeers(ctx, g, f, h.ns)
			g.Expect(peers).To(Equal(running), "the live peer Leases are not those of the running replicas yet")
		}).WithContext(ctx).WithTimeout(2 * time.Minute).WithPolling(200 * time.Millisecond).Should(Succeed())
		want = hrwOwners(h.members, peers)
		moved = nil
		for _, m := range h.members {
			if want[m] == self {
				moved = append(moved, m)
			}
		}
		if len(moved) > 0 || attempt == joinAttempts {
			break
		}
		t.Logf("join attempt %d: %s wins no member among %v; stopped cleanly, started again (a new identity)", attempt, self, peers)
		p.Stop()
		g.Eventually(func(g Gomega) {
			g.Expect(livePeers(ctx, g, f, h.ns)).NotTo(ContainElement(self))
		}).WithContext(ctx).WithTimeout(time.Minute).WithPolling(200 * time.Millisecond).Should(Succeed())
	}
	t.Logf("joined: %s; members moving to it: %v", self, moved)
	for m, o := range want {
		if o != self {
			g.Expect(o).To(Equal(before[m]), "%s: a join moves members only to the joining replica", m)
		}
	}

	acquired := map[string]time.Time{}
	g.Eventually(func(g Gomega) {
		now := fenceIDs(ctx, g, f, h.ns, h.members)
		g.Expect(now).To(Equal(want), "the fences are not where rendezvous hashing puts them yet")
		for _, m := range moved {
			l := &coordinationv1.Lease{}
			g.Expect(f.Hub.Client.Get(ctx, types.NamespacedName{Namespace: h.ns, Name: hub.ShardFencePrefix + "-" + m}, l)).To(Succeed())
			g.Expect(l.Spec.AcquireTime).NotTo(BeNil())
			acquired[m] = l.Spec.AcquireTime.Time
		}
	}).WithContext(ctx).WithTimeout(2 * time.Minute).WithPolling(100 * time.Millisecond).Should(Succeed())
	// Settled: nothing moves for a few decisions.
	g.Consistently(func(g Gomega) {
		g.Expect(fenceIDs(ctx, g, f, h.ns, h.members)).To(Equal(want))
	}).WithContext(ctx).WithTimeout(2 * hub.ShardProbe).WithPolling(500 * time.Millisecond).Should(Succeed())

	h.expectReportedBy(ctx, moved, want)
	h.waitAllReady(ctx)
	expectExactMemberObjects(ctx, t, f, h.tenant, h.dbs)
	h.expectExclusiveWrites()

	var report []string
	for _, m := range moved {
		report = append(report, fmt.Sprintf("%s from %s: fence %s", m, shortID(before[m]), acquired[m].Sub(started).Round(10*time.Millisecond)))
	}
	msg := fmt.Sprintf("e2e: sharding: join of %s (start → fence taken): %s", joinReplica, strings.Join(report, "; "))
	t.Log(msg)
	fmt.Fprintln(os.Stderr, msg)
}

// killLeader SIGKILLs the elected leader (the Database status writer),
// then creates a Database and changes another, and proves: a replica
// that survived takes the leader Lease; the killed leader's members are
// taken over (fences, placements reported by their new owners); the new
// Database becomes Ready and the change reaches every member; from the
// audit logs, the killed leader writes nothing after the kill, no member
// object is written by two identities at overlapping times, and Databases
// are written by the leader of the moment only. It logs SIGKILL → Lease
// acquired → the new leader's first Database status write.
func (h *handover) killLeader(ctx context.Context) {
	t, f := h.in.T, h.in.Fleet
	g := NewWithT(t)
	lease := types.NamespacedName{Namespace: h.ns, Name: hub.LeaderElectionID}
	oldID := WaitForLeader(ctx, t, f, lease, "")
	oldName := replicaName(oldID)
	owners := fenceIDs(ctx, g, f, h.ns, h.members)
	var lost []string
	for _, m := range h.members {
		if owners[m] == peerID(oldID) {
			lost = append(lost, m)
		}
	}

	killed := time.Now()
	g.Expect(h.in.Hubs.Replica(oldName).Kill()).To(Succeed())
	h.killed[oldID] = killed
	t.Logf("killed the leader %s with SIGKILL; its members: %v", oldID, lost)

	// While no replica leads: a new Database, and a change of another.
	late := NewDatabase(h.tenant, fmt.Sprintf("db-%02d", len(h.dbs)), 1, h.members)
	late.Spec.Backend = fleetv1alpha1.BackendStatefulSet
	g.Expect(f.Hub.Client.Create(ctx, late)).To(Succeed())
	changed := client.ObjectKeyFromObject(h.dbs[0])
	memory := resource.MustParse("48Mi")
	gen := setMemoryRequest(ctx, g, f, changed, memory)
	h.dbs = append(h.dbs, late)

	newID := WaitForLeader(ctx, t, f, lease, oldID)
	acquired := leaseAcquireTime(ctx, g, f, lease)
	g.Expect(h.in.Hubs.Names()).To(ContainElement(replicaName(newID)))
	t.Logf("new leader: %s", newID)
	took := waitForTakeover(ctx, t, f, h.ns, lost, oldName, h.in.Hubs.Names())
	want := fenceIDs(ctx, g, f, h.ns, h.members)

	h.waitAllReady(ctx)
	h.expectConverged(ctx, changed, gen, memory)
	expectExactMemberObjects(ctx, t, f, h.tenant, h.dbs)
	h.expectReportedBy(ctx, lost, want)
	h.expectExclusiveWrites()
	firstStatus := h.expectDatabaseWriters(oldID, newID, killed, acquired)

	var report []string
	for _, m := range lost {
		report = append(report, fmt.Sprintf("%s → %s %s", m, shortID(want[m]), took[m].Sub(killed).Round(10*time.Millisecond)))
	}
	msg := fmt.Sprintf("e2e: sharding: SIGKILL of the leader %s → Lease acquired by %s %s, → its first Database status write %s; its members' fences: %s",
		oldName, replicaName(newID), acquired.Sub(killed).Round(10*time.Millisecond), firstStatus.Sub(killed).Round(10*time.Millisecond),
		strings.Join(report, "; "))
	t.Log(msg)
	fmt.Fprintln(os.Stderr, msg)
}

// shortID is a peer ID's replica name ("hub-0" of "hub-0-<uuid>").
func shortID(id string) string {
	parts := strings.SplitN(id, "-", 3)
	if len(parts) < 3 {
		return id
	}
	return parts[0] + "-" + parts[1]
}

func (h *handover) waitAllReady(ctx context.Context) {
	for _, db := range h.dbs {
		WaitForDatabaseReady(ctx, WaitForDatabaseReadyInput{T: h.in.T, Fleet: h.in.Fleet, Key: client.ObjectKeyFromObject(db), Members: h.members, Replicas: 1})
	}
}

// expectConverged: every member's StatefulSet of the Database was written
// for generation gen, asks for memory, and rolled out.
func (h *handover) expectConverged(ctx context.Context, key types.NamespacedName, gen int64, memory resource.Quantity) {
	for _, m := range h.in.Fleet.Members {
		NewWithT(h.in.T).Eventually(func(g Gomega) {
			sts := &appsv1.StatefulSet{}
			g.Expect(m.Client.Get(ctx, key, sts)).To(Succeed())
			g.Expect(StatefulSetReadyOn(sts, gen)).To(BeTrue(), "%s: StatefulSet %s not rolled out on generation %d", m.Name, key.Name, gen)
			var got *resource.Quantity
			for _, c := range sts.Spec.Template.Spec.Containers {
				if q, ok := c.Resources.Requests["memory"]; ok {
					got = &q
				}
			}
			g.Expect(got).NotTo(BeNil())
			g.Expect(got.Cmp(memory)).To(BeZero(), "%s: memory request %s", m.Name, got)
		}).WithContext(ctx).WithTimeout(h.in.Fleet.Intervals.Ready).WithPolling(time.Second).Should(Succeed())
	}
}

// expectReportedBy: every placement of the members is reported by the
// member's owner in owners (the owner synced the member since it took it).
func (h *handover) expectReportedBy(ctx context.Context, members []string, owners map[string]string) {
	for _, m := range members {
		NewWithT(h.in.T).Eventually(func(g Gomega) {
			var list fleetv1alpha1.DatabasePlacementList
			g.Expect(h.in.Fleet.Hub.Client.List(ctx, &list, client.InNamespace(h.ns),
				client.MatchingLabels{fleetv1alpha1.LabelPlacementCluster: m})).To(Succeed())
			g.Expect(list.Items).To(HaveLen(len(h.dbs)), "%s: placements", m)
			for _, pl := range list.Items {
				g.Expect(pl.Status.Reporter).To(Equal(owners[m]), "%s: placement %s reported by", m, pl.Name)
			}
		}).WithContext(ctx).WithTimeout(h.in.Fleet.Intervals.Ready).WithPolling(500 * time.Millisecond).Should(Succeed())
	}
}

// expectExclusiveWrites reads every member's audit log: no object is
// written by two replica identities at overlapping times (first to last
// write of each), and no killed identity wrote anything (hub included)
// received after its kill.
func (h *handover) expectExclusiveWrites() {
	t, f := h.in.T, h.in.Fleet
	g := NewWithT(t)
	for _, c := range append([]string{"hub"}, f.MemberNames()...) {
		writes, err := readAuditWrites(h.in.AuditLog(c))
		g.Expect(err).NotTo(HaveOccurred())
		spans := writeSpans{} // object → identity → span
		var late []string
		for _, w := range writes {
			if !countedWrite(w) || w.Replica == "" {
				continue
			}
			if k, ok := h.killed[w.Replica]; ok && w.Received.After(k) {
				late = append(late, fmt.Sprintf("%s %s by %s at %s", w.Verb, w.Object, w.Replica, w.Received.Format(time.RFC3339Nano)))
			}
			if c == "hub" {
				continue
			}
			spans.add(w.Object, w.Replica, w.Received)
		}
		g.Expect(late).To(BeEmpty(), "%s: written by a killed replica after its kill", c)
		spans.expectNoOverlap(g, c)
	}
}

// expectDatabaseWriters reads the hub's audit log: Databases (status
// included) are written only by the leader of the moment, the killed
// leader oldID before its kill and the new one newID from its Lease on.
// It returns the new leader's first Database status write.
func (h *handover) expectDatabaseWriters(oldID, newID string, killed, acquired time.Time) time.Time {
	t := h.in.T
	g := NewWithT(t)
	writes, err := readAuditWrites(h.in.AuditLog("hub"))
	g.Expect(err).NotTo(HaveOccurred())
	var wrong []string
	var first time.Time
	for _, w := range writes {
		if w.Resource != "databases" || !countedWrite(w) || w.Replica == "" {
			continue
		}
		switch {
		case w.Replica == newID && !w.Received.Before(acquired):
			if strings.HasPrefix(w.Object, "databases/status ") && first.IsZero() {
				first = w.Received
			}
		case w.Replica == oldID && w.Received.Before(killed):
		default:
			// ShardingSpec's first kill is of a replica that does not lead:
			// no identity but these two leaders writes Databases.
			wrong = append(wrong, fmt.Sprintf("%s %s by %s at %s", w.Verb, w.Object, w.Replica, w.Received.Format(time.RFC3339Nano)))
		}
	}
	g.Expect(wrong).To(BeEmpty(), "Databases written by a replica that did not lead")
	g.Expect(first.IsZero()).To(BeFalse(), "the new leader %s wrote no Database status", newID)
	return first
}
