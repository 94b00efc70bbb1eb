package chaos

import (
	"context"
	"math/rand/v2"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/fleetdb/fleetdb/test/fleet"
)

// TestChaosShort is the short version of `make chaos`: a few cycles on a
// local fleet of its own (a hub and two members), half of them from a fixed
// seed and half from a random one, printed so that a failure can be
// replayed (`make chaos CHAOS_ARGS="-seed N -cycles M"`). Every cycle kills
// and restarts the hub during a workload step and checks the fleet.
func TestChaosShort(t *testing.T) {
	if testing.Short() || os.Getenv("FLEETDB_E2E") == "0" {
		t.Skip("the chaos test runs a local fleet: not with -short or FLEETDB_E2E=0")
	}
	ctrllog.SetLogger(logr.Discard())
	// A fixed seed, then a new one on the fleet it left.
	seeds := []uint64{20261201, rand.Uint64N(1 << 31)}
	t.Logf("seeds %d,%d (replay: make chaos CHAOS_ARGS=\"-seed %d,%d -cycles %d\")", seeds[0], seeds[1], seeds[0], seeds[1], shortCycles)
	ctx, cancel := context.WithTimeout(context.Background(), 12*time.Minute)
	defer cancel()
	// Under the system temp folder: `make test` gives tests a private
	// TMPDIR and ends whatever still runs from it.
	dir, err := os.MkdirTemp("", "fleetdb-chaos-")
	if err != nil {
		t.Fatal(err)
	}
	rep, err := Run(ctx, Config{
		RepoRoot: fleet.RepoRoot(), WorkDir: dir, Prefix: "fleetdb-chaos-test", Members: 2,
		Cycles: shortCycles, Seeds: seeds, MaxLive: 6, ConvergeTimeout: 2 * time.Minute, Log: testLog{t}, SelfTest: true,
	})
	var md strings.Builder
	rep.Markdown(&md)
	t.Logf("report:\n%s", md.String())
	if err != nil {
		t.Fatalf("the run stopped: %v (logs kept in %s)", err, dir)
	}
	if !rep.Clean() {
		t.Fatalf("%d findings (logs kept in %s)", len(rep.Findings), dir)
	}
	// The checks can fail: every deliberate breakage was reported.
	for _, inv := range []string{InvPassword, InvExact, InvOrphan} {
		if !rep.SelfTest[inv] {
			t.Errorf("self-test: breaking %q was not reported (%v)", inv, rep.SelfTest)
		}
	}
	for inv, ok := range rep.SelfTest {
		if !ok {
			t.Errorf("self-test: breaking %q was not reported", inv)
		}
	}
	if !t.Failed() {
		_ = os.RemoveAll(dir)
	}
}

// shortCycles is the cycles of each of the short test's seeds.
const shortCycles = 6

type testLog struct{ t *testing.T }

func (l testLog) Write(p []byte) (int, error) {
	l.t.Log(strings.TrimSuffix(string(p), "\n"))
	return len(p), nil
}
