package main

// The scale mode (-scale): for each member count a fleet of its own, grown
// in Database steps; per step the hub's CPU, memory and API requests at rest,
// a few single changes beside the floor, and a hub restart. See
// docs/reports/scale.md.

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/fleetdb/fleetdb/test/bench/scale"
	"github.com/fleetdb/fleetdb/test/localfleet"
	"github.com/fleetdb/fleetdb/test/repo"
)

// memberMiB is what a kwok member of the local fleet costs in memory, and
// reserveMiB what the scale mode leaves free for everyone else.
const (
	memberMiB  = 512
	reserveMiB = 4096
	// serviceRange is the members' Service IP range: room for 65,000.
	serviceRange = "10.0.0.0/16"
)

type scaleConfig struct {
	on        bool
	members   string
	databases string
	samples   int
	rest      time.Duration
	workers   int
	timeout   time.Duration
}

// scaleFlags registers the scale mode's flags.
func scaleFlags() *scaleConfig {
	sc := &scaleConfig{}
	flag.BoolVar(&sc.on, "scale", false, "scale mode: growing fleets instead of the default run (docs/reports/scale.md)")
	flag.StringVar(&sc.members, "scale-members", "1,5,10,20", "scale mode: member counts, one fleet each, comma-separated")
	flag.StringVar(&sc.databases, "scale-databases", "100,500,1000", "scale mode: Database counts each fleet is grown to, comma-separated, increasing")
	flag.IntVar(&sc.samples, "scale-samples", 10, "scale mode: single creates per step, each beside the floor")
	flag.DurationVar(&sc.rest, "scale-rest", 30*time.Second, "scale mode: quiet interval per step for the costs at rest")
	flag.IntVar(&sc.workers, "scale-workers", 16, "scale mode: goroutines creating a step's Databases")
	flag.DurationVar(&sc.timeout, "scale-timeout", 0, "scale mode: start no fleet or step after this long (0: no limit); what is left is reported as not run")
	return sc
}

func parseInts(s string) ([]int, error) {
	var out []int
	for f := range strings.SplitSeq(s, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		n, err := strconv.Atoi(f)
		if err != nil || n < 1 {
			return nil, fmt.Errorf("%q is not a positive count", f)
		}
		out = append(out, n)
	}
	if len(out) == 0 {
		return nil, errors.New("no count given")
	}
	return out, nil
}

// runScale is the scale mode's main: it returns the exit code.
func runScale(cfg config, sc *scaleConfig) int {
	members, steps, err := sc.counts()
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		return 2
	}
	root, err := repo.Root()
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		return 2
	}
	cfg.root = root
	ctrllog.SetLogger(logr.Discard())
	if cfg.fleetDir == "" {
		cfg.fleetDir = filepath.Join(root, ".cache", "bench-scale-fleet")
	}
	cfg.fleetDir, _ = filepath.Abs(cfg.fleetDir)
	if cfg.prefix == "fleetdb-bench" {
		cfg.prefix = "fleetdb-scale"
	}
	if cfg.out == "" {
		cfg.out = filepath.Join(root, "test", "bench", "results", "scale-"+time.Now().Format("20060102-150405")+".json")
	}
	if err := os.MkdirAll(filepath.Dir(cfg.out), 0o755); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	run := &scale.Run{
		Started: time.Now(), Source: sourceState(root),
		Machine: scale.Machine{
			NProc: runtime.NumCPU(), MemTotalMiB: memTotalMiB(), GoVersion: runtime.Version(),
			OtherKubeAPIServers: otherControlPlanes(cfg.fleetDir),
		},
		Config: scale.Config{
			Members: members, Databases: steps, Samples: sc.samples, Rest: sc.rest.String(),
			ProbeInterval: cfg.probeInterval.String(), Workers: sc.workers, HubArgs: cfg.hubArgs,
			Placement: "spread: Database i on member i mod N, one member each (clusterNames), postgres, 2 replicas, 1Gi",
		},
	}
	loadCtx, stopLoad := context.WithCancel(context.Background())
	load := &loadSampler{}
	loadDone := make(chan struct{})
	go func() { load.run(loadCtx, 5*time.Second); close(loadDone) }()

	s := &scaler{cfg: cfg, sc: sc, run: run, steps: steps, deadline: deadlineOf(sc.timeout)}
	runErr := s.all(ctx, members)
	stopLoad()
	<-loadDone
	run.Finished = time.Now()
	run.Machine.LoadAvg1 = minMeanMax(load.samples)
	if runErr != nil {
		run.Error = runErr.Error()
	}
	if err := run.Write(cfg.out); err != nil {
		fmt.Fprintln(os.Stderr, "bench: writing results:", err)
		return 1
	}
	printScale(run)
	fmt.Printf("\nresults: %s\nplots:   go run ./test/bench/scaleplot -in %s -out <dir>\n", cfg.out, cfg.out)
	if runErr != nil {
		return 1
	}
	return 0
}

