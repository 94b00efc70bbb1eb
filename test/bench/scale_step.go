package main

import (
	"context"
	"fmt"
	"math"
	"strings"
	"sync"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleetv1alpha1 "github.com/fleetdb/fleetdb/apis/v1alpha1"
	"github.com/fleetdb/fleetdb/member"
	"github.com/fleetdb/fleetdb/test/bench/scale"
)

const (
	mib = 1 << 20
	// growTimeout bounds a step's growth; syncTimeout a restart's resync.
	growTimeout = 15 * time.Minute
	syncTimeout = 10 * time.Minute
)

// requestClasses are the keys of bench.hubMetrics that count the hub's
// own API requests (rest_client_requests_total).
var requestClasses = []string{"client reads to hub", "client writes to hub", "client reads to members", "client writes to members"}

// grower grows one fleet's Databases step by step and measures each step.
type grower struct {
	b     *bench
	sc    *scaleConfig
	flips *readyFlips
	// n Databases exist (db-00000 … ), Database i on member i mod N.
	n int
	// cpuBase is the CPU of the hub processes killed by the restarts.
	cpuBase float64
	// sample numbers the single-change Databases (never reused: the
	// watches keep the first time a name was seen).
	sample   int
	restarts int
}

func (g *grower) member(i int) string { return g.b.members[i%len(g.b.members)] }

// step grows the fleet to d Databases and measures it.
func (g *grower) step(ctx context.Context, d int) (*scale.Step, error) {
	b := g.b
	st := &scale.Step{Members: len(b.members), Databases: d}
	fail := func(err error) (*scale.Step, error) {
		st.Error = err.Error()
		return st, err
	}
	if dead := needed(b.fleet.DeadComponents()); len(dead) > 0 {
		return fail(fmt.Errorf("the fleet lost %s (not the hub's doing)", strings.Join(dead, ", ")))
	}
	logf("scale: %d members: growing %d → %d Databases", len(b.members), g.n, d)
	p0, _ := readProc(b.hub.Pid())
	start := time.Now()
	created, err := g.grow(ctx, d)
	st.Created = created
	st.GrowSeconds = round1(time.Since(start).Seconds())
	if err != nil {
		return fail(err)
	}
	if err := b.settle(ctx, 3*time.Second, 2*time.Minute); err != nil {
		return fail(err)
	}
	p1, _ := readProc(b.hub.Pid())
	st.GrowCPUSeconds = round2(p1.CPUSeconds - p0.CPUSeconds)
	logf("scale: %d Databases Ready in %.1f s; measuring at rest for %s", d, st.GrowSeconds, g.sc.rest)

	st.LoadAvg1 = loadAvg1()
	st.HeapMiB = round1(heapMin(ctx, b.hub, 10, 5*time.Second) / mib)
	if p, err := readProc(b.hub.Pid()); err == nil {
		st.RSSMiB, st.PeakRSSMiB = round1(float64(p.RSSBytes)/mib), round1(float64(p.HWMBytes)/mib)
	}
	if err := g.rest(ctx, st); err != nil {
		return fail(err)
	}
	if p, err := readProc(b.hub.Pid()); err == nil {
		st.HubCPUSeconds = round2(g.cpuBase + p.CPUSeconds)
	}
	if st.Change, err = g.changes(ctx, st.Rest); err != nil {
		return fail(err)
	}
	if st.Restart, err = g.restart(ctx); err != nil {
		return fail(err)
	}
	return st, nil
}

func round2(v float64) float64 { return math.Round(v*100) / 100 }

// grow creates Databases g.n … d-1 and waits until each is Ready on the hub.
func (g *grower) grow(ctx context.Context, d int) (int, error) {
	b := g.b
	from := g.n
	if d <= from {
		return 0, nil
	}
	if err := pool(ctx, d-from, g.sc.workers, func(i int) error {
		j := from + i
		return b.driver.Create(ctx, b.newDatabase(dbName(j), []string{g.member(j)}, 1))
	}); err != nil {
		return 0, err
	}
	g.n = d
	left := map[string]bool{}
	for j := from; j < d; j++ {
		left[dbName(j)] = true
	}
	return d - from, waitAll(ctx, growTimeout, "every Database Ready on the hub", left, func(name string) bool {
		_, ok := b.hubReady(name, 1)
		return ok
	})
}

func dbName(i int) string { return fmt.Sprintf("db-%05d", i) }

