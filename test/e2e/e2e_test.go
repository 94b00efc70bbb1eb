package e2e

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	fleetv1alpha1 "github.com/fleetdb/fleetdb/apis/v1alpha1"
	"github.com/fleetdb/fleetdb/test/fleet"
	"github.com/fleetdb/fleetdb/test/localfleet"
)

// Flags; each defaults to its FLEETDB_E2E_* environment variable.
var (
	flagHubKubeconfig = flag.String("e2e.hub-kubeconfig", os.Getenv("FLEETDB_E2E_HUB_KUBECONFIG"),
		"admin kubeconfig of the hub (env FLEETDB_E2E_HUB_KUBECONFIG); not with -e2e.fleet=local")
	flagMemberKubeconfigs = flag.String("e2e.member-kubeconfigs", os.Getenv("FLEETDB_E2E_MEMBER_KUBECONFIGS"),
		"admin kubeconfigs of the members as name=path,... where name is the MemberCluster name (env FLEETDB_E2E_MEMBER_KUBECONFIGS)")
	flagFleet = flag.String("e2e.fleet", os.Getenv("FLEETDB_E2E_FLEET"),
		"local (start a kwok fleet with hack/fleet.sh), kind or existing (env FLEETDB_E2E_FLEET); default local, or existing when a hub kubeconfig is given")
	flagHub = flag.String("e2e.hub", os.Getenv("FLEETDB_E2E_HUB"),
		"process (build and run the hub binary here) or in-cluster (a hub already runs in the fleet) (env FLEETDB_E2E_HUB); default process for local, in-cluster otherwise")
	flagKubectl = flag.String("e2e.kubectl", os.Getenv("FLEETDB_E2E_KUBECTL"),
		"kubectl binary (env FLEETDB_E2E_KUBECTL); default the toolchain's for local, else kubectl from PATH")
	flagHubArgs = flag.String("e2e.hub-args", os.Getenv("FLEETDB_E2E_HUB_ARGS"),
		"further flags of the hub replicas the suite runs, split on spaces, e.g. --leader-elect-retry-period=1s (env FLEETDB_E2E_HUB_ARGS)")
	flagHubNamespace = flag.String("e2e.hub-namespace", envOr("FLEETDB_E2E_HUB_NAMESPACE", "fleetdb-system"),
		"namespace of an in-cluster hub, for its logs on failure (env FLEETDB_E2E_HUB_NAMESPACE)")
)

func init() {
	// `make kind-e2e` passes -fleet=kind; keep it working as an alias.
	flag.Func("fleet", "alias of -e2e.fleet", func(s string) error { *flagFleet = s; return nil })
}

// localPrefix names the suite's kwokctl clusters (fleetdb-e2e-hub, ...;
// FLEETDB_E2E_FLEET_PREFIX overrides it, so that two runs on one machine do not collide):
// distinct from a developer's `make run` fleet (prefix fleetdb).
const localPrefix = "fleetdb-e2e"

// localMembers is the size of the suite's local fleet: FailoverSpec fans
// out over three.
const localMembers = 3

// hubReplicas are the hub processes of -e2e.hub=process: two, with leader
// election, as the hub's own identity (deploy/rbac) on the local fleet.
var hubReplicas = []string{"hub-0", "hub-1"}

// suite is what TestMain set up for the tests.
var suite struct {
	// skip, when set, is why every test skips.
	skip  string
	fleet *Fleet
	// hubs are the hub replicas when the suite runs them (-e2e.hub=process).
	hubs *localfleet.HubSet
	// audit is the local fleet (its API servers' audit logs); nil elsewhere.
	audit *localfleet.Fleet
	// workDir is the suite's work folder (binaries it builds go there).
	workDir string
}

func TestMain(m *testing.M) {
	flag.Parse()
	os.Exit(runSuite(m))
}

