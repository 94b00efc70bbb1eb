package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/apimachinery/pkg/types"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleetv1alpha1 "github.com/fleetdb/fleetdb/apis/v1alpha1"
	"github.com/fleetdb/fleetdb/member"
	"github.com/fleetdb/fleetdb/test/localfleet"
)

const (
	nsFleet  = "bench-fleetdb" // hub namespace of fleetdb's Databases (and so their member namespace)
	nsDirect = "bench-direct"  // member namespace of the baseline's objects
	hubNS    = "fleetdb-system"
	replicas = int32(2)
	// directManagedBy replaces app.kubernetes.io/managed-by=fleetdb on the
	// baseline's objects, so that the hub (whose member caches select that
	// label, and whose sweeper collects unknown fleetdb objects) never sees them.
	directManagedBy = "fleetdb-bench-direct"
	// oneTimeout bounds each wait of the one-at-a-time measurements.
	oneTimeout = 3 * time.Minute
)

type bench struct {
	cfg config
	rep *Report

	fleet  *localfleet.Fleet
	scheme *runtime.Scheme
	hubBin string
	hub    *localfleet.HubProcess

	hubCfg  *rest.Config
	driver  client.Client            // the bench on the hub (user agent fleetdb-bench-driver)
	direct  map[string]client.Client // the baseline in each member (fleetdb-bench-direct)
	members []string
	hosts   map[string]string // API server host:port -> cluster name

	mw    map[string]*memberWatch
	hw    *hubWatch
	audit *auditCounter
	creds map[string][]byte

	// peer is the running peer (OCM work agents); nil: none.
	peer *ocmPeer

	watchCancel context.CancelFunc
	proxy       *slowProxy
	fleetLog    *os.File
	// counting is set for the write-count fleet (audit on): fleetdb only, no
	// floor and no latency figure that the targets judge.
	counting bool
}

func (b *bench) teardown() {
	logf("tearing down")
	b.downFleet()
	if b.hubBin != "" {
		_ = os.RemoveAll(filepath.Dir(b.hubBin))
	}
	if b.fleetLog != nil {
		_ = b.fleetLog.Close()
	}
}

// downFleet stops the watches, the hub and the proxy, and takes the fleet down.
func (b *bench) downFleet() {
	b.stopPeer()
	if b.watchCancel != nil {
		b.watchCancel()
		b.watchCancel = nil
	}
	if b.hub != nil {
		b.hub.Stop()
		b.hub = nil
		logf("hub stopped")
	}
	if b.proxy != nil {
		b.proxy.close()
		b.proxy = nil
	}
	if b.fleet != nil {
		if err := b.fleet.Down(); err != nil {
			logf("hack/fleet.sh down: %v", err)
		}
		b.fleet = nil
	}
}

func (b *bench) run(ctx context.Context) error {
	cfg := b.cfg
	b.rep.Config = ReportConfig{
		Members: cfg.members, Burst: cfg.burst, BurstPlacement: cfg.burstPlacement, BurstWorkers: cfg.burstWorkers,
		Samples: cfg.samples, Rest: cfg.rest.String(), ProbeInterval: cfg.probeInterval.String(), Replicas: replicas,
		SlowDelay: cfg.slowDelay.String(), HubArgs: cfg.hubArgs, WriteSamples: cfg.writeSamples,
	}
	if err := os.MkdirAll(cfg.fleetDir, 0o755); err != nil {
		return err
	}
	fleetLog, err := os.Create(filepath.Join(filepath.Dir(cfg.fleetDir), filepath.Base(cfg.fleetDir)+"-fleet.log"))
	if err != nil {
		return err
	}
	b.fleetLog = fleetLog // closed after teardown

	// Build the hub first: a compile error should not cost a fleet. The
	// binary keeps its name: it is the hub's user agent in the audit logs.
	binDir, err := os.MkdirTemp("", "fleetdb-bench-hub-")
	if err != nil {
		return err
	}
	b.hubBin = filepath.Join(binDir, "fleetdb-hub")
	logf("building the hub")
	if err := localfleet.BuildHub(ctx, cfg.root, b.hubBin, os.Stderr); err != nil {
		return err
	}

	// The latency fleet: no audit log on any API server.
	if err := b.fleetPhases(ctx, false); err != nil {
		return err
	}
	if !cfg.skipIsolation {
		if err := b.isolation(ctx); err != nil {
			return err
		}
	}
	b.hubTotals()
	if cfg.writeSamples > 0 {
		// The write-count fleet: a second fleet, audit logs on, after the first is gone.
		logf("latency phases done: taking the fleet down for the write-count fleet (audit on)")
		b.downFleet()
		b.counting = true
		if err := b.fleetPhases(ctx, true); err != nil {
			return err
		}
	}
	b.finalFigures()
	return nil
}