// waitAll waits until done holds for every name of left, polling every
// 250 ms (a 10 ms poll over a thousand names costs the hub's CPU).
func waitAll(ctx context.Context, timeout time.Duration, what string, left map[string]bool, done func(string) bool) error {
	deadline := time.Now().Add(timeout)
	for {
		for name := range left {
			if done(name) {
				delete(left, name)
			}
		}
		if len(left) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("timed out after %s waiting for %s (%d left)", timeout, what, len(left))
		}
		if err := sleep(ctx, 250*time.Millisecond); err != nil {
			return err
		}
	}
}

// rest measures the hub over a quiet interval.
func (g *grower) rest(ctx context.Context, st *scale.Step) error {
	b := g.b
	mk, err := b.mark(ctx, fmt.Sprintf("scale %d×%d at rest", len(b.members), st.Databases))
	if err != nil {
		return err
	}
	if err := sleep(ctx, g.sc.rest); err != nil {
		return err
	}
	wp, err := b.endPhase(ctx, mk, 0, 0)
	if err != nil {
		return err
	}
	secs := time.Since(mk.at).Seconds()
	st.Rest = scale.Rest{
		Seconds: round1(secs), CPUCores: math.Round(wp.HubCPUSeconds/secs*10000) / 10000,
		RequestsPerSecond:    map[string]float64{},
		AuditWritesToHub:     wp.HubToHub,
		AuditWritesToMembers: wp.HubToMembers,
	}
	for _, k := range requestClasses {
		st.Rest.RequestsPerSecond[k] = round2(wp.HubMetrics[k] / secs)
	}
	return nil
}

// changes creates sc.samples Databases one at a time, each beside the
// floor's direct apply of the same objects to the same member (alternating
// which goes first), then removes them.
func (g *grower) changes(ctx context.Context, rest scale.Rest) (*scale.Change, error) {
	b := g.b
	k := g.sc.samples
	if k < 1 {
		return nil, nil
	}
	logf("scale: %d single creates beside the floor", k)
	mk, err := b.mark(ctx, "scale single creates")
	if err != nil {
		return nil, err
	}
	var fProp, dProp []time.Duration
	var names []string
	for i := range k {
		name := fmt.Sprintf("one-%04d", g.sample)
		g.sample++
		m := []string{g.member(g.n + i)}
		names = append(names, name)
		// The minimal floor applies the Cluster only: its Namespace is made
		// beforehand, outside the timing, as the bench's warm-up does.
		if err := g.directNamespace(ctx, m[0]); err != nil {
			return nil, err
		}
		direct := func() error {
			t0 := time.Now()
			if err := b.directApply(ctx, floorMinimal, name, m, replicas, 1); err != nil {
				return err
			}
			dn := floorName(name, floorMinimal)
			if err := waitFor(ctx, oneTimeout, "direct "+dn, func() bool { return b.readyAll(nsDirect, dn, m, replicas) }); err != nil {
				return err
			}
			dProp = append(dProp, b.since(nsDirect, dn, m, t0, seenAt)...)
			return nil
		}
		fleet := func() error {
			if err := b.driver.Create(ctx, b.newDatabase(name, m, 1)); err != nil {
				return err
			}
			t0 := time.Now()
			if err := waitFor(ctx, oneTimeout, "fleetdb "+name+" Ready", func() bool {
				_, ok := b.hubReady(name, 1)
				return ok && b.readyAll(nsFleet, name, m, replicas)
			}); err != nil {
				return err
			}
			fProp = append(fProp, b.since(nsFleet, name, m, t0, seenAt)...)
			return nil
		}
		first, second := direct, fleet // fleetdb and the floor take turns going first
		if i%2 == 1 {
			first, second = fleet, direct
		}
		if err := first(); err != nil {
			return nil, err
		}
		if err := second(); err != nil {
			return nil, err
		}
	}
	wp, err := b.endPhase(ctx, mk, k, time.Minute)
	if err != nil {
		return nil, err
	}
	secs := time.Since(mk.at).Seconds()
	f, fl := newDist(fProp), newDist(dProp)
	c := &scale.Change{
		Samples: k, P50Ms: f.P50, P99Ms: f.P99, FloorP50Ms: fl.P50, FloorP99Ms: fl.P99,
		RatioP50: ratio(f.P50, fl.P50), RatioP99: ratio(f.P99, fl.P99),
		RequestsPerChange: map[string]float64{},
		CPUMsPerChange:    round1(max(0, wp.HubCPUSeconds-rest.CPUCores*secs) * 1000 / float64(k)),
		AuditWritesPerChange: round2(float64(wp.HubToHub+wp.HubToMembers-
			int(float64(rest.AuditWritesToHub+rest.AuditWritesToMembers)/max(rest.Seconds, 1)*secs)) / float64(k)),
		PhaseSeconds: round1(secs),
	}
	for _, key := range requestClasses {
		c.RequestsPerChange[key] = round2(max(0, wp.HubMetrics[key]-rest.RequestsPerSecond[key]*secs) / float64(k))
	}
	logf("scale: propagation P50 %.0f ms (floor %.0f), P99 %.0f ms (floor %.0f)", c.P50Ms, c.FloorP50Ms, c.P99Ms, c.FloorP99Ms)
	return c, g.removeSamples(ctx, names)
}

