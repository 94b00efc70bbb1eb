package e2e

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	. "github.com/onsi/gomega" //nolint:staticcheck // ST1001: gomega's DSL reads as assertions, as in Cluster API's test/framework
	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleetv1alpha1 "github.com/fleetdb/fleetdb/apis/v1alpha1"
	"github.com/fleetdb/fleetdb/hub"
	"github.com/fleetdb/fleetdb/member"
	"github.com/fleetdb/fleetdb/test/fleet"
	"github.com/fleetdb/fleetdb/test/localfleet"
)

// FailoverInput is the input of FailoverSpec.
type FailoverInput struct {
	T     testing.TB
	Fleet *Fleet
	// Hubs are the hub replicas the suite runs; nil skips the spec.
	Hubs *localfleet.HubSet
	// AuditLog is where a cluster's API server logs its writes; nil skips
	// the spec (the local fleet's audit policy: auditPolicy).
	AuditLog func(cluster string) string
	// Databases created at once; default 20.
	Databases int
	// HubNamespace holds the Lease; default fleetdb-system.
	HubNamespace string
	// HubArgs are the replicas' further flags, for the report (lease settings).
	HubArgs string
}

// killAtStatefulSets is how many StatefulSets the first member holds when
// the leader is killed: the fan-out has begun and is far from done.
const killAtStatefulSets = 5

// FailoverSpec kills the acting hub replica with SIGKILL in the middle of a
// fan-out of Databases (StatefulSet backend, one instance) over every member
// and proves:
//   - the standby takes the Lease (its holderIdentity changes to it);
//   - every Database becomes Ready on every member;
//   - every member holds exactly the objects each Database should have
//     there, all labelled with its UID: nothing duplicated, nothing leaked;
//   - from the members' audit logs: the standby never wrote to a member (nor
//     to the hub, the Lease aside) before it took over, the killed replica
//     wrote nothing after the kill, so no object was written by both at
//     overlapping times; the killed replica, started again, stays a standby
//     that writes nothing.
//
// It logs the takeover times (SIGKILL → Lease acquired, → first member write
// of the new leader): a measurement, not an assertion.
func FailoverSpec(ctx context.Context, in FailoverInput) {
	t, f := in.T, in.Fleet
	if in.Hubs == nil || in.AuditLog == nil || len(in.Hubs.Names()) < 2 {
		t.Skip("needs two hub replicas run by the suite and the local fleet's audit logs")
	}
	if len(f.Members) < 3 {
		t.Skipf("needs 3 members, the fleet has %d", len(f.Members))
	}
	g := NewWithT(t)
	n := in.Databases
	if n == 0 {
		n = 20
	}
	lease := types.NamespacedName{Namespace: in.HubNamespace, Name: hub.LeaderElectionID}
	if lease.Namespace == "" {
		lease.Namespace = "fleetdb-system"
	}
	oldID := WaitForLeader(ctx, t, f, lease, "")
	oldName := replicaName(oldID)
	g.Expect(in.Hubs.Names()).To(ContainElement(oldName), "the Lease holder %q is none of the suite's replicas", oldID)
	victim := in.Hubs.Replica(oldName)
	t.Logf("leader: %s (pid %d)", oldID, victim.Pid())

	ns := CreateNamespace(ctx, CreateNamespaceInput{T: t, Fleet: f, Prefix: "e2e-failover"})
	DumpOnFailure(t, f, ns)
	members := f.MemberNames()

	// Watch the first member's StatefulSets before anything is created.
	wcfg := rest.CopyConfig(f.Members[0].Config)
	wcfg.Timeout = 0 // a client timeout would end the watch
	wc, err := client.NewWithWatch(wcfg, client.Options{Scheme: fleet.Scheme})
	g.Expect(err).NotTo(HaveOccurred())
	w, err := wc.Watch(ctx, &appsv1.StatefulSetList{}, client.InNamespace(ns))
	g.Expect(err).NotTo(HaveOccurred())
	defer w.Stop()

	var (
		created sync.WaitGroup
		dbs     = make([]*fleetv1alpha1.Database, n)
		errs    = make(chan error, n)
	)
	created.Add(1)
	go func() {
		defer created.Done()
		for i := range n {
			db := NewDatabase(ns, fmt.Sprintf("db-%02d", i), 1, members)
			db.Spec.Backend = fleetv1alpha1.BackendStatefulSet
			if err := f.Hub.Client.Create(ctx, db); err != nil {
				errs <- err
			}
			dbs[i] = db
		}
	}()

	seen := 0
	for seen < killAtStatefulSets {
		select {
		case ev, ok := <-w.ResultChan():
			g.Expect(ok).To(BeTrue(), "the StatefulSet watch of %s ended", f.Members[0].Name)
			if ev.Type == watch.Added {
				seen++
			}
		case <-ctx.Done():
			t.Fatalf("no %d StatefulSets in %s: %v", killAtStatefulSets, f.Members[0].Name, ctx.Err())
		}
	}
	killed := time.Now()
	g.Expect(victim.Kill()).To(Succeed())
	atKill := countStatefulSets(ctx, g, f, ns)
	t.Logf("killed the leader %s with SIGKILL with %d of %d StatefulSets in the members", oldName, atKill, n*len(members))

	newID := WaitForLeader(ctx, t, f, lease, oldID)
	acquired := leaseAcquireTime(ctx, g, f, lease)
	t.Logf("new leader: %s", newID)
	g.Expect(in.Hubs.Names()).To(ContainElement(replicaName(newID)))

	created.Wait()
	close(errs)
	for err := range errs {
		g.Expect(err).NotTo(HaveOccurred(), "creating a Database")
	}
	// The killed replica comes back as a standby; the suite goes on with two.
	_, err = in.Hubs.Start(oldName)
	g.Expect(err).NotTo(HaveOccurred())

	for _, db := range dbs {
		WaitForDatabaseReady(ctx, WaitForDatabaseReadyInput{
			T: t, Fleet: f, Key: client.ObjectKeyFromObject(db), Members: members, Replicas: 1,
		})
	}
	expectExactMemberObjects(ctx, t, f, ns, dbs)

	firstWrites := expectOneWriterAtATime(t, f, in.AuditLog, oldID, newID, killed, acquired)
	var firstWrite, everyMember time.Time
	for _, at := range firstWrites {
		if firstWrite.IsZero() || at.Before(firstWrite) {
			firstWrite = at
		}
		if at.After(everyMember) {
			everyMember = at
		}
	}
	restarted := WaitForStandbyID(ctx, t, in.Hubs.Replica(oldName))
	expectNoWrites(t, f, in.AuditLog, restarted)

	settings := "default lease settings"
	if in.HubArgs != "" {
		settings = "hub flags " + in.HubArgs
	}
	takeover := fmt.Sprintf("e2e: failover: SIGKILL → Lease acquired by the standby %s, → its first member write %s (%s after the Lease; "+
		"the last of the %d members it wrote to first written %s after it; %s; %d members, %d of %d StatefulSets existed at the kill)",
		acquired.Sub(killed).Round(10*time.Millisecond), firstWrite.Sub(killed).Round(10*time.Millisecond),
		firstWrite.Sub(acquired).Round(10*time.Millisecond), len(firstWrites), everyMember.Sub(acquired).Round(10*time.Millisecond),
		settings, len(members), atKill, n*len(members))
	t.Log(takeover)
	fmt.Fprintln(os.Stderr, takeover)
	expectWarm(ctx, t, f, in.AuditLog, newID, acquired)
}