// upFleet starts a fleet (with audit logs or without), the bench's clients
// and watches, and the namespace of fleetdb's Databases.
func (b *bench) upFleet(ctx context.Context, audit bool) error {
	cfg := b.cfg
	logf("starting a fleet of a hub and %d members under %s, audit log %v (log %s)", cfg.members, cfg.fleetDir, audit, b.fleetLog.Name())
	start := time.Now()
	var err error
	for attempt := 1; ; attempt++ {
		if b.fleet, err = startFleet(ctx, cfg, audit, b.fleetLog); err != nil {
			return err
		}
		// A kwok controller that lost its port to another fleet created at
		// the same moment exits, and its member never reports a Cluster
		// healthy: take such a fleet down and start it again, once.
		dead := deadKwok(cfg.fleetDir, b.fleet.MemberNames(), cfg.prefix)
		if len(dead) == 0 {
			break
		}
		if attempt == 2 {
			return fmt.Errorf("kwok is not running in %v (another fleet took its port?)", dead)
		}
		logf("kwok is not running in %v: recreating the fleet", dead)
		b.downFleet()
	}
	logf("fleet up in %s", time.Since(start).Round(time.Second))
	b.members = b.fleet.MemberNames()
	if err := b.clients(); err != nil {
		return err
	}
	b.audit = nil
	if audit {
		files := map[string]string{"hub": b.fleet.AuditLog("hub")}
		for _, m := range b.members {
			files[m] = b.fleet.AuditLog(m)
		}
		b.audit = newAuditCounter(files)
		if _, err := b.audit.snapshot(); err != nil {
			return err
		}
		for c, p := range files {
			if _, err := os.Stat(p); err != nil {
				return fmt.Errorf("no audit log for %s at %s: %w", c, p, err)
			}
		}
	}
	wctx, cancel := context.WithCancel(ctx)
	b.watchCancel = cancel
	if err := b.startWatches(wctx); err != nil {
		return err
	}
	return b.ensureNamespace(ctx, nsFleet)
}

// deadKwok lists the members of the fleet under dir whose kwok controller
// process is not running.
func deadKwok(dir string, members []string, prefix string) []string {
	running := map[string]bool{}
	procs, _ := os.ReadDir("/proc")
	for _, p := range procs {
		b, err := os.ReadFile(filepath.Join("/proc", p.Name(), "cmdline"))
		if err != nil {
			continue
		}
		exe, _, _ := strings.Cut(string(b), "\x00")
		if strings.HasSuffix(exe, "/bin/kwok-controller") {
			running[filepath.Dir(filepath.Dir(exe))] = true
		}
	}
	var dead []string
	for _, m := range members {
		if !running[filepath.Join(dir, "kwok", "clusters", prefix+"-"+m)] {
			dead = append(dead, m)
		}
	}
	return dead
}

// fleetPhases brings a fleet up (audit logs on or off), starts the hub and
// the members, warms up and runs the one-at-a-time and burst phases on it.
func (b *bench) fleetPhases(ctx context.Context, audit bool) error {
	if err := b.upFleet(ctx, audit); err != nil {
		return err
	}
	if err := b.startHubAndMembers(ctx); err != nil {
		return err
	}
	if !audit && b.cfg.peer == peerName {
		if err := b.startPeer(ctx); err != nil {
			return err
		}
	}
	if err := b.warmUp(ctx); err != nil {
		return err
	}
	if err := b.oneAtATime(ctx); err != nil {
		return err
	}
	return b.burstPhase(ctx)
}

// clients builds the bench's clients of the hub and the members.
func (b *bench) clients() error {
	b.scheme = runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(b.scheme); err != nil {
		return err
	}
	if err := fleetv1alpha1.AddToScheme(b.scheme); err != nil {
		return err
	}
	b.hosts = map[string]string{}
	load := func(path, ua, name string) (*rest.Config, error) {
		c, err := clientcmd.BuildConfigFromFlags("", path)
		if err != nil {
			return nil, err
		}
		c.UserAgent = ua
		// The floor is not throttled by the client.
		c.QPS, c.Burst = 1000, 2000
		if u, err := url.Parse(c.Host); err == nil {
			b.hosts[u.Host] = name
		}
		return c, nil
	}
	var err error
	b.hubCfg, err = load(b.fleet.HubKubeconfig, uaDriver, "hub")
	if err != nil {
		return err
	}
	b.driver, err = client.New(b.hubCfg, client.Options{Scheme: b.scheme})
	if err != nil {
		return err
	}
	b.direct = map[string]client.Client{}
	for _, m := range b.members {
		c, err := load(memberKubeconfig(b.fleet, m), uaDirect, m)
		if err != nil {
			return err
		}
		if b.direct[m], err = client.New(c, client.Options{Scheme: b.scheme}); err != nil {
			return err
		}
	}
	pw := make([]byte, 16)
	_, _ = rand.Read(pw)
	b.creds = map[string][]byte{member.CredentialsUsernameKey: []byte("bench"), member.CredentialsPasswordKey: []byte(hex.EncodeToString(pw))}
	return nil
}