// removeSamples deletes the single-change Databases and the floor's objects.
func (g *grower) removeSamples(ctx context.Context, names []string) error {
	b := g.b
	left := map[string]bool{}
	for i, name := range names {
		db := &fleetv1alpha1.Database{ObjectMeta: metav1.ObjectMeta{Namespace: nsFleet, Name: name}}
		if err := b.driver.Delete(ctx, db); err != nil {
			return err
		}
		if err := b.directDelete(ctx, floorMinimal, name, []string{g.member(g.n + i)}); err != nil {
			return err
		}
		left[name] = true
	}
	if err := waitAll(ctx, oneTimeout, "the single-change Databases gone", left, func(name string) bool {
		_, ok := b.hubGone(name)
		return ok
	}); err != nil {
		return err
	}
	return b.settle(ctx, 3*time.Second, 2*time.Minute)
}

// readyFlips counts Databases that leave Ready=True while counting is on.
type readyFlips struct {
	mu       sync.Mutex
	last     map[string]bool
	counting bool
	n        int
}

func (f *readyFlips) observe(obj any, deleted bool) {
	db, ok := eventObject[*fleetv1alpha1.Database](obj)
	if !ok {
		return
	}
	key := db.Namespace + "/" + db.Name
	ready := !deleted && meta.IsStatusConditionTrue(db.Status.Conditions, fleetv1alpha1.ConditionReady)
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.counting && f.last[key] && !ready && !deleted {
		f.n++
	}
	f.last[key] = ready
	if deleted {
		delete(f.last, key)
	}
}

func (f *readyFlips) start() {
	f.mu.Lock()
	f.counting, f.n = true, 0
	f.mu.Unlock()
}

func (f *readyFlips) stop() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.counting = false
	return f.n
}

func startFlipWatch(ctx context.Context, b *bench, f *readyFlips) error {
	hc := rest.CopyConfig(b.hubCfg)
	hc.UserAgent = "fleetdb-bench-watch"
	return startInformer(ctx, hc, b.scheme, &fleetv1alpha1.Database{}, nil, f.observe)
}

// restart kills the hub (SIGKILL), starts it again and measures how long
// it takes to be back in sync and what that costs.
func (g *grower) restart(ctx context.Context) (*scale.Restart, error) {
	b := g.b
	if err := b.settle(ctx, 3*time.Second, time.Minute); err != nil {
		return nil, err
	}
	versions, err := g.memberVersions(ctx)
	if err != nil {
		return nil, err
	}
	before, err := b.audit.snapshot()
	if err != nil {
		return nil, err
	}
	if p, err := readProc(b.hub.Pid()); err == nil {
		g.cpuBase += p.CPUSeconds
	}
	g.flips.start()
	logf("scale: killing the hub and starting it again with %d Databases", g.n)
	if err := b.hub.Kill(); err != nil {
		return nil, err
	}
	g.restarts++
	var extra []string
	if b.cfg.hubArgs != "" {
		extra = strings.Fields(b.cfg.hubArgs)
	}
	start := time.Now()
	hub, err := startHub(ctx, b.hubBin, b.fleet.HubKubeconfig, b.cfg.probeInterval, extra,
		fmt.Sprintf("%s-hub-%d.log", b.cfg.fleetDir, g.restarts))
	if err != nil {
		return nil, err
	}
	b.hub = hub
	r := &scale.Restart{
		MetricsUpSeconds: round2(time.Since(start).Seconds()),
		InSync: "the new hub has reconciled every Database, finished a member sync (synced or observed) of every " +
			"member×Database pair, and its database and member-sync work queues are empty",
	}
	// Scraping the hub's metrics costs it CPU: every 200 ms, not every 10.
	for !g.inSync(ctx, r) {
		if time.Since(start) > syncTimeout {
			return nil, fmt.Errorf("the restarted hub not in sync after %s (%.0f member syncs, %.0f reconciles, %d Databases)",
				syncTimeout, r.MemberSyncs, r.Reconciles, g.n)
		}
		if err := sleep(ctx, 200*time.Millisecond); err != nil {
			return nil, err
		}
	}
	r.SyncSeconds = round2(time.Since(start).Seconds())
	if err := b.settle(ctx, 3*time.Second, 2*time.Minute); err != nil {
		return nil, err
	}
	r.ReadyFlips = g.flips.stop()
	after, err := g.memberVersions(ctx)
	if err != nil {
		return nil, err
	}
	r.MemberObjects = len(versions)
	for k, v := range versions {
		if after[k] != v {
			r.MemberObjectsChanged++
		}
	}
	return r, g.restartCosts(ctx, before, r)
}