// counts parses and checks the member and Database counts.
func (sc *scaleConfig) counts() (members, steps []int, err error) {
	members, err = parseInts(sc.members)
	if err == nil && slicesMax(members) > 50 {
		err = errors.New("-scale-members: at most 50")
	}
	steps, err2 := parseInts(sc.databases)
	for i := 1; err2 == nil && i < len(steps); i++ {
		if steps[i] <= steps[i-1] {
			err2 = errors.New("-scale-databases must increase")
		}
	}
	return members, steps, errors.Join(err, err2)
}

// minMeanMax summarises the load samples (nil when there are none).
func minMeanMax(samples []float64) []float64 {
	if len(samples) == 0 {
		return nil
	}
	mn, mx, sum := samples[0], samples[0], 0.0
	for _, v := range samples {
		mn, mx, sum = min(mn, v), max(mx, v), sum+v
	}
	return []float64{mn, round1(sum / float64(len(samples))), mx}
}

func deadlineOf(d time.Duration) time.Time {
	if d <= 0 {
		return time.Time{}
	}
	return time.Now().Add(d)
}

func slicesMax(s []int) int {
	m := 0
	for _, v := range s {
		m = max(m, v)
	}
	return m
}

// scaler runs the fleets one after another, never two at once.
type scaler struct {
	cfg      config
	sc       *scaleConfig
	run      *scale.Run
	steps    []int
	deadline time.Time
	hubBin   string
}

func (s *scaler) late() bool { return !s.deadline.IsZero() && time.Now().After(s.deadline) }

// save writes what was measured so far: a failure later keeps it.
func (s *scaler) save() {
	if err := s.run.Write(s.cfg.out); err != nil {
		logf("writing %s: %v", s.cfg.out, err)
	}
}