func (b *bench) startWatches(ctx context.Context) error {
	sel, err := labels.Parse(fleetv1alpha1.LabelManagedBy + " in (" + fleetv1alpha1.ManagedByValue + "," + directManagedBy + ")")
	if err != nil {
		return err
	}
	b.mw = map[string]*memberWatch{}
	for _, m := range b.members {
		w := &memberWatch{name: m, sts: map[string]*stsTrack{}}
		b.mw[m] = w
		c, err := clientcmd.BuildConfigFromFlags("", memberKubeconfig(b.fleet, m))
		if err != nil {
			return err
		}
		c.UserAgent = "fleetdb-bench-watch"
		if err := startInformer(ctx, c, b.scheme, &appsv1.StatefulSet{}, sel, w.observe); err != nil {
			return fmt.Errorf("watching %s: %w", m, err)
		}
		if err := startInformer(ctx, c, b.scheme, member.NewCNPGCluster(), sel, w.observe); err != nil {
			return fmt.Errorf("watching %s: %w", m, err)
		}
	}
	b.hw = &hubWatch{dbs: map[string]*dbTrack{}}
	hc := rest.CopyConfig(b.hubCfg)
	hc.UserAgent = "fleetdb-bench-watch"
	return startInformer(ctx, hc, b.scheme, &fleetv1alpha1.Database{}, nil, b.hw.observe)
}

func (b *bench) ensureNamespace(ctx context.Context, name string) error {
	err := b.driver.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}})
	if apierrors.IsAlreadyExists(err) {
		return nil
	}
	return err
}

// startHubAndMembers runs the hub first with no member registered, then
// registers the members: the difference is the hub's cost per member.
func (b *bench) startHubAndMembers(ctx context.Context) error {
	if b.counting {
		// The write-count fleet: the hub starts with its members registered.
		if err := b.startHubProcess(ctx); err != nil {
			return err
		}
		return waitFor(ctx, 2*time.Minute, "every MemberCluster Ready", func() bool { return b.membersReady(ctx) })
	}
	var saved []fleetv1alpha1.MemberCluster
	for _, m := range b.members {
		mc := &fleetv1alpha1.MemberCluster{}
		if err := b.driver.Get(ctx, client.ObjectKey{Name: m}, mc); err != nil {
			return fmt.Errorf("MemberCluster %s: %w", m, err)
		}
		saved = append(saved, *mc)
		if err := b.driver.Delete(ctx, mc); err != nil {
			return err
		}
	}
	if err := b.startHubProcess(ctx); err != nil {
		return err
	}
	hub := b.hub
	if err := sleep(ctx, 5*time.Second); err != nil {
		return err
	}
	heap0 := heapMin(ctx, hub, 10, 3*time.Second)
	p0, _ := readProc(hub.Pid())

	start := time.Now()
	for _, mc := range saved {
		n := &fleetv1alpha1.MemberCluster{ObjectMeta: metav1.ObjectMeta{Name: mc.Name, Labels: mc.Labels}, Spec: mc.Spec}
		if err := b.driver.Create(ctx, n); err != nil {
			return err
		}
	}
	if err := waitFor(ctx, 2*time.Minute, "every MemberCluster Ready", func() bool { return b.membersReady(ctx) }); err != nil {
		return err
	}
	joined := time.Since(start)
	logf("%d members Ready on the hub in %s", len(b.members), joined.Round(time.Millisecond))
	if err := sleep(ctx, 5*time.Second); err != nil {
		return err
	}
	heapN := heapMin(ctx, hub, 10, 3*time.Second)
	pN, _ := readProc(hub.Pid())
	n := float64(len(b.members))
	b.rep.scalar("members registered → all MemberClusters Ready", "ms", float64(joined.Milliseconds()), nil, "")
	b.rep.scalar("hub heap, no member", "MiB", heap0/(1<<20), nil, "go_memstats_heap_alloc_bytes, least of 10 samples")
	b.rep.scalar(fmt.Sprintf("hub heap, %d members idle", len(b.members)), "MiB", heapN/(1<<20), nil, "")
	b.rep.scalar("hub heap per member", "MiB", (heapN-heap0)/n/(1<<20), nil, "(heap with N idle members − heap with none) / N")
	b.rep.scalar("hub RSS, no member", "MiB", float64(p0.RSSBytes)/(1<<20), nil, "VmRSS")
	b.rep.scalar(fmt.Sprintf("hub RSS, %d members idle", len(b.members)), "MiB", float64(pN.RSSBytes)/(1<<20), nil, "")
	b.rep.scalar("hub RSS per member", "MiB", float64(pN.RSSBytes-p0.RSSBytes)/n/(1<<20), nil, "")
	return nil
}

