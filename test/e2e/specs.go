package e2e

import (
	"bytes"
	"cmp"
	"context"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	. "github.com/onsi/gomega" //nolint:staticcheck // ST1001: gomega's DSL reads as assertions, as in Cluster API's test/framework
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleetv1alpha1 "github.com/fleetdb/fleetdb/apis/v1alpha1"
)

// Every spec works in its own namespace (deleted, with whatever is left in
// it, when the test ends) on a Database placed on the fleet's members by name.

// ---- 1. create → Ready ----

// CreateReadyInput is the input of CreateReadySpec.
type CreateReadyInput struct {
	T     testing.TB
	Fleet *Fleet
	// Replicas per member; default 2 (so the PodDisruptionBudget exists too).
	Replicas int32
}

// CreateReadySpec creates a Database placed on every member and proves:
//   - the hub reports Ready=True on the Database's generation, phase Ready,
//     N/N clusters, Degraded=False, the teardown finalizer in place;
//   - the teardown finalizer and the backend decision were stored at the
//     create by the hub's API server (deploy/hub/teardown_finalizer.yaml,
//     installed by hack/fleet.sh): the hub never patched them on;
//   - every member really runs it, as the member itself reports: the
//     StatefulSet written for that generation with readyReplicas == replicas,
//     that many pods scheduled on (kwok) nodes with condition Ready=True,
//     one Bound claim of the requested size per replica backed by a Bound
//     volume (the member's default StorageClass provisioned it), the Services,
//     ConfigMap, credentials Secret and PodDisruptionBudget;
//   - the hub's per-member numbers are the members' numbers (readyReplicas,
//     endpoint), and the credentials are one hub Secret owned by the
//     Database, identical in every member.
func CreateReadySpec(ctx context.Context, in CreateReadyInput) {
	t, f := in.T, in.Fleet
	g := NewWithT(t)
	replicas := cmp.Or(in.Replicas, 2)
	ns := CreateNamespace(ctx, CreateNamespaceInput{T: t, Fleet: f, Prefix: "e2e-create"})
	DumpOnFailure(t, f, ns)
	members := f.MemberNames()

	db := NewDatabase(ns, "orders", replicas, members)
	g.Expect(f.Hub.Client.Create(ctx, db)).To(Succeed())
	g.Expect(db.Finalizers).To(ContainElement(fleetv1alpha1.TeardownFinalizer), "the create returns the Database with the finalizer")
	g.Expect(db.Annotations).To(HaveKeyWithValue(fleetv1alpha1.AnnotationBackend, string(fleetv1alpha1.BackendCloudNativePG)))
	key := client.ObjectKeyFromObject(db)
	ready := WaitForDatabaseReady(ctx, WaitForDatabaseReadyInput{T: t, Fleet: f, Key: key, Members: members, Replicas: replicas, Version: "17"})
	g.Expect(ready.Finalizers).To(ContainElement(fleetv1alpha1.TeardownFinalizer))
	// The manager that created the Database owns its spec; no other manager
	// (the hub's patch would be one) owns the finalizers or the backend annotation.
	creator := ""
	for _, mf := range ready.ManagedFields {
		if mf.FieldsV1 != nil && strings.Contains(mf.FieldsV1.GetRawString(), `"f:spec"`) {
			creator = mf.Manager
		}
	}
	g.Expect(creator).NotTo(BeEmpty(), "a managed fields entry owns the spec")
	for _, mf := range ready.ManagedFields {
		raw := ""
		if mf.FieldsV1 != nil {
			raw = mf.FieldsV1.GetRawString()
		}
		for _, field := range []string{`"f:finalizers"`, `"f:fleetdb.io/backend"`} {
			if strings.Contains(raw, field) {
				g.Expect(mf.Manager).To(Equal(creator), "%s written by %s (%s), not at the create", field, mf.Manager, mf.Operation)
			}
		}
	}

	for _, m := range f.Members {
		ExpectMemberWorkload(ctx, ExpectMemberWorkloadInput{T: t, Fleet: f, Member: m, DB: ready, Replicas: replicas, Version: "17"})
	}

	// What the hub reports per member is what the member reports.
	final := GetDatabase(ctx, g, f, key)
	for _, m := range f.Members {
		replicas, ready := MemberReplicas(ctx, g, m, final)
		e := Entry(g, final, m.Name)
		g.Expect(e.ReadyReplicas).To(Equal(ready), m.Name)
		g.Expect(e.Replicas).To(Equal(replicas), m.Name)
		g.Expect(e.Endpoint).To(Equal(fmt.Sprintf("%s.%s.svc:5432", key.Name, key.Namespace)), m.Name)
	}

	// One set of credentials, generated on the hub, the same everywhere.
	hubSecret := &corev1.Secret{}
	g.Expect(f.Hub.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: key.Name + "-credentials"}, hubSecret)).To(Succeed())
	g.Expect(metav1.IsControlledBy(hubSecret, final)).To(BeTrue(), "the hub credentials Secret is not owned by the Database")
	g.Expect(len(hubSecret.Data["password"])).To(BeNumerically(">=", 16))
	for _, m := range f.Members {
		s := &corev1.Secret{}
		g.Expect(m.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: key.Name + "-credentials"}, s)).To(Succeed())
		g.Expect(s.Data).To(Equal(hubSecret.Data), m.Name)
	}
}

