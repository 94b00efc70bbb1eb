// Command bench measures fleetdb on a local fleet of its own, against the
// floor of applying the same objects directly to every member.
//
//	go run ./test/bench [-members 5] [-burst 100] [-rest 60s] [-out file.json]
//
// It starts a kwok fleet with hack/fleet.sh (own FLEET_DIR and FLEET_PREFIX,
// no audit log), builds and runs the hub as a separate process, measures the
// latencies, then takes that fleet down and starts a second one with audit
// logs on, where it counts the hub's writes; it prints a table, writes JSON,
// and always tears the hub and the fleet down (also on error and Ctrl-C).
// See docs/reports/benchmarks.md.
package main

import (
	"context"
	"crypto/sha256"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/fleetdb/fleetdb/test/repo"
)

type config struct {
	root           string
	members        int
	burst          int
	burstPlacement string
	burstWorkers   int
	samples        int
	writeSamples   int
	rest           time.Duration
	probeInterval  time.Duration
	slowDelay      time.Duration
	out            string
	fleetDir       string
	prefix         string
	hubArgs        string
	skipIsolation  bool
	peer           string
}

func main() {
	var cfg config
	flag.IntVar(&cfg.members, "members", 5, "member clusters (1..20)")
	flag.IntVar(&cfg.burst, "burst", 100, "Databases created at once in the burst")
	flag.StringVar(&cfg.burstPlacement, "burst-placement", "spread",
		"spread: burst Database i goes to member i mod N (M workloads in all, SPEC 8's 'per member at once'); all: every burst Database on every member (M×N)")
	flag.IntVar(&cfg.burstWorkers, "burst-workers", 16, "goroutines creating (or applying) the burst")
	flag.IntVar(&cfg.samples, "samples", 20, "Databases created, updated and deleted one at a time")
	flag.IntVar(&cfg.writeSamples, "write-samples", 10,
		"Databases created, updated and deleted one at a time on the write-count fleet (audit on; 0: no write-count fleet)")
	flag.DurationVar(&cfg.rest, "rest", 60*time.Second, "quiet interval of the fleet at rest in which writes are counted")
	flag.DurationVar(&cfg.probeInterval, "probe-interval", 10*time.Second, "the hub's --probe-interval")
	flag.DurationVar(&cfg.slowDelay, "slow-delay", time.Second, "latency the proxy adds to every request to the slowed member")
	flag.StringVar(&cfg.out, "out", "", "JSON results (default test/bench/results/<timestamp>.json)")
	flag.StringVar(&cfg.fleetDir, "fleet-dir", "", "FLEET_DIR of the bench fleet (default .cache/bench-fleet)")
	flag.StringVar(&cfg.prefix, "fleet-prefix", "fleetdb-bench", "FLEET_PREFIX of the bench fleet's kwok clusters")
	flag.StringVar(&cfg.hubArgs, "hub-args", "", "extra flags for the hub, space-separated (e.g. \"--member-qps=200\")")
	flag.BoolVar(&cfg.skipIsolation, "skip-isolation", false, "skip the slowed-member measurement")
	flag.StringVar(&cfg.peer, "peer", peerName,
		"the peer measured beside fleetdb one change at a time: "+peerName+" (Open Cluster Management's work agent, built by hack/ocm.sh) or none")
	sc := scaleFlags()
	flag.Parse()
	if sc.on {
		os.Exit(runScale(cfg, sc))
	}
	if cfg.members < 1 || cfg.members > 20 {
		fmt.Fprintln(os.Stderr, "bench: -members must be 1..20")
		os.Exit(2)
	}
	if cfg.peer != peerName && cfg.peer != "none" {
		fmt.Fprintln(os.Stderr, "bench: -peer must be "+peerName+" or none")
		os.Exit(2)
	}
	if cfg.burstPlacement != "spread" && cfg.burstPlacement != "all" {
		fmt.Fprintln(os.Stderr, "bench: -burst-placement must be spread or all")
		os.Exit(2)
	}
	root, err := repo.Root()
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(2)
	}
	cfg.root = root
	ctrllog.SetLogger(logr.Discard())
	if cfg.fleetDir == "" {
		cfg.fleetDir = filepath.Join(root, ".cache", "bench-fleet")
	}
	cfg.fleetDir, _ = filepath.Abs(cfg.fleetDir)
	if cfg.out == "" {
		cfg.out = filepath.Join(root, "test", "bench", "results", time.Now().Format("20060102-150405")+".json")
	}

	// The first SIGINT/SIGTERM cancels the run; teardown then runs to the
	// end, and later signals are swallowed so that nothing is left behind.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	rep := &Report{Started: time.Now(), Machine: Machine{
		NProc: runtime.NumCPU(), MemTotalMiB: memTotalMiB(), GoVersion: runtime.Version(),
		OtherControlPlanes: otherControlPlanes(cfg.fleetDir),
	}}
	loadCtx, stopLoad := context.WithCancel(context.Background())
	load := &loadSampler{}
	loadDone := make(chan struct{})
	go func() { load.run(loadCtx, 5*time.Second); close(loadDone) }()

	rep.Source = sourceState(root)
	b := &bench{cfg: cfg, rep: rep}
	runErr := b.run(ctx)
	b.teardown()
	stopLoad()
	<-loadDone

	rep.Finished = time.Now()
	if len(load.samples) > 0 {
		mn, mx, sum := load.samples[0], load.samples[0], 0.0
		for _, v := range load.samples {
			mn, mx, sum = min(mn, v), max(mx, v), sum+v
		}
		rep.Machine.LoadAvg1 = []float64{mn, round1(sum / float64(len(load.samples))), mx}
	}
	if runErr != nil {
		rep.Error = runErr.Error()
		if errors.Is(runErr, context.Canceled) {
			rep.Error = "interrupted: " + rep.Error
		}
	}
	rep.print(os.Stdout)
	if err := rep.write(cfg.out); err != nil {
		fmt.Fprintln(os.Stderr, "bench: writing results:", err)
	} else {
		fmt.Printf("\nresults: %s\n", cfg.out)
	}
	if runErr != nil {
		stop()
		os.Exit(1)
	}
}

// sourceState names the code measured: the commit and, when the tree has
// changes in the hub's packages, a digest of them (other work may be in progress).
func sourceState(root string) string {
	git := func(args ...string) string {
		out, err := exec.CommandContext(context.Background(), "git", append([]string{"-C", root}, args...)...).Output()
		if err != nil {
			return ""
		}
		return strings.TrimSpace(string(out))
	}
	head := git("rev-parse", "--short", "HEAD")
	diff := git("diff", "HEAD", "--", "hub", "clusters", "member", "apis")
	if diff == "" {
		return head
	}
	sum := sha256.Sum256([]byte(diff))
	files := strings.Fields(git("diff", "HEAD", "--name-only", "--", "hub", "clusters", "member", "apis"))
	return fmt.Sprintf("%s + uncommitted changes in %s (diff sha256 %x)", head, strings.Join(files, ", "), sum[:6])
}

func logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "%s bench: %s\n", time.Now().Format("15:04:05.000"), fmt.Sprintf(format, args...))
}