// startHubProcess runs the hub on the current fleet.
func (b *bench) startHubProcess(ctx context.Context) error {
	var extra []string
	if b.cfg.hubArgs != "" {
		extra = strings.Fields(b.cfg.hubArgs)
	}
	suffix := "-hub.log"
	if b.counting {
		suffix = "-hub-writes.log"
	}
	logPath := filepath.Join(filepath.Dir(b.cfg.fleetDir), filepath.Base(b.cfg.fleetDir)+suffix)
	logf("starting the hub (log %s)", logPath)
	hub, err := startHub(ctx, b.hubBin, b.fleet.HubKubeconfig, b.cfg.probeInterval, extra, logPath)
	if err != nil {
		return err
	}
	b.hub = hub
	return nil
}

func (b *bench) membersReady(ctx context.Context) bool {
	for _, m := range b.members {
		mc := &fleetv1alpha1.MemberCluster{}
		if err := b.driver.Get(ctx, client.ObjectKey{Name: m}, mc); err != nil {
			return false
		}
		if !meta.IsStatusConditionTrue(mc.Status.Conditions, fleetv1alpha1.MemberConditionReady) {
			return false
		}
	}
	return true
}

func sleep(ctx context.Context, d time.Duration) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(d):
		return nil
	}
}

// ---- the objects ----

func (b *bench) newDatabase(name string, placement []string, maxUnavailable int32) *fleetv1alpha1.Database {
	return &fleetv1alpha1.Database{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: nsFleet},
		Spec: fleetv1alpha1.DatabaseSpec{
			Engine:         fleetv1alpha1.EnginePostgres,
			Replicas:       replicas,
			Storage:        fleetv1alpha1.StorageSpec{Size: resource.MustParse("1Gi")},
			Placement:      fleetv1alpha1.PlacementSpec{ClusterNames: placement},
			Rollout:        fleetv1alpha1.RolloutSpec{MaxUnavailable: maxUnavailable},
			DeletionPolicy: fleetv1alpha1.DeletionPolicyDelete,
			// The peers take no backup before deleting: neither does the benchmark.
			Backup: &fleetv1alpha1.BackupSpec{FinalBackup: fleetv1alpha1.FinalBackupSkip},
		},
	}
}

// directObjects are the bodies the hub would send for a Database like
// newDatabase's, in the baseline's namespace: member.Render, then
// member.ApplyBody, as member.Apply does; only managed-by is relabelled.
func (b *bench) directObjects(name, cluster string, reps int32, generation int64) ([]*unstructured.Unstructured, error) {
	db := b.newDatabase(name, b.members, 1)
	db.Namespace = nsDirect
	db.UID = types.UID("direct-" + name)
	db.Generation = generation
	db.Spec.Replicas = reps
	db.Spec.Teardown.UnreachableTimeout = &metav1.Duration{Duration: 10 * time.Minute}
	objs, err := member.Render(member.Params{Database: db, Cluster: cluster, Credentials: b.creds})
	if err != nil {
		return nil, err
	}
	out := make([]*unstructured.Unstructured, 0, len(objs))
	for _, o := range objs {
		body, err := member.ApplyBody(o, nil)
		if err != nil {
			return nil, err
		}
		if err := relabel(body); err != nil {
			return nil, err
		}
		out = append(out, body)
	}
	return out, nil
}

// relabel sets managed-by to directManagedBy wherever it says fleetdb
// (labels, selectors, templates), so that the hub never takes the
// baseline's objects for its own.
func relabel(body *unstructured.Unstructured) error {
	raw, err := body.MarshalJSON()
	if err != nil {
		return err
	}
	from := fmt.Sprintf("%q:%q", fleetv1alpha1.LabelManagedBy, fleetv1alpha1.ManagedByValue)
	to := fmt.Sprintf("%q:%q", fleetv1alpha1.LabelManagedBy, directManagedBy)
	return body.UnmarshalJSON(bytes.ReplaceAll(raw, []byte(from), []byte(to)))
}

// floorKind is one way to apply a Database's objects straight to the members
// (the floor fleetdb is measured against).
type floorKind string