// ---- 2. scale ----

// ScaleInput is the input of ScaleSpec.
type ScaleInput struct {
	T     testing.TB
	Fleet *Fleet
	// Steps are the replica counts: the Database is created with the first
	// and changed to each next one. Default 2, 3, 1.
	Steps []int32
}

// ScaleSpec changes spec.replicas step by step and proves, for every step:
// the hub is Ready again on the new generation (Ready's observedGeneration
// is the new one, every member's entry observed it), the hub's per-member
// replicas/readyReplicas follow, and every member's StatefulSet follows with
// all pods Ready and a Bound claim per replica. Going to one replica removes
// the PodDisruptionBudget; claims of removed replicas stay (the StatefulSet's
// claim retention is Retain: scaling down never deletes data).
func ScaleSpec(ctx context.Context, in ScaleInput) {
	t, f := in.T, in.Fleet
	g := NewWithT(t)
	steps := in.Steps
	if len(steps) == 0 {
		steps = []int32{2, 3, 1}
	}
	ns := CreateNamespace(ctx, CreateNamespaceInput{T: t, Fleet: f, Prefix: "e2e-scale"})
	DumpOnFailure(t, f, ns)
	members := f.MemberNames()

	db := NewDatabase(ns, "scaled", steps[0], members)
	g.Expect(f.Hub.Client.Create(ctx, db)).To(Succeed())
	key := client.ObjectKeyFromObject(db)
	maxReplicas := steps[0]
	var prevGen int64
	for i, replicas := range steps {
		if i > 0 {
			gen := UpdateDatabase(ctx, t, f, key, func(d *fleetv1alpha1.Database) { d.Spec.Replicas = replicas })
			g.Expect(gen).To(BeNumerically(">", prevGen), "changing spec.replicas must bump the generation")
			t.Logf("scaled to %d replicas (generation %d)", replicas, gen)
		}
		ready := WaitForDatabaseReady(ctx, WaitForDatabaseReadyInput{T: t, Fleet: f, Key: key, Members: members, Replicas: replicas})
		prevGen = ready.Generation
		for _, m := range f.Members {
			ExpectMemberWorkload(ctx, ExpectMemberWorkloadInput{T: t, Fleet: f, Member: m, DB: ready, Replicas: replicas})
		}
		maxReplicas = max(maxReplicas, replicas)
	}
	if db.EffectiveBackend() != fleetv1alpha1.BackendStatefulSet {
		return // CloudNativePG keeps its claims itself (none in the kwok fleet)
	}
	// Claims of replicas scaled away are kept.
	for _, m := range f.Members {
		for i := range maxReplicas {
			name := fmt.Sprintf("data-%s-%d", key.Name, i)
			g.Expect(m.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, &corev1.PersistentVolumeClaim{})).
				To(Succeed(), "claim %s in %s", name, m.Name)
		}
	}
}

// ---- 3. rollout ----

// RolloutInput is the input of RolloutSpec.
type RolloutInput struct {
	T     testing.TB
	Fleet *Fleet
	// MaxUnavailable is spec.rollout.maxUnavailable; default 1.
	MaxUnavailable int32
	// FromVersion and ToVersion are the engine versions; default "17.9" →
	// "17.10" (a minor update: the API refuses a major change on the
	// StatefulSet backend).
	FromVersion, ToVersion string
	// WatchEvery is the interval of the background watcher; default 100ms.
	WatchEvery time.Duration
}

