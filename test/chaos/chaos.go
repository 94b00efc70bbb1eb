// Package chaos kills and restarts the hub at random points of a random
// workload on a local fleet of its own (test/localfleet) and checks, after
// every cycle, that the fleet is exactly what the hub's Databases say:
// every placed member holds exactly the objects the hub renders for each
// Database, nothing is left of Databases that are gone (but what their
// policy keeps), no volume claim or Secret a policy kept is gone, and no
// password ever changed. Run is shared by `make chaos` (cmd/fleetdb-chaos,
// 100 cycles) and TestChaosShort (a few cycles in `make test`).
//
// A run is driven by a seed (or a few, one after the other): the steps, the Databases, the policies and
// the kill delays come from it, so a failing seed replays the same sequence
// of faults (the timing of the fleet itself is not replayed).
package chaos

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleetv1alpha1 "github.com/fleetdb/fleetdb/apis/v1alpha1"
	"github.com/fleetdb/fleetdb/test/localfleet"
)

// Namespace is the hub namespace of the chaos Databases (and so their
// member namespace).
const Namespace = "chaos"

// Config configures a chaos run.
type Config struct {
	// RepoRoot is the fleetdb checkout (the hub is built from it).
	RepoRoot string
	// WorkDir holds the fleet, the hub binary and the hub logs; it must be
	// the run's own folder (processes mentioning it are killed at the end).
	WorkDir string
	// Prefix is the kwok cluster name prefix (default fleetdb-chaos).
	Prefix string
	// Members is the number of member clusters (default 2).
	Members int
	// Cycles is the number of cycles of each seed (default 100).
	Cycles int
	// Seeds drive every random choice: Cycles cycles with the first, then
	// Cycles more with the next (on the fleet the earlier ones left), ...
	Seeds []uint64
	// MaxLive caps the live Databases: past it a cycle deletes (default 10).
	MaxLive int
	// ConvergeTimeout bounds the wait for the fleet to converge after a
	// cycle's faults (default 3 minutes).
	ConvergeTimeout time.Duration
	// SelfTest, after the cycles, stops the hub, breaks the fleet once per
	// invariant and records in Report.SelfTest which breakages a check
	// reports: proof that the checks can fail.
	SelfTest bool
	// HubArgs are extra hub flags.
	HubArgs []string
	// Log receives progress lines; nil discards them.
	Log io.Writer
}

func (c Config) withDefaults() Config {
	if c.Prefix == "" {
		c.Prefix = "fleetdb-chaos"
	}
	if c.Members <= 0 {
		c.Members = 2
	}
	if c.Cycles <= 0 {
		c.Cycles = 100
	}
	if len(c.Seeds) == 0 {
		c.Seeds = []uint64{1}
	}
	if c.MaxLive <= 0 {
		c.MaxLive = 10
	}
	if c.ConvergeTimeout <= 0 {
		c.ConvergeTimeout = 3 * time.Minute
	}
	if c.Log == nil {
		c.Log = io.Discard
	}
	return c
}

// runner is one chaos run.
type runner struct {
	cfg    Config
	rng    *rand.Rand
	rep    *Report
	fleet  *localfleet.Fleet
	hubBin string
	hub    *localfleet.HubProcess
	hubN   int

	scheme  *runtime.Scheme
	hubC    client.Client
	members []string
	memberC map[string]client.Client

	fleetLog *os.File
	flaps    *flapWatch
	// hubStarted is when the running hub process started.
	hubStarted time.Time

	model *model
	seed  uint64
	cycle int    // within the seed
	n     int    // of the run
	cur   string // the current cycle's step, for findings
}

// Run runs a chaos run: it builds the hub, brings up a local fleet, runs
// the cycles, and always tears the hub and the fleet down. The report is
// returned also with an error (a run that could not go on); findings are
// not errors: they are in the report.
func Run(ctx context.Context, cfg Config) (*Report, error) {
	cfg = cfg.withDefaults()
	r := &runner{
		cfg: cfg,
		rep: newReport(cfg),
	}
	err := r.run(ctx)
	r.teardown()
	r.rep.Finished = time.Now()
	if err != nil {
		r.rep.Error = err.Error()
	}
	return r.rep, err
}

func (r *runner) logf(format string, args ...any) {
	fmt.Fprintf(r.cfg.Log, "%s chaos: %s\n", time.Now().Format("15:04:05.000"), fmt.Sprintf(format, args...))
}