func (s *scaler) all(ctx context.Context, members []int) error {
	binDir, err := os.MkdirTemp("", "fleetdb-bench-hub-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(binDir)
	s.hubBin = filepath.Join(binDir, "fleetdb-hub")
	logf("building the hub")
	if err := localfleet.BuildHub(ctx, s.cfg.root, s.hubBin, os.Stderr); err != nil {
		return err
	}
	for _, n := range members {
		if ctx.Err() != nil {
			s.run.Skipped = append(s.run.Skipped, scale.Skip{Members: n, Reason: "interrupted"})
			continue
		}
		if s.late() {
			s.run.Skipped = append(s.run.Skipped, scale.Skip{Members: n, Reason: "-scale-timeout " + s.sc.timeout.String() + " passed"})
			continue
		}
		avail := memAvailableMiB()
		if need := int64(n*memberMiB + reserveMiB); avail < need {
			reason := fmt.Sprintf("MemAvailable %d MiB < %d members × %d MiB + %d MiB left free", avail, n, memberMiB, reserveMiB)
			logf("skipping %d members: %s", n, reason)
			s.run.Skipped = append(s.run.Skipped, scale.Skip{Members: n, Reason: reason})
			s.save()
			continue
		}
		f := &scale.Fleet{Members: n, MemAvailableMiB: avail}
		s.run.Fleets = append(s.run.Fleets, f)
		if err := s.fleet(ctx, f); err != nil {
			f.Error = err.Error()
			logf("%d members: %v", n, err)
		}
		s.save()
	}
	return ctx.Err()
}

// fleet starts a fleet of f.Members members and the hub, grows it through
// every step, and always tears it down.
func (s *scaler) fleet(ctx context.Context, f *scale.Fleet) error {
	cfg := s.cfg
	cfg.members = f.Members
	b := &bench{cfg: cfg, rep: &Report{}, hubBin: s.hubBin}
	defer func() {
		b.hubBin = "" // shared by the fleets: removed by all
		b.teardown()
	}()
	if err := os.MkdirAll(cfg.fleetDir, 0o755); err != nil {
		return err
	}
	fleetLog, err := os.Create(cfg.fleetDir + "-fleet.log")
	if err != nil {
		return err
	}
	b.fleetLog = fleetLog
	logf("scale: starting a fleet of a hub and %d members under %s (log %s)", f.Members, cfg.fleetDir, fleetLog.Name())
	start := time.Now()
	if b.fleet, err = startWholeFleet(ctx, cfg, fleetLog); err != nil {
		return err
	}
	f.FleetUpSeconds = round1(time.Since(start).Seconds())
	logf("scale: fleet up in %s", time.Since(start).Round(time.Second))
	b.members = b.fleet.MemberNames()
	if err := b.clients(); err != nil {
		return err
	}
	files := map[string]string{"hub": b.fleet.AuditLog("hub")}
	for _, m := range b.members {
		files[m] = b.fleet.AuditLog(m)
	}
	b.audit = newAuditCounter(files)
	if _, err := b.audit.snapshot(); err != nil {
		return err
	}
	wctx, cancel := context.WithCancel(ctx)
	b.watchCancel = cancel
	if err := b.startWatches(wctx); err != nil {
		return err
	}
	flips := &readyFlips{last: map[string]bool{}}
	if err := startFlipWatch(wctx, b, flips); err != nil {
		return err
	}
	if err := b.ensureNamespace(ctx, nsFleet); err != nil {
		return err
	}
	if err := s.startHub(ctx, b, f); err != nil {
		return err
	}
	g := &grower{b: b, sc: s.sc, flips: flips}
	for _, d := range s.steps {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if s.late() {
			s.run.Notes = append(s.run.Notes, fmt.Sprintf("%d members: step %d Databases not run: -scale-timeout %s passed", f.Members, d, s.sc.timeout))
			continue
		}
		st, err := g.step(ctx, d)
		if st != nil {
			f.Steps = append(f.Steps, st)
			s.save()
		}
		if err != nil {
			return fmt.Errorf("step %d Databases: %w", d, err)
		}
	}
	return nil
}

// startWholeFleet brings the fleet up, and again (three times at most) when
// a component died at start: kwokctl picks its ports by probing, and another
// fleet created at the same time on a shared machine can bind one first,
// leaving, say, a member without the kwok controller that reports its
// workloads healthy (localfleet.DeadComponents).
func startWholeFleet(ctx context.Context, cfg config, log *os.File) (*localfleet.Fleet, error) {
	for attempt := 1; ; attempt++ {
		f, err := localfleet.Start(ctx, localfleet.Options{
			RepoRoot: cfg.root, Dir: cfg.fleetDir, Prefix: cfg.prefix, Members: cfg.members, Log: log,
			ExtraEnv: []string{
				"FLEET_AUDIT_POLICY=" + filepath.Join(cfg.fleetDir, "audit-policy.yaml"),
				// kube-apiserver's default Service range, a /24, holds 254
				// Services: a member holds one per CloudNativePG Database.
				"FLEET_KWOKCTL_ARGS=--extra-args kube-apiserver=service-cluster-ip-range=" + serviceRange,
			},
			Files:    map[string][]byte{"audit-policy.yaml": []byte(auditPolicy)},
			Attempts: 3,
		})
		if err != nil {
			return f, err
		}
		// A component that cannot bind its port exits within seconds.
		if err := sleep(ctx, 5*time.Second); err != nil {
			return f, err
		}
		dead := needed(f.DeadComponents())
		if len(dead) == 0 {
			return f, nil
		}
		if attempt == 3 {
			return f, fmt.Errorf("the fleet came up without %s three times", strings.Join(dead, ", "))
		}
		logf("scale: the fleet came up without %s (a port taken meanwhile?): starting it again", strings.Join(dead, ", "))
		if err := f.Down(); err != nil {
			return nil, err
		}
	}
}

// needed drops the hub cluster's kwok controller and scheduler from dead
// components: the hub cluster runs no pods, and the scale mode needs them not.
func needed(dead []string) []string {
	var out []string
	for _, d := range dead {
		if d != "hub/kwok-controller" && d != "hub/kube-scheduler" {
			out = append(out, d)
		}
	}
	return out
}

// startHub runs the hub on the fleet's registered members and waits until
// every MemberCluster is Ready.
func (s *scaler) startHub(ctx context.Context, b *bench, f *scale.Fleet) error {
	var extra []string
	if b.cfg.hubArgs != "" {
		extra = strings.Fields(b.cfg.hubArgs)
	}
	start := time.Now()
	hub, err := startHub(ctx, b.hubBin, b.fleet.HubKubeconfig, b.cfg.probeInterval, extra, b.cfg.fleetDir+"-hub.log")
	if err != nil {
		return err
	}
	b.hub = hub
	if err := waitFor(ctx, 5*time.Minute, "every MemberCluster Ready", func() bool { return b.membersReady(ctx) }); err != nil {
		return err
	}
	f.MembersReadySeconds = round1(time.Since(start).Seconds())
	return nil
}

func memAvailableMiB() int64 {
	b, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return 0
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "MemAvailable:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return kb / 1024
		}
	}
	return 0
}