// RolloutSpec changes spec.version with rollout.maxUnavailable on at least
// two members and proves that the hub changes at most maxUnavailable members
// at a time and starts the next only when the previous ones are Ready on the
// new generation.
//
// kwok makes pods Ready within milliseconds, which would make "in flight"
// too short to see. So the spec holds every member's rollout open itself:
// it cordons every node of every member before the change, which leaves the
// pod the StatefulSet controller recreates with the new image Pending, so a
// member the hub has written stays "in flight" (its StatefulSet carries the
// new fleetdb.io/generation but is not Ready on it) until the spec uncordons
// that member. Then, batch by batch:
//
//   - eventually exactly min(maxUnavailable, remaining) members are in flight;
//   - for Intervals.Hold no other member's StatefulSet is written for the new
//     generation and the hub does not report Ready (the hub really waits:
//     while a batch is stuck, it leaves the rest alone — for that window;
//     a hub that would move on only after a longer time is not caught);
//   - the spec uncordons the batch, it becomes Ready, and the next batch starts.
//
// Meanwhile a watcher polls the hub and every member's StatefulSet every
// WatchEvery and records (1) any moment where more than maxUnavailable
// members are in flight (confirmed by an immediate second read, since the
// members are read one after the other, not atomically) and (2) any moment
// where the hub says Ready=True on the new generation while a member is not
// Ready on it (the hub is read first, so no false alarm). Both must never
// happen. Polling can miss states shorter than WatchEvery; the cordon makes
// the states that matter last seconds.
func RolloutSpec(ctx context.Context, in RolloutInput) {
	t, f := in.T, in.Fleet
	g := NewWithT(t)
	if len(f.Members) < 2 {
		t.Skipf("a rollout needs at least 2 members, the fleet has %d", len(f.Members))
	}
	maxUnavailable := cmp.Or(in.MaxUnavailable, 1)
	from, to := cmp.Or(in.FromVersion, "17.9"), cmp.Or(in.ToVersion, "17.10")
	every := cmp.Or(in.WatchEvery, 100*time.Millisecond)
	ns := CreateNamespace(ctx, CreateNamespaceInput{T: t, Fleet: f, Prefix: "e2e-rollout"})
	DumpOnFailure(t, f, ns)
	members := f.MemberNames()

	// The rollout does not depend on the backend; the watcher reads StatefulSets.
	const replicas = 1
	db := NewDatabase(ns, "rolled", replicas, members)
	db.Spec.Backend = fleetv1alpha1.BackendStatefulSet
	db.Spec.Version = from
	db.Spec.Rollout.MaxUnavailable = maxUnavailable
	g.Expect(f.Hub.Client.Create(ctx, db)).To(Succeed())
	key := client.ObjectKeyFromObject(db)
	WaitForDatabaseReady(ctx, WaitForDatabaseReadyInput{T: t, Fleet: f, Key: key, Members: members, Replicas: replicas, Version: from})

	// Hold every member's rollout open (see above); always uncordon at the end.
	t.Cleanup(func() {
		cctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		for _, m := range f.Members {
			if err := SetNodesUnschedulable(cctx, m, false); err != nil {
				t.Logf("cleanup: %v", err)
			}
		}
	})
	for _, m := range f.Members {
		g.Expect(SetNodesUnschedulable(ctx, m, true)).To(Succeed())
	}

	gen := UpdateDatabase(ctx, t, f, key, func(d *fleetv1alpha1.Database) { d.Spec.Version = to })
	t.Logf("version %s → %s is generation %d, maxUnavailable %d", from, to, gen, maxUnavailable)
	w := startRolloutWatcher(ctx, f, key, gen, int(maxUnavailable), every)
	defer w.stop()

	done := map[string]bool{}
	var order [][]string
	for len(done) < len(members) {
		want := min(int(maxUnavailable), len(members)-len(done))
		var batch []string
		g.Eventually(func(g Gomega) {
			s := w.snapshot(ctx)
			g.Expect(s.err).NotTo(HaveOccurred())
			batch = s.inFlight
			g.Expect(batch).To(HaveLen(want), "members in flight (written for generation %d, not Ready on it); written: %v", gen, s.written)
			for _, m := range batch {
				g.Expect(done[m]).To(BeFalse(), "%s was Ready on generation %d and is in flight again", m, gen)
			}
		}).WithContext(ctx).WithTimeout(f.Intervals.Ready).WithPolling(f.Intervals.Poll).Should(Succeed())
		order = append(order, batch)
		writtenOK := append(slices.Collect(maps.Keys(done)), batch...)
		t.Logf("in flight: %v (held for %s)", batch, f.Intervals.Hold)

		g.Consistently(func(g Gomega) {
			s := w.snapshot(ctx)
			g.Expect(s.err).NotTo(HaveOccurred())
			g.Expect(s.written).To(ConsistOf(writtenOK), "the hub wrote another member while %v were not Ready", batch)
			g.Expect(s.inFlight).To(ConsistOf(batch))
			cur := GetDatabase(ctx, g, f, key)
			// Ready=True from the previous generation may still be there
			// for a moment after the hub wrote the member (its status write
			// follows the member's result); on this generation it must not be.
			ready := Condition(cur.Status.Conditions, fleetv1alpha1.ConditionReady)
			g.Expect(ready.Status == metav1.ConditionTrue && ready.ObservedGeneration >= gen).To(BeFalse(),
				"Ready=True on generation %d while %v are not Ready", ready.ObservedGeneration, batch)
		}).WithContext(ctx).WithTimeout(f.Intervals.Hold).WithPolling(f.Intervals.Poll).Should(Succeed())

		for _, m := range batch {
			g.Expect(SetNodesUnschedulable(ctx, f.Member(m), false)).To(Succeed())
		}
		g.Eventually(func(g Gomega) {
			for _, m := range batch {
				sts := &appsv1.StatefulSet{}
				g.Expect(f.Member(m).Client.Get(ctx, key, sts)).To(Succeed())
				g.Expect(StatefulSetReadyOn(sts, gen)).To(BeTrue(), "%s: %+v", m, sts.Status)
			}
		}).WithContext(ctx).WithTimeout(f.Intervals.Ready).WithPolling(f.Intervals.Poll).Should(Succeed())
		for _, m := range batch {
			done[m] = true
		}
	}
	t.Logf("rollout order: %v", order)

	final := WaitForDatabaseReady(ctx, WaitForDatabaseReadyInput{T: t, Fleet: f, Key: key, Members: members, Replicas: replicas, Version: to})
	for _, m := range f.Members {
		ExpectMemberWorkload(ctx, ExpectMemberWorkloadInput{T: t, Fleet: f, Member: m, DB: final, Replicas: replicas, Version: to})
	}
	w.stop()
	r := w.result()
	t.Logf("watcher: %d polls, max in flight seen %d", r.polls, r.maxInFlight)
	g.Expect(r.polls).To(BeNumerically(">", 10), "the watcher hardly ran")
	g.Expect(r.errs).To(BeEmpty(), "watcher read errors")
	g.Expect(r.violations).To(BeEmpty(), "more than maxUnavailable=%d members in flight", maxUnavailable)
	g.Expect(r.earlyReady).To(BeEmpty(), "the hub said Ready before every member was")
}