func (r *runner) run(ctx context.Context) error {
	if err := os.MkdirAll(r.cfg.WorkDir, 0o755); err != nil {
		return err
	}
	r.hubBin = filepath.Join(r.cfg.WorkDir, "fleetdb-hub")
	built := make(chan error, 1)
	go func() { built <- localfleet.BuildHub(ctx, r.cfg.RepoRoot, r.hubBin, nil) }()

	fleetLog, err := os.Create(filepath.Join(r.cfg.WorkDir, "fleet.log"))
	if err != nil {
		return err
	}
	r.fleetLog = fleetLog // open until teardown: hack/fleet.sh down writes to it
	start := time.Now()
	if err := r.startFleet(ctx, fleetLog); err != nil {
		return err
	}
	if err := <-built; err != nil {
		return err
	}
	r.rep.FleetUp = time.Since(start).Round(time.Second).String()
	r.logf("fleet up in %s", r.rep.FleetUp)
	if err := r.clients(); err != nil {
		return err
	}
	if err := r.hubC.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: Namespace}}); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	if err := r.startHub(ctx); err != nil {
		return err
	}
	if err := r.waitMembersReady(ctx, 3*time.Minute); err != nil {
		return err
	}
	r.model = newModel()
	if err := r.watchFlaps(ctx); err != nil {
		return err
	}
	for _, seed := range r.cfg.Seeds {
		r.seed = seed
		r.rng = rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
		for r.cycle = 1; r.cycle <= r.cfg.Cycles; r.cycle++ {
			if err := ctx.Err(); err != nil {
				return err
			}
			r.n++
			if dead := r.fleet.DeadComponents(); len(dead) > 0 {
				return fmt.Errorf("before cycle %d of seed %d: the fleet lost %s (not the hub's doing; see %s)", r.cycle, seed, strings.Join(dead, ", "), r.cfg.WorkDir)
			}
			if err := r.runCycle(ctx); err != nil {
				return fmt.Errorf("cycle %d of seed %d: %w", r.cycle, seed, err)
			}
		}
	}
	if r.cfg.SelfTest {
		return r.selfTest(ctx)
	}
	return nil
}

// startFleet brings the run's fleet up, and again (up to three times) when
// a component died at start (see localfleet.DeadComponents).
func (r *runner) startFleet(ctx context.Context, log io.Writer) error {
	for attempt := 1; ; attempt++ {
		r.logf("starting a fleet of a hub and %d members under %s", r.cfg.Members, r.cfg.WorkDir)
		var err error
		r.fleet, err = localfleet.Start(ctx, localfleet.Options{
			RepoRoot: r.cfg.RepoRoot, Dir: filepath.Join(r.cfg.WorkDir, "fleet"), Prefix: r.cfg.Prefix,
			Members: r.cfg.Members, Log: log, Attempts: 3,
			// As the e2e suite: no node leases, so that kwok manages its
			// nodes at once after a member's control plane was stopped.
			ExtraEnv: []string{"FLEET_KWOKCTL_ARGS=--node-lease-duration-seconds=0"},
		})
		if err != nil {
			return fmt.Errorf("starting the fleet: %w", err)
		}
		// A component that cannot bind its port exits within seconds.
		if err := sleep(ctx, 5*time.Second); err != nil {
			return err
		}
		dead := r.fleet.DeadComponents()
		if len(dead) == 0 {
			return nil
		}
		if attempt == 3 {
			return fmt.Errorf("the fleet came up without %s three times (see %s)", strings.Join(dead, ", "), r.cfg.WorkDir)
		}
		r.logf("the fleet came up without %s (a port taken meanwhile?): starting it again", strings.Join(dead, ", "))
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		err = r.fleet.Stop(sctx)
		cancel()
		if err != nil {
			return err
		}
	}
}