// replicaName is the --replica-name part of a replica identity ("hub-0_<uuid>").
func replicaName(id string) string {
	name, _, _ := strings.Cut(id, "_")
	return name
}

// WaitForLeader waits until the hub's Lease names a holder other than not
// (and that holder's lease is current) and returns its identity.
func WaitForLeader(ctx context.Context, t testing.TB, f *Fleet, key types.NamespacedName, not string) string {
	t.Helper()
	var holder string
	NewWithT(t).Eventually(func(g Gomega) {
		l := &coordinationv1.Lease{}
		g.Expect(f.Hub.Client.Get(ctx, key, l)).To(Succeed())
		g.Expect(l.Spec.HolderIdentity).NotTo(BeNil())
		holder = *l.Spec.HolderIdentity
		g.Expect(holder).NotTo(BeEmpty())
		g.Expect(holder).NotTo(Equal(not))
	}).WithContext(ctx).WithTimeout(2 * time.Minute).WithPolling(50 * time.Millisecond).Should(Succeed())
	return holder
}

func leaseAcquireTime(ctx context.Context, g Gomega, f *Fleet, key types.NamespacedName) time.Time {
	l := &coordinationv1.Lease{}
	g.Expect(f.Hub.Client.Get(ctx, key, l)).To(Succeed())
	g.Expect(l.Spec.AcquireTime).NotTo(BeNil())
	return l.Spec.AcquireTime.Time
}