// rolloutSnapshot is one read of every member's StatefulSet.
type rolloutSnapshot struct {
	// written are members whose StatefulSet carries the new generation.
	written []string
	// inFlight are written members not Ready on the new generation yet.
	inFlight []string
	err      error
}

type rolloutResult struct {
	polls, maxInFlight int
	violations         []string
	earlyReady         []string
	errs               []string
}

// rolloutWatcher polls the hub and the members in the background.
type rolloutWatcher struct {
	f      *Fleet
	key    types.NamespacedName
	gen    int64
	cancel context.CancelFunc
	done   chan struct{}
	mu     sync.Mutex
	res    rolloutResult
}

func startRolloutWatcher(ctx context.Context, f *Fleet, key types.NamespacedName, gen int64, maxInFlight int, every time.Duration) *rolloutWatcher {
	ctx, cancel := context.WithCancel(ctx)
	w := &rolloutWatcher{f: f, key: key, gen: gen, cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(w.done)
		tick := time.NewTicker(every)
		defer tick.Stop()
		for {
			w.poll(ctx, maxInFlight)
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
	}()
	return w
}

func (w *rolloutWatcher) poll(ctx context.Context, maxInFlight int) {
	// The hub first: what it says was true of the members before we read them.
	db := &fleetv1alpha1.Database{}
	hubErr := w.f.Hub.Client.Get(ctx, w.key, db)
	s := w.snapshot(ctx)
	if ctx.Err() != nil {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.res.polls++
	if hubErr != nil || s.err != nil {
		w.res.errs = append(w.res.errs, fmt.Sprintf("hub: %v; members: %v", hubErr, s.err))
		return
	}
	if len(s.inFlight) > maxInFlight {
		// Members are read one after the other: re-read before calling it a violation.
		again := w.snapshot(ctx)
		if again.err == nil && len(again.inFlight) > maxInFlight {
			w.res.violations = append(w.res.violations, fmt.Sprintf("%s: in flight %v, then %v", time.Now().Format(time.StampMilli), s.inFlight, again.inFlight))
		}
	}
	w.res.maxInFlight = max(w.res.maxInFlight, len(s.inFlight))
	ready := Condition(db.Status.Conditions, fleetv1alpha1.ConditionReady)
	hubReady := ready.Status == metav1.ConditionTrue && ready.ObservedGeneration == w.gen
	if hubReady && (len(s.written) != len(w.f.Members) || len(s.inFlight) > 0) {
		w.res.earlyReady = append(w.res.earlyReady, fmt.Sprintf("%s: Ready=True on generation %d, members written %v, in flight %v",
			time.Now().Format(time.StampMilli), w.gen, s.written, s.inFlight))
	}
}

// snapshot reads every member's StatefulSet once.
func (w *rolloutWatcher) snapshot(ctx context.Context) rolloutSnapshot {
	var s rolloutSnapshot
	want := strconv.FormatInt(w.gen, 10)
	for _, m := range w.f.Members {
		sts := &appsv1.StatefulSet{}
		if err := m.Client.Get(ctx, w.key, sts); err != nil {
			s.err = fmt.Errorf("%s: %w", m.Name, err)
			return s
		}
		if sts.Annotations[fleetv1alpha1.AnnotationGeneration] != want {
			continue
		}
		s.written = append(s.written, m.Name)
		if !StatefulSetReadyOn(sts, w.gen) {
			s.inFlight = append(s.inFlight, m.Name)
		}
	}
	return s
}

func (w *rolloutWatcher) stop() {
	w.cancel()
	<-w.done
}

func (w *rolloutWatcher) result() rolloutResult {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.res
}

// ---- 4. an unreachable member ----

// UnreachableInput is the input of UnreachableSpec.
type UnreachableInput struct {
	T     testing.TB
	Fleet *Fleet
	// Member is the member to stop; default the last one.
	Member string
}

// UnreachableSpec stops one member's control plane and proves:
//   - the hub marks that member Unreachable in the Database's status, sets
//     Degraded=True naming it and Ready=False, and the registry's
//     MemberCluster turns Ready≠True;
//   - the rest of the fleet is not held up: a spec change of the same
//     Database (more replicas) reaches the other members and becomes Ready
//     there, and a new Database placed on the other members becomes Ready —
//     while the member is still down (checked after the fact);
//   - once the member is started again, the Database becomes Ready
//     everywhere on the latest generation, Degraded=False.
func UnreachableSpec(ctx context.Context, in UnreachableInput) {
	t, f := in.T, in.Fleet
	g := NewWithT(t)
	if f.Control == nil {
		t.Skip("this fleet cannot stop and start members (-e2e.fleet=existing)")
	}
	if len(f.Members) < 2 {
		t.Skipf("needs at least 2 members, the fleet has %d", len(f.Members))
	}
	victim := cmp.Or(in.Member, f.Members[len(f.Members)-1].Name)
	g.Expect(f.Member(victim)).NotTo(BeNil(), "no member %s", victim)
	var survivors []string
	for _, m := range f.MemberNames() {
		if m != victim {
			survivors = append(survivors, m)
		}
	}
	ns := CreateNamespace(ctx, CreateNamespaceInput{T: t, Fleet: f, Prefix: "e2e-unreachable"})
	DumpOnFailure(t, f, ns)
	members := f.MemberNames()

	db := NewDatabase(ns, "sturdy", 2, members)
	g.Expect(f.Hub.Client.Create(ctx, db)).To(Succeed())
	key := client.ObjectKeyFromObject(db)
	WaitForDatabaseReady(ctx, WaitForDatabaseReadyInput{T: t, Fleet: f, Key: key, Members: members, Replicas: 2})

	stopped := false
	t.Cleanup(func() {
		if !stopped {
			return
		}
		cctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		if err := f.Control.StartMember(cctx, victim); err != nil {
			t.Errorf("cleanup: starting %s again: %v", victim, err)
		}
	})
	t.Logf("stopping %s", victim)
	g.Expect(f.Control.StopMember(ctx, victim)).To(Succeed())
	stopped = true

	g.Eventually(func(g Gomega) {
		cur := GetDatabase(ctx, g, f, key)
		e := Entry(g, cur, victim)
		g.Expect(e.Phase).To(Equal(fleetv1alpha1.ClusterPhaseUnreachable))
		deg := Condition(cur.Status.Conditions, fleetv1alpha1.ConditionDegraded)
		g.Expect(deg.Status).To(Equal(metav1.ConditionTrue))
		g.Expect(deg.Message).To(ContainSubstring(victim))
		g.Expect(Condition(cur.Status.Conditions, fleetv1alpha1.ConditionReady).Status).To(Equal(metav1.ConditionFalse))
		g.Expect(cur.Status.Phase).To(Equal(fleetv1alpha1.PhaseDegraded))
		for _, m := range survivors {
			g.Expect(Entry(g, cur, m).Phase).To(Equal(fleetv1alpha1.ClusterPhaseReady), m)
		}
		mc := &fleetv1alpha1.MemberCluster{}
		g.Expect(f.Hub.Client.Get(ctx, types.NamespacedName{Name: victim}, mc)).To(Succeed())
		g.Expect(Condition(mc.Status.Conditions, fleetv1alpha1.MemberConditionReady).Status).NotTo(Equal(metav1.ConditionTrue))
	}).WithContext(ctx).WithTimeout(f.Intervals.Unreachable).WithPolling(f.Intervals.Poll).Should(Succeed())
	t.Logf("the hub reports %s Unreachable", victim)

	// The rest of the fleet moves on: a change to this Database, and a new one.
	gen := UpdateDatabase(ctx, t, f, key, func(d *fleetv1alpha1.Database) { d.Spec.Replicas = 3 })
	other := NewDatabase(ns, "elsewhere", 1, survivors)
	g.Expect(f.Hub.Client.Create(ctx, other)).To(Succeed())
	g.Eventually(func(g Gomega) {
		cur := GetDatabase(ctx, g, f, key)
		for _, m := range survivors {
			e := Entry(g, cur, m)
			g.Expect(e.Phase).To(Equal(fleetv1alpha1.ClusterPhaseReady), m)
			g.Expect(e.ObservedGeneration).To(Equal(gen), m)
			g.Expect(e.ReadyReplicas).To(BeEquivalentTo(3), m)
		}
		g.Expect(Entry(g, cur, victim).Phase).To(Equal(fleetv1alpha1.ClusterPhaseUnreachable))
	}).WithContext(ctx).WithTimeout(f.Intervals.Ready).WithPolling(f.Intervals.Poll).Should(Succeed())
	withGen := GetDatabase(ctx, g, f, key)
	for _, m := range survivors {
		ExpectMemberWorkload(ctx, ExpectMemberWorkloadInput{T: t, Fleet: f, Member: f.Member(m), DB: withGen, Replicas: 3})
	}
	WaitForDatabaseReady(ctx, WaitForDatabaseReadyInput{T: t, Fleet: f, Key: client.ObjectKeyFromObject(other), Members: survivors, Replicas: 1})
	// All of that happened while the member was down.
	g.Expect(f.Member(victim).Client.List(ctx, &corev1.NamespaceList{})).NotTo(Succeed(), "%s answered: it was not down", victim)
	g.Expect(Entry(g, GetDatabase(ctx, g, f, key), victim).Phase).To(Equal(fleetv1alpha1.ClusterPhaseUnreachable))

	t.Logf("starting %s again", victim)
	g.Expect(f.Control.StartMember(ctx, victim)).To(Succeed())
	stopped = false
	final := WaitForDatabaseReady(ctx, WaitForDatabaseReadyInput{T: t, Fleet: f, Key: key, Members: members, Replicas: 3})
	ExpectMemberWorkload(ctx, ExpectMemberWorkloadInput{T: t, Fleet: f, Member: f.Member(victim), DB: final, Replicas: 3})
	g.Eventually(func(g Gomega) {
		mc := &fleetv1alpha1.MemberCluster{}
		g.Expect(f.Hub.Client.Get(ctx, types.NamespacedName{Name: victim}, mc)).To(Succeed())
		g.Expect(Condition(mc.Status.Conditions, fleetv1alpha1.MemberConditionReady).Status).To(Equal(metav1.ConditionTrue))
	}).WithContext(ctx).WithTimeout(f.Intervals.Unreachable).WithPolling(f.Intervals.Poll).Should(Succeed())
}

// ---- 5. delete ----

// DeleteInput is the input of DeleteSpec.
type DeleteInput struct {
	T     testing.TB
	Fleet *Fleet
}

// DeleteSpec deletes a Ready Database (deletionPolicy Delete) and proves:
// the finalizer holds the hub object until the members are clean — the
// moment the Database is gone from the hub, no StatefulSet, Service,
// ConfigMap, Secret, PodDisruptionBudget or PersistentVolumeClaim with its
// fleetdb labels is left in any member — and soon after no pod either, the
// claims' volumes are released by the member's provisioner, and the hub's
// credentials Secret is garbage-collected.
func DeleteSpec(ctx context.Context, in DeleteInput) {
	t, f := in.T, in.Fleet
	g := NewWithT(t)
	ns := CreateNamespace(ctx, CreateNamespaceInput{T: t, Fleet: f, Prefix: "e2e-delete"})
	DumpOnFailure(t, f, ns)
	members := f.MemberNames()

	db := NewDatabase(ns, "doomed", 1, members)
	db.Spec.Backend = fleetv1alpha1.BackendStatefulSet // claims and pods: see CNPGDeleteSpec for the CloudNativePG backend
	db.Spec.DeletionPolicy = fleetv1alpha1.DeletionPolicyDelete
	g.Expect(f.Hub.Client.Create(ctx, db)).To(Succeed())
	key := client.ObjectKeyFromObject(db)
	ready := WaitForDatabaseReady(ctx, WaitForDatabaseReadyInput{T: t, Fleet: f, Key: key, Members: members, Replicas: 1})
	volumes := map[string][]string{}
	for _, m := range f.Members {
		ExpectMemberWorkload(ctx, ExpectMemberWorkloadInput{T: t, Fleet: f, Member: m, DB: ready, Replicas: 1})
		var pvcs corev1.PersistentVolumeClaimList
		g.Expect(m.Client.List(ctx, &pvcs, client.InNamespace(ns), OwnedSelector(key))).To(Succeed())
		for _, p := range pvcs.Items {
			volumes[m.Name] = append(volumes[m.Name], p.Spec.VolumeName)
		}
		g.Expect(volumes[m.Name]).To(HaveLen(1), m.Name)
	}

	DeleteDatabaseAndWait(ctx, DeleteDatabaseAndWaitInput{T: t, Fleet: f, Key: key})
	// No Eventually: the finalizer promises the members are clean when it goes.
	for _, m := range f.Members {
		left, err := ManagedObjects(ctx, m.Client, key)
		g.Expect(err).NotTo(HaveOccurred())
		delete(left, "Pod") // pods go with the StatefulSet's garbage collection, below
		g.Expect(left).To(BeEmpty(), "left in %s when the Database was gone from the hub", m.Name)
	}
	g.Eventually(func(g Gomega) {
		for _, m := range f.Members {
			left, err := ManagedObjects(ctx, m.Client, key)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(left).To(BeEmpty(), m.Name)
			for _, v := range volumes[m.Name] {
				err := m.Client.Get(ctx, types.NamespacedName{Name: v}, &corev1.PersistentVolume{})
				g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "volume %s in %s is still there (%v)", v, m.Name, err)
			}
		}
		err := f.Hub.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: key.Name + "-credentials"}, &corev1.Secret{})
		g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "the hub credentials Secret is still there (%v)", err)
	}).WithContext(ctx).WithTimeout(f.Intervals.Delete).WithPolling(f.Intervals.Poll).Should(Succeed())
}