// clients builds the run's clients of the hub and the members.
func (r *runner) clients() error {
	r.scheme = runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(r.scheme); err != nil {
		return err
	}
	if err := fleetv1alpha1.AddToScheme(r.scheme); err != nil {
		return err
	}
	newClient := func(path string) (client.Client, error) {
		c, err := clientcmd.BuildConfigFromFlags("", path)
		if err != nil {
			return nil, err
		}
		c.UserAgent = "fleetdb-chaos"
		c.QPS, c.Burst = 200, 400
		c.Timeout = 20 * time.Second
		return client.New(c, client.Options{Scheme: r.scheme})
	}
	var err error
	if r.hubC, err = newClient(r.fleet.HubKubeconfig); err != nil {
		return err
	}
	r.memberC = map[string]client.Client{}
	for _, m := range r.fleet.MemberKubeconfigs {
		if r.memberC[m.Name], err = newClient(m.Path); err != nil {
			return err
		}
		r.members = append(r.members, m.Name)
	}
	return nil
}

// watchFlaps starts the watch of the hub's Databases that catches Ready
// flapping; it ends with ctx.
func (r *runner) watchFlaps(ctx context.Context) error {
	c, err := clientcmd.BuildConfigFromFlags("", r.fleet.HubKubeconfig)
	if err != nil {
		return err
	}
	c.UserAgent = "fleetdb-chaos-watch"
	wc, err := client.NewWithWatch(c, client.Options{Scheme: r.scheme})
	if err != nil {
		return err
	}
	r.flaps = newFlapWatch()
	go r.flaps.run(ctx, wc)
	return nil
}

// startHub starts a new hub process (its own log per start) and waits for
// its metrics endpoint.
func (r *runner) startHub(ctx context.Context) error {
	r.hubN++
	h, err := localfleet.StartHub(localfleet.HubOptions{
		Binary: r.hubBin, Kubeconfig: r.fleet.HubIdentityKubeconfig, // the hub's own ServiceAccount (deploy/rbac), not admin
		LogPath: filepath.Join(r.cfg.WorkDir, fmt.Sprintf("hub-%03d.log", r.hubN)),
		Args:    append([]string{"--probe-interval", "1s", "--probe-grace-period", "3s"}, r.cfg.HubArgs...),
	})
	if err != nil {
		return err
	}
	r.hub, r.hubStarted = h, time.Now()
	if err := h.WaitReady(ctx, time.Minute); err != nil {
		return err
	}
	return nil
}

// waitMembersReady waits until every MemberCluster is Ready on the hub.
func (r *runner) waitMembersReady(ctx context.Context, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		var notReady []string
		for _, m := range r.members {
			mc := &fleetv1alpha1.MemberCluster{}
			if err := r.hubC.Get(ctx, client.ObjectKey{Name: m}, mc); err != nil || !meta.IsStatusConditionTrue(mc.Status.Conditions, fleetv1alpha1.MemberConditionReady) {
				notReady = append(notReady, m)
			}
		}
		if len(notReady) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("MemberClusters not Ready after %s: %s", timeout, strings.Join(notReady, ", "))
		}
		if err := sleep(ctx, 500*time.Millisecond); err != nil {
			return err
		}
	}
}

// teardown stops the hub and the fleet; it runs whatever happened.
func (r *runner) teardown() {
	r.logf("tearing down")
	if r.fleet != nil {
		for _, m := range r.members {
			_ = r.fleet.ThawMember(m) // a member left frozen by an error would not stop
		}
	}
	r.hub.Stop()
	if r.fleet == nil {
		return
	}
	volumes := r.hostPathVolumes()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if err := r.fleet.Stop(ctx); err != nil {
		r.logf("tearing the fleet down: %v", err)
	}
	for _, v := range volumes {
		_ = os.RemoveAll(v)
	}
	if r.fleetLog != nil {
		_ = r.fleetLog.Close()
	}
}

// hostPathVolumes lists the members' host-path volumes: they live in
// /tmp/hostpath_pv (fixed in Kubernetes), outside the run's folder.
func (r *runner) hostPathVolumes() []string {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var out []string
	for _, c := range r.memberC {
		var pvs corev1.PersistentVolumeList
		if err := c.List(ctx, &pvs); err != nil {
			continue
		}
		for _, pv := range pvs.Items {
			if hp := pv.Spec.HostPath; hp != nil && strings.HasPrefix(hp.Path, "/tmp/hostpath_pv/") {
				out = append(out, hp.Path)
			}
		}
	}
	return out
}

func sleep(ctx context.Context, d time.Duration) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(d):
		return nil
	}
}

// errConverge is a cycle that did not converge in time: a finding, not the
// end of the run.
var errConverge = errors.New("did not converge")