func loadAvg1() float64 {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return 0
	}
	v, _ := strconv.ParseFloat(f[0], 64)
	return v
}

// printScale prints one line per step.
func printScale(r *scale.Run) {
	fmt.Printf("\nfleetdb scale run: nproc %d, %d MiB, load avg (1 min) min/mean/max %v, source %s\n",
		r.Machine.NProc, r.Machine.MemTotalMiB, r.Machine.LoadAvg1, r.Source)
	fmt.Printf("%7s %9s %6s %9s %8s %8s %8s %9s %9s %8s %8s %9s %9s %6s\n", "members", "databases", "load", "cpu rest", "heap MiB",
		"rss MiB", "peak MiB", "req/s", "req/chg", "P50 ×", "P99 ×", "restart s", "rst wr→m", "wr→hub")
	for _, f := range r.Fleets {
		for _, st := range f.Steps {
			var p50, p99, rq float64
			if c := st.Change; c != nil {
				p50, p99 = c.RatioP50, c.RatioP99
				for _, v := range c.RequestsPerChange {
					rq += v
				}
			}
			var rs float64
			var rwm, rwh int
			if x := st.Restart; x != nil {
				rs, rwm, rwh = x.SyncSeconds, x.AuditWritesToMembers, x.AuditWritesToHub
			}
			req := 0.0
			for _, v := range st.Rest.RequestsPerSecond {
				req += v
			}
			fmt.Printf("%7d %9d %6.1f %9.3f %8.1f %8.1f %8.1f %9.2f %9.1f %8.2f %8.2f %9.1f %9d %6d\n", st.Members, st.Databases, st.LoadAvg1,
				st.Rest.CPUCores, st.HeapMiB, st.RSSMiB, st.PeakRSSMiB, req, rq, p50, p99, rs, rwm, rwh)
			if st.Error != "" {
				fmt.Printf("  error: %s\n", st.Error)
			}
		}
		if f.Error != "" {
			fmt.Printf("  %d members: error: %s\n", f.Members, f.Error)
		}
	}
	for _, sk := range r.Skipped {
		fmt.Printf("not run: %d members: %s\n", sk.Members, sk.Reason)
	}
	for _, n := range r.Notes {
		fmt.Printf("note: %s\n", n)
	}
	if r.Error != "" {
		fmt.Printf("\nERROR: %s\n", r.Error)
	}
}