// ---- 6. retain ----

// RetainInput is the input of RetainSpec.
type RetainInput struct {
	T     testing.TB
	Fleet *Fleet
}

// RetainSpec deletes a Ready Database with deletionPolicy Retain and proves:
// when the Database is gone from the hub, every member still has the same
// claims (same UIDs, still Bound) and the same credentials Secret (same UID
// and data), none of them carrying fleetdb's labels any more, while the
// workload — StatefulSet, Services, ConfigMap, PodDisruptionBudget — is
// gone, and the pods go with it.
func RetainSpec(ctx context.Context, in RetainInput) {
	t, f := in.T, in.Fleet
	g := NewWithT(t)
	ns := CreateNamespace(ctx, CreateNamespaceInput{T: t, Fleet: f, Prefix: "e2e-retain"})
	DumpOnFailure(t, f, ns)
	members := f.MemberNames()

	db := NewDatabase(ns, "precious", 1, members)
	db.Spec.Backend = fleetv1alpha1.BackendStatefulSet // claims and pods: see CNPGDeleteSpec for the CloudNativePG backend
	db.Spec.DeletionPolicy = fleetv1alpha1.DeletionPolicyRetain
	g.Expect(f.Hub.Client.Create(ctx, db)).To(Succeed())
	key := client.ObjectKeyFromObject(db)
	ready := WaitForDatabaseReady(ctx, WaitForDatabaseReadyInput{T: t, Fleet: f, Key: key, Members: members, Replicas: 1})
	secretKey := types.NamespacedName{Namespace: ns, Name: key.Name + "-credentials"}
	kept := map[string]map[string]types.UID{} // member → object → UID
	for _, m := range f.Members {
		ExpectMemberWorkload(ctx, ExpectMemberWorkloadInput{T: t, Fleet: f, Member: m, DB: ready, Replicas: 1})
		kept[m.Name] = map[string]types.UID{}
		for i := range 1 {
			pvc := &corev1.PersistentVolumeClaim{}
			name := fmt.Sprintf("data-%s-%d", key.Name, i)
			g.Expect(m.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, pvc)).To(Succeed())
			kept[m.Name]["claim "+name] = pvc.UID
		}
		s := &corev1.Secret{}
		g.Expect(m.Client.Get(ctx, secretKey, s)).To(Succeed())
		kept[m.Name]["secret"] = s.UID
	}

	DeleteDatabaseAndWait(ctx, DeleteDatabaseAndWaitInput{T: t, Fleet: f, Key: key})
	for _, m := range f.Members {
		left, err := ManagedObjects(ctx, m.Client, key)
		g.Expect(err).NotTo(HaveOccurred())
		delete(left, "Pod")
		g.Expect(left).To(BeEmpty(), "objects still labelled for the Database in %s", m.Name)
		for _, o := range []client.Object{&appsv1.StatefulSet{}, &corev1.Service{}, &policyv1.PodDisruptionBudget{}} {
			err := m.Client.Get(ctx, key, o)
			g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "%T %s in %s: %v", o, key, m.Name, err)
		}
		for _, name := range []string{key.Name + "-hl", key.Name + "-config"} {
			var o client.Object = &corev1.Service{}
			if strings.HasSuffix(name, "-config") {
				o = &corev1.ConfigMap{}
			}
			err := m.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, o)
			g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "%s in %s: %v", name, m.Name, err)
		}
		for i := range 1 {
			name := fmt.Sprintf("data-%s-%d", key.Name, i)
			pvc := &corev1.PersistentVolumeClaim{}
			g.Expect(m.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, pvc)).To(Succeed(), "claim %s in %s", name, m.Name)
			g.Expect(pvc.UID).To(Equal(kept[m.Name]["claim "+name]), "claim %s in %s was replaced", name, m.Name)
			g.Expect(pvc.DeletionTimestamp).To(BeNil(), "claim %s in %s is being deleted", name, m.Name)
			g.Expect(pvc.Status.Phase).To(Equal(corev1.ClaimBound))
			expectReleased(g, pvc.Labels, "claim "+name+" in "+m.Name)
		}
		s := &corev1.Secret{}
		g.Expect(m.Client.Get(ctx, secretKey, s)).To(Succeed(), "credentials in %s", m.Name)
		g.Expect(s.UID).To(Equal(kept[m.Name]["secret"]))
		g.Expect(s.DeletionTimestamp).To(BeNil())
		g.Expect(s.Data).To(HaveKey("password"))
		expectReleased(g, s.Labels, "credentials Secret in "+m.Name)
	}
	g.Eventually(func(g Gomega) {
		for _, m := range f.Members {
			var pods corev1.PodList
			g.Expect(m.Client.List(ctx, &pods, client.InNamespace(ns), PodSelector(key.Name))).To(Succeed())
			g.Expect(pods.Items).To(BeEmpty(), m.Name)
		}
	}).WithContext(ctx).WithTimeout(f.Intervals.Delete).WithPolling(f.Intervals.Poll).Should(Succeed())
}