const (
	// floorMinimal applies only the object that creates the workload (the
	// CloudNativePG Cluster, or the StatefulSet on that backend) to every
	// member in parallel: the fastest direct apply a user could script that
	// starts the database (the Namespace exists; the Cluster waits for its
	// Secret as it would for a late one). Latency ratios are to this floor.
	floorMinimal floorKind = "minimal"
	// floorParallel applies every object of a member at once (all members in
	// parallel): the full set, without ordering.
	floorParallel floorKind = "parallel"
	// floorSequential is the floor before issue 13: every object of a member
	// one after the other in render order (the Namespace included), all
	// members in parallel.
	floorSequential floorKind = "sequential"
)

// floorKinds are measured one at a time, in this order (rotated per sample).
var floorKinds = []floorKind{floorMinimal, floorParallel, floorSequential}

// floorName is the floor kind's name for the Database name: each kind
// applies its own objects in nsDirect.
func floorName(name string, k floorKind) string {
	switch k {
	case floorMinimal:
		return name + "-min"
	case floorParallel:
		return name + "-all"
	case floorPeerOCM:
		return name + "-ocm"
	}
	return name
}

// floorKinds are the floor kinds, and the peer when it runs, one at a time
// beside fleetdb (rotated per sample).
func (b *bench) floorKinds() []floorKind {
	if b.peer == nil {
		return floorKinds
	}
	return append(append([]floorKind{}, floorKinds...), floorPeerOCM)
}

// isWorkload reports whether u is the object that creates the workload.
func isWorkload(u *unstructured.Unstructured) bool {
	gvk := u.GroupVersionKind()
	return gvk == member.CNPGClusterGVK || (gvk.Group == "apps" && gvk.Kind == "StatefulSet")
}

// floorObjects are the floor kind's objects of directObjects, in order.
func floorObjects(objs []*unstructured.Unstructured, k floorKind) []*unstructured.Unstructured {
	var out []*unstructured.Unstructured
	for _, u := range objs {
		switch {
		case k == floorMinimal && !isWorkload(u):
		case k == floorParallel && u.GetKind() == "Namespace":
		default:
			out = append(out, u)
		}
	}
	return out
}