// memberVersions lists fleetdb's objects in every member (the kinds a
// Database renders to) and returns their resourceVersions by
// member/kind/name.
func (g *grower) memberVersions(ctx context.Context) (map[string]string, error) {
	b := g.b
	out := map[string]string{}
	sel := client.MatchingLabels{fleetv1alpha1.LabelManagedBy: fleetv1alpha1.ManagedByValue}
	for _, m := range b.members {
		for _, l := range []client.ObjectList{member.NewCNPGClusterList(), &appsv1.StatefulSetList{}, &corev1.SecretList{}, &corev1.ServiceList{},
			&corev1.ConfigMapList{}, &policyv1.PodDisruptionBudgetList{}} {
			if err := b.direct[m].List(ctx, l, client.InNamespace(nsFleet), sel); err != nil {
				return nil, fmt.Errorf("listing %T in %s: %w", l, m, err)
			}
			items, err := meta.ExtractList(l)
			if err != nil {
				return nil, err
			}
			for _, it := range items {
				o, ok := it.(client.Object)
				if !ok {
					continue
				}
				out[fmt.Sprintf("%s/%T/%s", m, l, o.GetName())] = o.GetResourceVersion()
			}
		}
	}
	return out, nil
}

// inSync reads the new hub's metrics: see scale.Restart.InSync.
func (g *grower) inSync(ctx context.Context, r *scale.Restart) bool {
	s, err := hubMetrics(ctx, g.b.hub)
	if err != nil {
		return false
	}
	syncs := sumProm(s, "fleetdb_member_sync_duration_seconds_count", func(l map[string]string) bool {
		return l["outcome"] == "synced" || l["outcome"] == "observed"
	})
	recs := sumProm(s, "controller_runtime_reconcile_total", func(l map[string]string) bool { return l["controller"] == "database" })
	depth := sumProm(s, "workqueue_depth", func(l map[string]string) bool { return l["name"] == "database" || l["name"] == "member-sync" })
	r.MemberSyncs, r.Reconciles = syncs, recs
	// Each Database is on one member: as many pairs as Databases.
	return syncs >= float64(g.n) && recs >= float64(g.n) && depth == 0
}

// restartCosts records the new hub's writes, requests, CPU and memory since
// it started, and the Databases not Ready after it.
func (g *grower) restartCosts(ctx context.Context, before writeCounts, r *scale.Restart) error {
	b := g.b
	after, err := b.audit.snapshot()
	if err != nil {
		return err
	}
	d := after.sub(before)
	isHub := func(k writeKey) bool { return k.Agent == agentHub }
	r.AuditWritesToHub = d.total(func(k writeKey) bool { return isHub(k) && k.Cluster == "hub" })
	r.AuditWritesToMembers = d.total(func(k writeKey) bool { return isHub(k) && k.Cluster != "hub" })
	r.AuditByResource = d.byResource(isHub)
	r.Requests = map[string]float64{}
	m := b.hubMetrics(ctx)
	for _, k := range requestClasses {
		r.Requests[k] = m[k]
	}
	if p, err := readProc(b.hub.Pid()); err == nil {
		r.CPUSeconds, r.PeakRSSMiB = round2(p.CPUSeconds), round1(float64(p.HWMBytes)/mib)
	}
	var dbs fleetv1alpha1.DatabaseList
	if err := b.driver.List(ctx, &dbs, client.InNamespace(nsFleet)); err != nil {
		return err
	}
	for i := range dbs.Items {
		if !meta.IsStatusConditionTrue(dbs.Items[i].Status.Conditions, fleetv1alpha1.ConditionReady) {
			r.NotReadyAfter++
		}
	}
	logf("scale: back in sync %.1f s after the start (metrics up at %.1f s); writes to hub %d, to members %d (%d of %d member objects changed); %d not Ready, %d Ready flips",
		r.SyncSeconds, r.MetricsUpSeconds, r.AuditWritesToHub, r.AuditWritesToMembers, r.MemberObjectsChanged, r.MemberObjects, r.NotReadyAfter, r.ReadyFlips)
	return nil
}

// directNamespace makes sure the floor's namespace exists in member m.
func (g *grower) directNamespace(ctx context.Context, m string) error {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: nsDirect}}
	if err := g.b.direct[m].Create(ctx, ns); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("%s: creating namespace %s: %w", m, nsDirect, err)
	}
	return nil
}