func runSuite(m *testing.M) int {
	switch {
	case testing.Short():
		suite.skip = "-short: the e2e suite does not run"
	case os.Getenv("FLEETDB_E2E") == "0":
		suite.skip = "FLEETDB_E2E=0: the e2e suite does not run"
	}
	if suite.skip != "" {
		return m.Run()
	}
	cfg, err := resolveConfig()
	if err != nil {
		logf("e2e: %v", err)
		return 2
	}

	env := &suiteEnv{cfg: cfg}
	// The defer covers a normal return and a panic in TestMain itself; a
	// panic in a test or `go test -timeout` ends the process without it,
	// which the watchdog covers; a signal is handled here.
	defer env.teardown()
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	defer signal.Stop(sigs)
	go func() {
		s := <-sigs
		logf("e2e: %v: tearing down", s)
		env.failed.Store(true)
		env.teardown()
		os.Exit(130)
	}()

	start := time.Now()
	if err := env.setUp(); err != nil {
		logf("e2e: setting up: %v", err)
		env.failed.Store(true)
		return 1
	}
	up := time.Since(start)
	specsStart := time.Now()
	code := m.Run()
	specs := time.Since(specsStart)
	if bad := forbiddenLines(suite.hubs); len(bad) > 0 {
		logf("e2e: the hub's identity was refused on the hub (deploy/rbac lacks a permission):\n%s", strings.Join(bad, "\n"))
		code = max(code, 1)
	}
	env.failed.Store(code != 0)
	teardownStart := time.Now()
	env.teardown()
	logf("e2e: %s fleet ready in %s, specs %s, teardown %s; wall %s",
		cfg.fleet, up.Round(time.Second), specs.Round(time.Second), time.Since(teardownStart).Round(time.Second), time.Since(start).Round(time.Second))
	return code
}

// suiteConfig is the resolved flags.
type suiteConfig struct {
	fleet, hub     string
	hubKubeconfig  string
	members        []localfleet.NamedPath
	kubectl        string
	hubNamespace   string
	kindClusterPfx string
}

func resolveConfig() (suiteConfig, error) {
	c := suiteConfig{
		fleet: *flagFleet, hub: *flagHub, hubKubeconfig: *flagHubKubeconfig, kubectl: *flagKubectl,
		hubNamespace: *flagHubNamespace, kindClusterPfx: envOr("FLEETDB_E2E_KIND_CLUSTER_PREFIX", "fleetdb-"),
	}
	if c.fleet == "" {
		c.fleet = "local"
		if c.hubKubeconfig != "" {
			c.fleet = "existing"
		}
	}
	var err error
	if c.members, err = localfleet.ParseMemberKubeconfigs(*flagMemberKubeconfigs); err != nil {
		return c, err
	}
	switch c.fleet {
	case "local":
		if c.hubKubeconfig != "" || len(c.members) > 0 {
			return c, errors.New("-e2e.fleet=local starts its own fleet: drop the kubeconfigs or use -e2e.fleet=existing")
		}
		c.hub = cmpOr(c.hub, "process")
	case "kind", "existing":
		if c.hubKubeconfig == "" || len(c.members) == 0 {
			return c, fmt.Errorf("-e2e.fleet=%s needs -e2e.hub-kubeconfig and -e2e.member-kubeconfigs", c.fleet)
		}
		c.hub = cmpOr(c.hub, "in-cluster")
	default:
		return c, fmt.Errorf("-e2e.fleet=%q: want local, kind or existing", c.fleet)
	}
	if c.hub != "process" && c.hub != "in-cluster" {
		return c, fmt.Errorf("-e2e.hub=%q: want process or in-cluster", c.hub)
	}
	return c, nil
}

// suiteEnv is everything the suite started, for teardown.
type suiteEnv struct {
	cfg      suiteConfig
	workDir  string
	local    *localfleet.Fleet
	hubs     *localfleet.HubSet
	watchdog *Watchdog
	fleetLog *os.File
	failed   atomic.Bool
	once     sync.Once
}