func expectReleased(g Gomega, labels map[string]string, what string) {
	g.Expect(labels).NotTo(HaveKey(fleetv1alpha1.LabelManagedBy), what)
	g.Expect(labels).NotTo(HaveKey(fleetv1alpha1.LabelDatabaseName), what)
	g.Expect(labels).NotTo(HaveKey(fleetv1alpha1.LabelDatabaseUID), what)
}

// ---- 7. kubectl wait ----

// KubectlWaitInput is the input of KubectlWaitSpec.
type KubectlWaitInput struct {
	T     testing.TB
	Fleet *Fleet
}

// KubectlWaitSpec proves the application team's pipeline step works: right
// after creating a Database, `kubectl wait --for=condition=Ready
// database/<name>` (the fleet's kubectl) exits 0, at that moment the hub
// reports Ready on the current generation, and `kubectl get databases`
// shows the Ready and Phase printer columns.
func KubectlWaitSpec(ctx context.Context, in KubectlWaitInput) {
	t, f := in.T, in.Fleet
	g := NewWithT(t)
	ns := CreateNamespace(ctx, CreateNamespaceInput{T: t, Fleet: f, Prefix: "e2e-wait"})
	DumpOnFailure(t, f, ns)
	members := f.MemberNames()

	db := NewDatabase(ns, "waited", 2, members)
	g.Expect(f.Hub.Client.Create(ctx, db)).To(Succeed())
	timeout := f.Intervals.Ready
	out, err := kubectl(ctx, f, "-n", ns, "wait", "--for=condition=Ready", "database/"+db.Name, "--timeout="+timeout.String())
	g.Expect(err).NotTo(HaveOccurred(), "kubectl wait: %s", out)
	g.Expect(out).To(ContainSubstring("condition met"))

	cur := GetDatabase(ctx, g, f, client.ObjectKeyFromObject(db))
	ready := Condition(cur.Status.Conditions, fleetv1alpha1.ConditionReady)
	g.Expect(ready.Status).To(Equal(metav1.ConditionTrue))
	g.Expect(ready.ObservedGeneration).To(Equal(cur.Generation))

	out, err = kubectl(ctx, f, "-n", ns, "get", "databases", db.Name, "--no-headers")
	g.Expect(err).NotTo(HaveOccurred(), "kubectl get: %s", out)
	g.Expect(strings.Fields(out)).To(ContainElements("postgres", "2", fmt.Sprintf("%d/%d", len(members), len(members)), "Ready"), out)
}

func kubectl(ctx context.Context, f *Fleet, args ...string) (string, error) {
	// A discovery cache of this process only: kubectl's default one
	// (~/.kube/cache, 6 h) is keyed by host:port, and kwokctl reuses ports, so
	// a member of an earlier fleet (with CloudNativePG's databases.postgresql.cnpg.io)
	// on the hub's port would make "database/x" name the wrong kind.
	cacheDir, err := kubectlCacheDir()
	if err != nil {
		return "", err
	}
	cmd := exec.CommandContext(ctx, f.Kubectl, append([]string{"--kubeconfig", f.Hub.Kubeconfig, "--cache-dir", cacheDir}, args...)...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err = cmd.Run()
	return out.String(), err
}

// kubectlCacheDir is the discovery cache of this test process's kubectl calls.
var kubectlCacheDir = sync.OnceValues(func() (string, error) {
	return os.MkdirTemp("", "fleetdb-e2e-kubectl-cache-")
})