// WaitForStandbyID returns the replica identity a hub process logged at start.
func WaitForStandbyID(ctx context.Context, t testing.TB, p *localfleet.HubProcess) string {
	t.Helper()
	var id string
	NewWithT(t).Eventually(func(g Gomega) {
		log := localfleet.TailFile(p.LogPath, 1<<20)
		i := strings.Index(log, `"replica":"`)
		g.Expect(i).To(BeNumerically(">=", 0), "no replica identity in %s yet", p.LogPath)
		rest := log[i+len(`"replica":"`):]
		id = rest[:strings.IndexByte(rest, '"')]
	}).WithContext(ctx).WithTimeout(time.Minute).WithPolling(200 * time.Millisecond).Should(Succeed())
	return id
}

func countStatefulSets(ctx context.Context, g Gomega, f *Fleet, ns string) int {
	total := 0
	for _, m := range f.Members {
		var list appsv1.StatefulSetList
		g.Expect(m.Client.List(ctx, &list, client.InNamespace(ns))).To(Succeed())
		total += len(list.Items)
	}
	return total
}

// expectExactMemberObjects: every member holds, for each Database, exactly
// its StatefulSet, two Services, ConfigMap, credentials Secret (and, for
// postgres, its instance TLS Secret), claim and pod, labelled with the
// Database's UID; and nothing else of fleetdb's.
func expectExactMemberObjects(ctx context.Context, t testing.TB, f *Fleet, ns string, dbs []*fleetv1alpha1.Database) {
	t.Helper()
	want := map[string][]string{}
	for _, db := range dbs {
		n := db.Name
		secrets := []string{n + "-credentials"}
		if db.Spec.Engine == fleetv1alpha1.EnginePostgres {
			secrets = append(secrets, member.InstanceTLSSecretName(n))
		}
		for kind, names := range map[string][]string{
			"StatefulSet": {n}, "Service": {n, n + "-hl"}, "ConfigMap": {n + "-config"}, "Secret": secrets,
			"PersistentVolumeClaim": {"data-" + n + "-0"}, "Pod": {n + "-0"},
		} {
			want[kind] = append(want[kind], names...)
		}
	}
	for kind := range want {
		slices.Sort(want[kind])
	}
	uids := map[string]string{}
	for _, db := range dbs {
		uids[db.Name] = string(db.UID)
	}
	for _, m := range f.Members {
		NewWithT(t).Eventually(func(g Gomega) {
			got := map[string][]string{}
			for kind, list := range map[string]client.ObjectList{
				"StatefulSet": &appsv1.StatefulSetList{}, "Service": &corev1.ServiceList{}, "ConfigMap": &corev1.ConfigMapList{},
				"Secret": &corev1.SecretList{}, "PersistentVolumeClaim": &corev1.PersistentVolumeClaimList{}, "Pod": &corev1.PodList{},
			} {
				g.Expect(m.Client.List(ctx, list, client.InNamespace(ns),
					client.MatchingLabels{fleetv1alpha1.LabelManagedBy: fleetv1alpha1.ManagedByValue})).To(Succeed())
				items, err := meta.ExtractList(list)
				g.Expect(err).NotTo(HaveOccurred())
				for _, it := range items {
					o, ok := it.(client.Object)
					g.Expect(ok).To(BeTrue())
					got[kind] = append(got[kind], o.GetName())
					db := o.GetLabels()[fleetv1alpha1.LabelDatabaseName]
					g.Expect(o.GetLabels()).To(HaveKeyWithValue(fleetv1alpha1.LabelDatabaseUID, uids[db]), "%s %s in %s", kind, o.GetName(), m.Name)
				}
				slices.Sort(got[kind])
			}
			g.Expect(got).To(Equal(want), "fleetdb's objects in %s", m.Name)
		}).WithContext(ctx).WithTimeout(f.Intervals.Ready).WithPolling(time.Second).Should(Succeed())
	}
}