func (e *suiteEnv) setUp() error {
	// Generous: on a fresh machine hack/fleet.sh first builds the toolchain (~15-20 minutes).
	ctx, cancel := context.WithTimeout(context.Background(), 45*time.Minute)
	defer cancel()
	root := fleet.RepoRoot()
	var err error
	// Under the system temp folder: `make test` (hack/test.sh) gives tests a
	// private TMPDIR and ends whatever still runs from it.
	if e.workDir, err = os.MkdirTemp("", "fleetdb-e2e-"); err != nil {
		return err
	}
	logf("e2e: %s fleet, hub %s; work folder %s", e.cfg.fleet, e.cfg.hub, e.workDir)

	// The hub runs as its own identity where the suite has one for it.
	hubKubeconfig, hubIdentity, members := e.cfg.hubKubeconfig, e.cfg.hubKubeconfig, e.cfg.members
	hubBinary := filepath.Join(e.workDir, "fleetdb-hub")
	built := make(chan error, 1)
	if e.cfg.hub == "process" {
		// Build while the fleet comes up.
		go func() { built <- localfleet.BuildHub(ctx, root, hubBinary, nil) }()
	} else {
		built <- nil
	}

	var control MemberControl
	switch e.cfg.fleet {
	case "local":
		opts := localfleet.Options{
			RepoRoot: root, Dir: filepath.Join(e.workDir, "fleet"), Prefix: envOr("FLEETDB_E2E_FLEET_PREFIX", localPrefix), Members: localMembers,
			// No node leases: a kwok controller restarted by StartMember gets a
			// new identity and, with leases, manages no node until the old
			// leases expire (200s with kwokctl's defaults), so pods on a
			// restarted member would stay Pending for minutes — an artefact of
			// simulated nodes (real kubelets keep running while their control
			// plane is down). Without leases kwok manages its nodes from the
			// start and keeps them Ready with status heartbeats.
			// Every API server logs who wrote what (FailoverSpec reads it).
			ExtraEnv: []string{"FLEET_KWOKCTL_ARGS=--node-lease-duration-seconds=0",
				"FLEET_AUDIT_POLICY=" + filepath.Join(e.workDir, "fleet", auditPolicyFile)},
			Files: map[string][]byte{auditPolicyFile: []byte(auditPolicy)},
			// kwokctl picks free ports when it creates a cluster; another fleet
			// created on the machine meanwhile can take one first.
			Attempts: 3,
		}
		if e.watchdog, err = StartWatchdog(filepath.Join(root, "hack", "fleet.sh")+" down", e.workDir,
			filepath.Join(e.workDir, "watchdog.log"), opts.Env()); err != nil {
			return err
		}
		// hack/fleet.sh's and kwokctl's output; open until teardown (StopMember and Stop write to it too).
		if e.fleetLog, err = os.Create(filepath.Join(e.workDir, "fleet.log")); err != nil {
			return err
		}
		opts.Log = e.fleetLog
		logf("e2e: hack/fleet.sh up (FLEET_DIR=%s FLEET_PREFIX=%s FLEET_MEMBERS=%d)", opts.Dir, opts.Prefix, opts.Members)
		e.local, err = localfleet.Start(ctx, opts)
		if err != nil {
			return err
		}
		hubKubeconfig, hubIdentity, members = e.local.HubKubeconfig, e.local.HubIdentityKubeconfig, e.local.MemberKubeconfigs
		control = e.local
		if e.cfg.kubectl == "" {
			e.cfg.kubectl = filepath.Join(e.local.ToolsDir, "kubectl")
		}
	default:
		if e.cfg.hub == "process" {
			if e.watchdog, err = StartWatchdog("", "", filepath.Join(e.workDir, "watchdog.log"), nil); err != nil {
				return err
			}
		}
	}
	if e.cfg.kubectl == "" {
		if e.cfg.kubectl, err = exec.LookPath("kubectl"); err != nil {
			assets, aerr := fleet.AssetsDir()
			if aerr != nil {
				return fmt.Errorf("no kubectl on PATH and no toolchain: %w", aerr)
			}
			e.cfg.kubectl = filepath.Join(assets, "kubectl")
		}
	}

	f := &Fleet{Kubectl: e.cfg.kubectl, Intervals: DefaultIntervals()}
	if e.cfg.fleet != "local" {
		// Real pods pull real images (postgres 16 and 17) and run real probes.
		f.Intervals.Ready, f.Intervals.Delete = 10*time.Minute, 10*time.Minute
	}
	if f.Hub, err = NewCluster("hub", hubKubeconfig); err != nil {
		return err
	}
	for _, m := range members {
		c, err := NewCluster(m.Name, m.Path)
		if err != nil {
			return err
		}
		f.Members = append(f.Members, c)
	}
	if e.cfg.fleet == "kind" {
		control = &KindControl{ClusterPrefix: e.cfg.kindClusterPfx, Fleet: f}
	}
	f.Control = control

	if err := <-built; err != nil {
		return err
	}
	if e.cfg.hub == "process" {
		e.hubs = localfleet.NewHubSet(localfleet.HubOptions{
			Binary: hubBinary, Kubeconfig: hubIdentity,
			Args: append([]string{"--probe-interval", "1s", "--probe-grace-period", "3s"}, strings.Fields(*flagHubArgs)...),
		}, e.workDir, func(p *localfleet.HubProcess) {
			e.watchdog.Track(p.Pid())
			logf("e2e: hub replica %s started (pid %d), log %s", p.ReplicaName, p.Pid(), p.LogPath)
		})
		for _, name := range hubReplicas {
			if _, err := e.hubs.Start(name); err != nil {
				return err
			}
		}
	}

	// The hub is working once its registry reports every member Ready.
	if err := waitForMembersReady(ctx, f, e.hubs, 3*time.Minute); err != nil {
		return err
	}
	suite.fleet, suite.hubs, suite.audit, suite.workDir = f, e.hubs, e.local, e.workDir
	return nil
}