// directApply is the floor: the rendered objects of floor kind k (named
// floorName(name, k)) applied with server-side apply (member.ServerSideApply,
// the hub's own request) to every member of placement in parallel, by one
// plain client per member (not throttled): in render order one after the
// other (sequential), or all at once (minimal, parallel).
func (b *bench) directApply(ctx context.Context, k floorKind, name string, placement []string, reps int32, gen int64) error {
	if k == floorPeerOCM {
		return b.peerApply(ctx, name, placement, reps, gen)
	}
	name = floorName(name, k)
	var wg sync.WaitGroup
	errs := make([]error, len(placement))
	for i, m := range placement {
		wg.Go(func() {
			all, err := b.directObjects(name, m, reps, gen)
			if err != nil {
				errs[i] = err
				return
			}
			objs := floorObjects(all, k)
			apply := func(u *unstructured.Unstructured) error {
				if err := member.ServerSideApply(ctx, b.direct[m], u, directManagedBy); err != nil {
					return fmt.Errorf("%s: applying %s %s: %w", m, u.GetKind(), u.GetName(), err)
				}
				return nil
			}
			if k != floorSequential {
				errs[i] = eachParallel(objs, apply)
				return
			}
			for _, u := range objs {
				if errs[i] = apply(u); errs[i] != nil {
					return
				}
			}
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

// eachParallel runs f on every element at once and joins the errors.
func eachParallel[T any](xs []T, f func(T) error) error {
	var wg sync.WaitGroup
	errs := make([]error, len(xs))
	for i, x := range xs {
		wg.Go(func() { errs[i] = f(x) })
	}
	wg.Wait()
	return errors.Join(errs...)
}

// directDelete deletes floor kind k's objects of name in every member of
// placement in parallel (background propagation), volume claims included:
// the minimal floor its workload object only, the parallel floor every
// object at once, the sequential floor one after the other.
func (b *bench) directDelete(ctx context.Context, k floorKind, name string, placement []string) error {
	if k == floorPeerOCM {
		return b.peerDelete(ctx, name, placement)
	}
	name = floorName(name, k)
	var wg sync.WaitGroup
	errs := make([]error, len(placement))
	for i, m := range placement {
		wg.Go(func() {
			c := b.direct[m]
			bg := client.PropagationPolicy(metav1.DeletePropagationBackground)
			meta := func(n string) metav1.ObjectMeta { return metav1.ObjectMeta{Name: n, Namespace: nsDirect} }
			cluster := member.NewCNPGCluster()
			cluster.SetNamespace(nsDirect)
			cluster.SetName(name)
			objs := []client.Object{cluster, &appsv1.StatefulSet{ObjectMeta: meta(name)}}
			if k != floorMinimal {
				objs = append(objs,
					&policyv1.PodDisruptionBudget{ObjectMeta: meta(name)},
					&corev1.Service{ObjectMeta: meta(name)},
					&corev1.Service{ObjectMeta: meta(name + "-hl")},
					&corev1.ConfigMap{ObjectMeta: meta(name + "-config")},
					&corev1.Secret{ObjectMeta: meta(name + "-credentials")})
			}
			del := func(o client.Object) error {
				if err := c.Delete(ctx, o, bg); err != nil && !apierrors.IsNotFound(err) {
					return err
				}
				return nil
			}
			if k == floorSequential {
				for _, o := range objs {
					if errs[i] = del(o); errs[i] != nil {
						return
					}
				}
			} else if errs[i] = eachParallel(objs, del); errs[i] != nil {
				return
			}
			if err := c.DeleteAllOf(ctx, &corev1.PersistentVolumeClaim{}, client.InNamespace(nsDirect),
				client.MatchingLabels{fleetv1alpha1.LabelDatabaseNamespace: nsDirect, fleetv1alpha1.LabelDatabaseName: name}); err != nil {
				errs[i] = err
			}
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

// leftovers counts the objects of the Databases ns/names left in the members
// of placement: StatefulSets and claims, and with all the other kinds too.
func (b *bench) leftovers(ctx context.Context, ns string, names []string, placement []string, all bool) (int, error) {
	nameIn, err := labels.NewRequirement(fleetv1alpha1.LabelDatabaseName, selection.In, names)
	if err != nil {
		return 0, err
	}
	nsIs, err := labels.NewRequirement(fleetv1alpha1.LabelDatabaseNamespace, selection.Equals, []string{ns})
	if err != nil {
		return 0, err
	}
	sel := client.MatchingLabelsSelector{Selector: labels.NewSelector().Add(*nsIs, *nameIn)}
	lists := func() []client.ObjectList {
		l := []client.ObjectList{member.NewCNPGClusterList(), &appsv1.StatefulSetList{}, &corev1.PersistentVolumeClaimList{}}
		if all {
			l = append(l, &corev1.ServiceList{}, &corev1.ConfigMapList{}, &corev1.SecretList{}, &policyv1.PodDisruptionBudgetList{})
		}
		return l
	}
	n := 0
	for _, m := range placement {
		for _, l := range lists() {
			if err := b.direct[m].List(ctx, l, client.InNamespace(ns), sel); err != nil {
				return 0, err
			}
			n += meta.LenList(l)
		}
	}
	return n, nil
}

// ---- waiting on the watches ----

func key(ns, name string) string { return ns + "/" + name }

// seenAll reports whether every member of placement has seen the StatefulSet.
func (b *bench) seenAll(ns, name string, placement []string) bool {
	for _, m := range placement {
		if _, ok := b.mw[m].get(key(ns, name)); !ok {
			return false
		}
	}
	return true
}

// readyAll reports whether every member of placement has seen n ready replicas.
func (b *bench) readyAll(ns, name string, placement []string, n int32) bool {
	for _, m := range placement {
		t, ok := b.mw[m].get(key(ns, name))
		if !ok {
			return false
		}
		if _, ok := t.ready[n]; !ok {
			return false
		}
	}
	return true
}

func (b *bench) goneAll(ns, name string, placement []string) bool {
	for _, m := range placement {
		t, ok := b.mw[m].get(key(ns, name))
		if ok && t.gone.IsZero() {
			return false
		}
	}
	return true
}

func (b *bench) hubReady(name string, gen int64) (time.Time, bool) {
	t, ok := b.hw.get(key(nsFleet, name))
	if !ok {
		return time.Time{}, false
	}
	r, ok := t.ready[gen]
	return r, ok
}

func (b *bench) hubGone(name string) (time.Time, bool) {
	t, ok := b.hw.get(key(nsFleet, name))
	if !ok || t.gone.IsZero() {
		return time.Time{}, false
	}
	return t.gone, true
}

// since collects, for every member of placement, pick(track) - t0.
func (b *bench) since(ns, name string, placement []string, t0 time.Time, pick func(stsTrack) time.Time) []time.Duration {
	var out []time.Duration
	for _, m := range placement {
		if t, ok := b.mw[m].get(key(ns, name)); ok {
			if at := pick(t); !at.IsZero() {
				out = append(out, at.Sub(t0))
			}
		}
	}
	return out
}

// latest is the latest pick(track) over placement.
func (b *bench) latest(ns, name string, placement []string, pick func(stsTrack) time.Time) time.Time {
	var last time.Time
	for _, m := range placement {
		if t, ok := b.mw[m].get(key(ns, name)); ok {
			if at := pick(t); at.After(last) {
				last = at
			}
		}
	}
	return last
}

func seenAt(t stsTrack) time.Time { return t.seen }
func goneAt(t stsTrack) time.Time { return t.gone }
func readyAt(n int32) func(stsTrack) time.Time {
	return func(t stsTrack) time.Time { return t.ready[n] }
}
func replicasAt(n int32) func(stsTrack) time.Time {
	return func(t stsTrack) time.Time { return t.replicas[n] }
}

// ---- write accounting ----

type phaseMark struct {
	name   string
	at     time.Time
	counts writeCounts
	hub    map[string]float64
	cpu    float64
}

// hubMetrics picks, from the hub's metrics endpoint, what explains its
// latency and cost: its own API requests by target and method
// (rest_client_requests_total), reconciles, errors, queue waits and member
// sync durations.
func (b *bench) hubMetrics(ctx context.Context) map[string]float64 {
	out := map[string]float64{}
	s, err := hubMetrics(ctx, b.hub)
	if err != nil {
		return out
	}
	for _, x := range s {
		l := x.Labels
		switch x.Name {
		case "rest_client_requests_total":
			target := "members"
			if b.hosts[l["host"]] == "hub" {
				target = "hub"
			}
			kind := "reads"
			switch l["method"] {
			case "POST", "PUT", "PATCH", "DELETE":
				kind = "writes"
			}
			out["client "+kind+" to "+target] += x.Value
			if target == "hub" && l["method"] == "PUT" {
				// Lease renewals (a sharded hub's liveness and fences,
				// leader election): settle must not wait for them.
				out["client PUTs to hub"] += x.Value
			}
		case "controller_runtime_reconcile_total":
			out["reconciles "+l["controller"]] += x.Value
		case "controller_runtime_reconcile_errors_total":
			out["reconcile errors "+l["controller"]] += x.Value
		case "workqueue_queue_duration_seconds_sum":
			out["queue wait sum "+l["name"]] += x.Value
		case "workqueue_queue_duration_seconds_count":
			out["queue wait count "+l["name"]] += x.Value
		case "fleetdb_member_sync_duration_seconds_sum":
			out["member sync sum"] += x.Value
		case "fleetdb_member_sync_duration_seconds_count":
			out["member syncs"] += x.Value
		case "fleetdb_member_sync_errors_total":
			out["member sync errors "+l["reason"]] += x.Value
		}
	}
	return out
}

func (b *bench) mark(ctx context.Context, name string) (*phaseMark, error) {
	var c writeCounts
	if b.audit != nil {
		var err error
		if c, err = b.audit.snapshot(); err != nil {
			return nil, err
		}
	}
	p, _ := readProc(b.hub.Pid())
	return &phaseMark{name: name, at: time.Now(), counts: c, hub: b.hubMetrics(ctx), cpu: p.CPUSeconds}, nil
}

// hubDelta turns two hubMetrics snapshots into the phase's figures.
func hubDelta(before, after map[string]float64) map[string]float64 {
	d := map[string]float64{}
	for k, v := range after {
		if dv := v - before[k]; dv != 0 {
			d[k] = dv
		}
	}
	out := map[string]float64{}
	for k, v := range d {
		switch {
		case strings.HasPrefix(k, "queue wait sum "):
			name := strings.TrimPrefix(k, "queue wait sum ")
			if n := d["queue wait count "+name]; n > 0 {
				out["mean queue wait ms "+name] = round1(v / n * 1000)
			}
		case strings.HasPrefix(k, "queue wait count "):
		case k == "member sync sum":
			if n := d["member syncs"]; n > 0 {
				out["mean member sync ms"] = round1(v / n * 1000)
			}
		default:
			out[k] = v
		}
	}
	return out
}

// settle waits until the hub has made no write for quiet (at most max), so
// that the writes a change causes are all inside its phase. It counts the
// hub's writes from its own rest_client_requests_total, which matched the
// audit logs exactly in every phase of every run, and needs no audit log.
// PUTs to the hub are left out: the hub writes Leases that way (a sharded
// hub renews its liveness Lease every 3 s, which kept settle from ever
// seeing 3 quiet seconds: every phase of a --sharding run waited its full
// maxWait). A change's own PUTs (a deletion's tombstone ConfigMap) come
// amid its other writes, which settle still waits for.
func (b *bench) settle(ctx context.Context, quiet, maxWait time.Duration) error {
	deadline := time.Now().Add(maxWait)
	last := -1.0
	lastChange := time.Now()
	for time.Now().Before(deadline) {
		m := b.hubMetrics(ctx)
		n := m["client writes to hub"] - m["client PUTs to hub"] + m["client writes to members"]
		if n != last {
			last, lastChange = n, time.Now()
		} else if time.Since(lastChange) >= quiet {
			return nil
		}
		if err := sleep(ctx, 250*time.Millisecond); err != nil {
			return err
		}
	}
	b.rep.Notes = append(b.rep.Notes, fmt.Sprintf("the hub kept writing for %s after a phase (settle gave up)", maxWait))
	return nil
}

// endPhase closes the phase m of changes Database changes. With settleWithin
// > 0 it first waits (that long at most) until the hub has made no write for
// 3 s, so that the writes a change causes all count in its phase.
func (b *bench) endPhase(ctx context.Context, m *phaseMark, changes int, settleWithin time.Duration) (*WritePhase, error) {
	if settleWithin > 0 {
		if err := b.settle(ctx, 3*time.Second, settleWithin); err != nil {
			return nil, err
		}
	}
	end, err := b.mark(ctx, m.name)
	if err != nil {
		return nil, err
	}
	if b.audit == nil {
		// The latency fleet counts no writes: only what the hub's metrics say.
		b.rep.HubPhases = append(b.rep.HubPhases, &WritePhase{
			Phase: m.name, Changes: changes, HubMetrics: hubDelta(m.hub, end.hub),
			HubClientSide: int(end.hub["client writes to hub"] + end.hub["client writes to members"] - m.hub["client writes to hub"] - m.hub["client writes to members"]),
			HubCPUSeconds: round1((end.cpu-m.cpu)*100) / 100, Seconds: round1(end.at.Sub(m.at).Seconds()),
		})
		return nil, nil
	}
	d := end.counts.sub(m.counts)
	isHub := func(k writeKey) bool { return k.Agent == agentHub }
	wp := &WritePhase{
		Phase:         m.name,
		Changes:       changes,
		HubToHub:      d.total(func(k writeKey) bool { return isHub(k) && k.Cluster == "hub" }),
		HubToMembers:  d.total(func(k writeKey) bool { return isHub(k) && k.Cluster != "hub" }),
		HubLiveness:   d.total(func(k writeKey) bool { return k.Agent == agentHubLiveness }),
		Direct:        d.total(func(k writeKey) bool { return k.Agent == agentDirect }),
		Others:        d.total(func(k writeKey) bool { return k.Agent == agentOther || k.Agent == agentDriver }),
		HubClientSide: int(end.hub["client writes to hub"] + end.hub["client writes to members"] - m.hub["client writes to hub"] - m.hub["client writes to members"]),
		HubMetrics:    hubDelta(m.hub, end.hub),
		HubByResource: d.byResource(isHub),
		HubCPUSeconds: round1((end.cpu-m.cpu)*100) / 100,
		Seconds:       round1(end.at.Sub(m.at).Seconds()),
		PerChange:     map[string]float64{},
	}
	if changes > 0 {
		wp.PerChange["hub"] = round1(float64(wp.HubToHub+wp.HubToMembers) / float64(changes))
		wp.PerChange["hubToHub"] = round1(float64(wp.HubToHub) / float64(changes))
		wp.PerChange["hubToMembers"] = round1(float64(wp.HubToMembers) / float64(changes))
		wp.PerChange["direct"] = round1(float64(wp.Direct) / float64(changes))
	}
	b.rep.Writes = append(b.rep.Writes, wp)
	return wp, nil
}

// serverWrites sums apiserver_request_total over write verbs on every API
// server of the fleet (all clients).
func (b *bench) serverWrites(ctx context.Context) (int, error) {
	total := 0.0
	cfgs := map[string]*rest.Config{"hub": b.hubCfg}
	for _, m := range b.members {
		c, err := clientcmd.BuildConfigFromFlags("", memberKubeconfig(b.fleet, m))
		if err != nil {
			return 0, err
		}
		cfgs[m] = c
	}
	for name, c := range cfgs {
		c = rest.CopyConfig(c)
		c.UserAgent = "fleetdb-bench-watch"
		c.GroupVersion = &corev1.SchemeGroupVersion
		c.NegotiatedSerializer = clientgoscheme.Codecs.WithoutConversion()
		rc, err := rest.UnversionedRESTClientFor(c)
		if err != nil {
			return 0, err
		}
		raw, err := rc.Get().AbsPath("/metrics").DoRaw(ctx)
		if err != nil {
			return 0, fmt.Errorf("metrics of %s: %w", name, err)
		}
		total += sumProm(parseProm(string(raw)), "apiserver_request_total", func(l map[string]string) bool {
			switch l["verb"] {
			case "POST", "PUT", "PATCH", "DELETE", "APPLY", "DELETECOLLECTION":
				return true
			}
			return false
		})
	}
	return int(total), nil
}