// expectOneWriterAtATime reads every cluster's audit log and proves that the
// standby (newID) wrote nothing before it acquired the Lease (the Lease
// itself aside, on the hub), the killed leader (oldID) nothing received
// once the standby held it (requests it sent before the SIGKILL may still be
// received just after it), and no object was written by both at overlapping
// times. It returns when the new leader first wrote to each member it wrote to.
func expectOneWriterAtATime(t testing.TB, f *Fleet, auditLog func(string) string, oldID, newID string, killed, acquired time.Time) map[string]time.Time {
	t.Helper()
	g := NewWithT(t)
	first := map[string]time.Time{}
	for _, c := range append([]string{"hub"}, f.MemberNames()...) {
		writes, err := readAuditWrites(auditLog(c))
		g.Expect(err).NotTo(HaveOccurred())
		lastOld, firstNew := map[string]time.Time{}, map[string]time.Time{}
		var early, late []string
		for _, w := range writes {
			if !countedWrite(w) {
				continue
			}
			switch w.Replica {
			case newID:
				if w.Received.Before(acquired) && w.Resource != "leases" {
					early = append(early, fmt.Sprintf("%s %s at %s", w.Verb, w.Object, w.Received.Format(time.RFC3339Nano)))
				}
				if _, ok := firstNew[w.Object]; !ok {
					firstNew[w.Object] = w.Received
				}
				if c != "hub" && (first[c].IsZero() || w.Received.Before(first[c])) {
					first[c] = w.Received
				}
			case oldID:
				// A request the old leader sent before the SIGKILL can still be
				// received (and audited) a little after it on a loaded API
				// server; what must never happen is a write of the old leader
				// received once the standby holds the Lease.
				if w.Received.After(acquired) {
					late = append(late, fmt.Sprintf("%s %s at %s (killed at %s)", w.Verb, w.Object, w.Received.Format(time.RFC3339Nano), killed.Format(time.RFC3339Nano)))
				}
				lastOld[w.Object] = w.Received
			}
		}
		g.Expect(early).To(BeEmpty(), "%s: the standby %s wrote before it held the Lease", c, newID)
		g.Expect(late).To(BeEmpty(), "%s: the killed leader %s wrote after the standby took the Lease", c, oldID)
		for obj, last := range lastOld {
			if fn, ok := firstNew[obj]; ok {
				g.Expect(last.Before(fn)).To(BeTrue(), "%s: %s written by both replicas at overlapping times", c, obj)
			}
		}
	}
	// A member the killed leader had finished may get no write at all.
	g.Expect(first).NotTo(BeEmpty(), "the new leader %s never wrote to a member", newID)
	return first
}

// expectWarm proves from the members' audit logs that the standby that took
// over (id) was warm: it watched every member's StatefulSets (the member
// sync's informers) before it acquired the Lease, so its first sync did not
// wait for a connection or a first list (docs/hub-replicas.md); on a member
// that offers CloudNativePG, its Clusters too.
func expectWarm(ctx context.Context, t testing.TB, f *Fleet, auditLog func(string) string, id string, acquired time.Time) {
	t.Helper()
	g := NewWithT(t)
	for _, c := range f.MemberNames() {
		watches, err := readAuditWatches(auditLog(c))
		g.Expect(err).NotTo(HaveOccurred())
		watched := func(resource string) bool {
			return slices.ContainsFunc(watches, func(w auditWrite) bool {
				return w.Replica == id && w.Resource == resource && w.Received.Before(acquired)
			})
		}
		g.Expect(watched("statefulsets")).To(BeTrue(), "%s: the standby %s did not watch its StatefulSets before it held the Lease (a cold standby)", c, id)
		// A member that offers CloudNativePG: its Cluster informer too
		// (the one every CloudNativePG member sync reads).
		var mc fleetv1alpha1.MemberCluster
		g.Expect(f.Hub.Client.Get(ctx, client.ObjectKey{Name: c}, &mc)).To(Succeed())
		if slices.Contains(mc.Status.Backends, fleetv1alpha1.BackendCloudNativePG) {
			g.Expect(watched("clusters")).To(BeTrue(), "%s: the standby %s did not watch its CloudNativePG Clusters before it held the Lease", c, id)
		}
	}
}

// expectNoWrites proves from every cluster's audit log that the replica
// never wrote (a standby).
func expectNoWrites(t testing.TB, f *Fleet, auditLog func(string) string, id string) {
	t.Helper()
	g := NewWithT(t)
	for _, c := range append([]string{"hub"}, f.MemberNames()...) {
		writes, err := readAuditWrites(auditLog(c))
		g.Expect(err).NotTo(HaveOccurred())
		var by []string
		for _, w := range writes {
			if w.Replica == id && countedWrite(w) && w.Resource != "leases" {
				by = append(by, w.Verb+" "+w.Object)
			}
		}
		g.Expect(by).To(BeEmpty(), "%s: the standby %s wrote", c, id)
	}
}

// countedWrite: a write that took effect, other than the hub identity
// ConfigMap, which whichever replica starts first creates before any election
// (hub.NewManager; the same outcome whoever does it).
func countedWrite(w auditWrite) bool {
	return w.Code < 300 && !strings.HasSuffix(w.Object, "/"+fleetv1alpha1.HubIdentityConfigMap)
}