func waitForMembersReady(ctx context.Context, f *Fleet, hubs *localfleet.HubSet, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		var notReady []string
		for _, m := range f.Members {
			mc := &fleetv1alpha1.MemberCluster{}
			if err := f.Hub.Client.Get(ctx, types.NamespacedName{Name: m.Name}, mc); err != nil {
				notReady = append(notReady, fmt.Sprintf("%s (%v)", m.Name, err))
				continue
			}
			if c := Condition(mc.Status.Conditions, fleetv1alpha1.MemberConditionReady); c.Status != metav1.ConditionTrue {
				notReady = append(notReady, fmt.Sprintf("%s (Ready=%q %s: %s)", m.Name, c.Status, c.Reason, c.Message))
			}
		}
		if len(notReady) == 0 {
			return nil
		}
		if hubs != nil {
			if name, err := hubs.Exited(); name != "" {
				return fmt.Errorf("hub replica %s exited (%w):\n%s", name, err, localfleet.TailFile(hubs.Replica(name).LogPath, 8<<10))
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("MemberClusters not Ready after %s: %s", timeout, strings.Join(notReady, "; "))
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// teardown stops what setUp started, also after a failure; it runs once.
func (e *suiteEnv) teardown() {
	e.once.Do(func() {
		if e.hubs != nil {
			e.hubs.Stop()
			if e.failed.Load() {
				for _, log := range e.hubs.Logs() {
					logf("e2e: ---- hub log (%s) ----\n%s\ne2e: ---- end of hub log ----", log, localfleet.TailFile(log, 256<<10))
				}
			}
		} else if e.failed.Load() && e.cfg.hub == "in-cluster" && e.cfg.kubectl != "" && e.cfg.hubKubeconfig != "" {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			out, _ := exec.CommandContext(ctx, e.cfg.kubectl, "--kubeconfig", e.cfg.hubKubeconfig, "-n", e.cfg.hubNamespace,
				"logs", "deployment/fleetdb-hub", "--tail=500").CombinedOutput()
			cancel()
			logf("e2e: ---- in-cluster hub log (last 500 lines) ----\n%s", out)
		}
		if e.local != nil {
			// The members' host-path volumes live in /tmp/hostpath_pv (fixed in
			// Kubernetes), outside the fleet's folder: remove this fleet's own.
			volumes := hostPathVolumes(suite.fleet)
			defer func() {
				for _, v := range volumes {
					_ = os.RemoveAll(v)
				}
			}()
			if e.failed.Load() {
				dst := filepath.Join(e.workDir, "cluster-logs")
				if err := e.local.SaveLogs(dst); err != nil {
					logf("e2e: saving the clusters' logs: %v", err)
				}
			}
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
			if err := e.local.Stop(ctx); err != nil {
				logf("e2e: tearing the local fleet down: %v", err)
			}
			cancel()
		}
		if e.watchdog != nil {
			e.watchdog.Release()
		}
		if e.fleetLog != nil {
			_ = e.fleetLog.Close()
		}
		if e.workDir == "" {
			return
		}
		if e.failed.Load() {
			_ = os.Remove(filepath.Join(e.workDir, "fleetdb-hub"))
			if os.Remove(e.workDir) != nil { // not empty
				logf("e2e: logs kept in %s", e.workDir)
			}
			return
		}
		_ = os.RemoveAll(e.workDir)
	})
}

// hostPathVolumes lists the host-path directories of the members' volumes.
func hostPathVolumes(f *Fleet) []string {
	if f == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var out []string
	for _, m := range f.Members {
		var pvs corev1.PersistentVolumeList
		if err := m.Client.List(ctx, &pvs); err != nil {
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

// specContext skips when the suite does not run and fails fast when the hub
// process is gone; the context ends with the test.
func specContext(t *testing.T) context.Context {
	t.Helper()
	if suite.skip != "" {
		t.Skip(suite.skip)
	}
	if suite.fleet == nil {
		t.Fatal("the e2e fleet is not set up")
	}
	if suite.hubs != nil {
		if name, err := suite.hubs.Exited(); name != "" {
			t.Fatalf("hub replica %s exited (%v); its log: %s", name, err, suite.hubs.Replica(name).LogPath)
		}
	}
	// A permission deploy/rbac lacks fails the spec that needed it.
	refusedBefore := len(forbiddenLines(suite.hubs))
	t.Cleanup(func() {
		if bad := forbiddenLines(suite.hubs); len(bad) > refusedBefore {
			t.Errorf("the hub's identity was refused on the hub (deploy/rbac lacks a permission):\n%s", strings.Join(bad[refusedBefore:], "\n"))
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 3*suite.fleet.Intervals.Ready+5*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// The specs run one after the other (no t.Parallel) on the one fleet; the
// spec that stops a member runs last.

func TestCreateReady(t *testing.T) {
	CreateReadySpec(specContext(t), CreateReadyInput{T: t, Fleet: suite.fleet})
}

func TestScale(t *testing.T) {
	ScaleSpec(specContext(t), ScaleInput{T: t, Fleet: suite.fleet})
}

func TestRollout(t *testing.T) {
	RolloutSpec(specContext(t), RolloutInput{T: t, Fleet: suite.fleet, MaxUnavailable: 1})
}

func TestKubectlWait(t *testing.T) {
	KubectlWaitSpec(specContext(t), KubectlWaitInput{T: t, Fleet: suite.fleet})
}

func TestRotation(t *testing.T) {
	RotationSpec(specContext(t), RotationInput{T: t, Fleet: suite.fleet})
}

func TestFinalBackup(t *testing.T) {
	FinalBackupSpec(specContext(t), FinalBackupInput{T: t, Fleet: suite.fleet})
}

func TestOnDemandBackup(t *testing.T) {
	OnDemandBackupSpec(specContext(t), OnDemandBackupInput{T: t, Fleet: suite.fleet})
}

func TestDelete(t *testing.T) {
	DeleteSpec(specContext(t), DeleteInput{T: t, Fleet: suite.fleet})
}

func TestRetain(t *testing.T) {
	RetainSpec(specContext(t), RetainInput{T: t, Fleet: suite.fleet})
}

func TestCNPGOverride(t *testing.T) {
	CNPGOverrideSpec(specContext(t), CNPGInput{T: t, Fleet: suite.fleet})
}

func TestCNPGDelete(t *testing.T) {
	CNPGDeleteSpec(specContext(t), CNPGInput{T: t, Fleet: suite.fleet})
}

func TestCNPGMissing(t *testing.T) {
	in := CNPGInput{T: t, Fleet: suite.fleet, HubNamespace: *flagHubNamespace}
	if suite.hubs == nil {
		in.HubServer = "https://kubernetes.default.svc" // the hub runs in the hub cluster
	}
	CNPGMissingSpec(specContext(t), in)
}

func TestTopology(t *testing.T) {
	TopologySpec(specContext(t), TopologyInput{T: t, Fleet: suite.fleet})
}

func TestFailover(t *testing.T) {
	in := FailoverInput{T: t, Fleet: suite.fleet, Hubs: suite.hubs, Databases: 20, HubArgs: *flagHubArgs}
	if suite.audit != nil {
		in.AuditLog = suite.audit.AuditLog
	}
	FailoverSpec(specContext(t), in)
}

func TestCLI(t *testing.T) {
	ctx := specContext(t)
	CLISpec(ctx, CLIInput{T: t, Fleet: suite.fleet, CLI: BuildCLI(ctx, t, suite.workDir)})
}

func TestCLIWatch(t *testing.T) {
	ctx := specContext(t)
	CLIWatchSpec(ctx, CLIInput{T: t, Fleet: suite.fleet, CLI: BuildCLI(ctx, t, suite.workDir)})
}

func TestUnreachable(t *testing.T) {
	UnreachableSpec(specContext(t), UnreachableInput{T: t, Fleet: suite.fleet})
}

func cmpOr(v, def string) string {
	if v == "" {
		return def
	}
	return v
}

func logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, format+"\n", args...)
}

// TestRefusedHubPattern: the lines forbiddenLines looks for are the hub API
// server refusing the hub's identity, in client-go's and in the hub's log
// format, and not a member refusing the hub's member identity.
func TestRefusedHubPattern(t *testing.T) {
	for _, tc := range []struct {
		line string
		want bool
	}{
		{want: true, line: `W1201 03:10:00.000000 123 reflector.go:561] failed to list *v1.Secret: secrets is forbidden: ` +
			`User "system:serviceaccount:fleetdb-system:fleetdb-hub" cannot list resource "secrets" in API group "" at the cluster scope`},
		{want: true, line: `{"level":"error","msg":"Reconciler error","error":"databases.fleetdb.io \"x\" is forbidden: ` +
			`User \"system:serviceaccount:fleetdb-system:fleetdb-hub\" cannot patch resource \"databases/status\""}`},
		{want: false, line: `{"level":"error","msg":"Reconciler error","cluster":"member-1","error":"statefulsets.apps \"x\" is forbidden: ` +
			`User \"system:serviceaccount:fleetdb-system:fleetdb-hub-agent\" cannot create resource"}`},
		{want: false, line: `{"level":"info","msg":"Starting workers","controller":"database"}`},
	} {
		if got := refusedHub.MatchString(tc.line); got != tc.want {
			t.Errorf("refusedHub.MatchString(%q) = %t, want %t", tc.line, got, tc.want)
		}
	}
}

// TestAgePattern: every age the CLI prints (kubectl's HumanDuration) is one
// AGE to the golden files, compound ones too (a member last probed 3m1s ago
// failed TestCLI's golden once a fail-over left its lastProbeTime alone).
func TestAgePattern(t *testing.T) {
	for in, want := range map[string]string{
		"0s": "AGE", "63s": "AGE", "3m1s": "AGE", "5m": "AGE", "2d4h": "AGE", "3y": "AGE",
		"1/1": "1/1", "-/1": "-/1", "member-1": "member-1", "5ms ago": "5ms ago",
	} {
		if got := ageRE.ReplaceAllString(in, "AGE"); got != want {
			t.Errorf("ageRE on %q = %q, want %q", in, got, want)
		}
	}
}
