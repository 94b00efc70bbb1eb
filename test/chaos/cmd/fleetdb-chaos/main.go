// Command fleetdb-chaos kills and restarts the hub at random points of a
// random workload on a local fleet of its own, for N cycles, and checks the
// fleet after each (package test/chaos). It prints a markdown report, writes
// it (and a JSON one beside it) when -report is set, and exits 1 on any
// finding.
//
//	go run ./test/chaos/cmd/fleetdb-chaos [-cycles 100] [-seed N] [-members 2] [-report docs/reports/chaos-run.md]
//
// Replay a run with its seed: -seed N -cycles M.
package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/fleetdb/fleetdb/test/chaos"
	"github.com/fleetdb/fleetdb/test/repo"
)

func main() {
	var (
		cfg      chaos.Config
		seeds    string
		report   string
		workDir  string
		converge time.Duration
		hubArgs  string
	)
	flag.IntVar(&cfg.Cycles, "cycles", 100, "cycles to run")
	flag.StringVar(&seeds, "seed", "", "seed of every random choice, or seeds run one after the other (\"1,2\"); empty: one from the clock, printed")
	flag.IntVar(&cfg.Members, "members", 2, "member clusters")
	flag.IntVar(&cfg.MaxLive, "max-live", 14, "live Databases at most (past it a cycle deletes)")
	flag.DurationVar(&converge, "converge-timeout", 3*time.Minute, "how long a cycle may take to converge before its problems are findings")
	flag.StringVar(&report, "report", "", "write the markdown report here (and the JSON one beside it, .json)")
	flag.StringVar(&workDir, "work-dir", "", "the run's folder: fleet, hub binary and logs (default .cache/chaos-<seed>; removed after a clean run)")
	flag.BoolVar(&cfg.SelfTest, "self-test", true, "after the cycles, break the fleet on purpose and report which breakages the checks saw")
	flag.StringVar(&hubArgs, "hub-args", "", "extra hub flags, space-separated")
	flag.Parse()
	if seeds == "" {
		seeds = strconv.FormatInt(time.Now().UnixNano()&0x7fffffff, 10)
	}
	for _, s := range strings.Split(seeds, ",") {
		v, err := strconv.ParseUint(strings.TrimSpace(s), 10, 64)
		if err != nil {
			fmt.Fprintln(os.Stderr, "chaos: -seed:", err)
			os.Exit(2)
		}
		cfg.Seeds = append(cfg.Seeds, v)
	}
	cfg.ConvergeTimeout = converge
	cfg.HubArgs = strings.Fields(hubArgs)
	root, err := repo.Root()
	if err != nil {
		fmt.Fprintln(os.Stderr, "chaos:", err)
		os.Exit(2)
	}
	cfg.RepoRoot = root
	if workDir == "" {
		workDir = filepath.Join(root, ".cache", fmt.Sprintf("chaos-%d", cfg.Seeds[0]))
	}
	cfg.WorkDir, _ = filepath.Abs(workDir)
	cfg.Log = os.Stderr
	ctrllog.SetLogger(logr.Discard())

	// The first SIGINT/SIGTERM cancels the run; the teardown still runs.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	fmt.Fprintf(os.Stderr, "chaos: seed %s, %d cycles, %d members, work folder %s\n", seeds, cfg.Cycles, cfg.Members, cfg.WorkDir)
	rep, runErr := chaos.Run(ctx, cfg)

	var md bytes.Buffer
	fmt.Fprintf(&md, "Command: `make chaos CHAOS_ARGS=\"-seed %s -cycles %d -members %d\"`\n\n", seeds, cfg.Cycles, cfg.Members)
	rep.Markdown(&md)
	fmt.Print(md.String())
	if report != "" {
		if err := os.WriteFile(report, md.Bytes(), 0o644); err != nil {
			fmt.Fprintln(os.Stderr, "chaos: writing the report:", err)
		}
		if err := rep.WriteJSON(strings.TrimSuffix(report, filepath.Ext(report)) + ".json"); err != nil {
			fmt.Fprintln(os.Stderr, "chaos: writing the JSON report:", err)
		}
	}
	if rep.Clean() {
		_ = os.RemoveAll(cfg.WorkDir)
		return
	}
	fmt.Fprintf(os.Stderr, "chaos: not clean; hub and fleet logs kept in %s\n", cfg.WorkDir)
	if runErr != nil && errors.Is(runErr, context.Canceled) {
		fmt.Fprintln(os.Stderr, "chaos: interrupted")
	}
	stop()
	os.Exit(1)
}
