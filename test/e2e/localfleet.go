package e2e

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// LocalFleetOptions configure a local fleet (hack/fleet.sh).
type LocalFleetOptions struct {
	// RepoRoot is the fleetdb checkout.
	RepoRoot string
	// Dir is the fleet's own FLEET_DIR; the suite uses a fresh temporary
	// folder so that it never touches a developer's `make run` fleet.
	Dir string
	// Prefix is FLEET_PREFIX, the prefix of the kwokctl cluster names.
	Prefix string
	// Members is FLEET_MEMBERS.
	Members int
	// Log receives hack/fleet.sh's progress output.
	Log io.Writer
}

// LocalFleet is a hub and members as kwokctl "binary" clusters, brought up
// and torn down with hack/fleet.sh.
type LocalFleet struct {
	opts LocalFleetOptions
	// HubKubeconfig is the hub's admin kubeconfig.
	HubKubeconfig string
	// MemberKubeconfigs are the members' admin kubeconfigs, "member-1" first.
	MemberKubeconfigs []NamedPath
	// ToolsDir holds the toolchain (kubectl, kwokctl, ...).
	ToolsDir string

	mu sync.Mutex
	// held are the port reservations of stopped members.
	held map[string]func()
}

// NamedPath is a member name with the path of its kubeconfig.
type NamedPath struct{ Name, Path string }

// StartLocalFleet runs `hack/fleet.sh up` (which builds the toolchain with
// hack/toolchain.sh first when it is missing) and reads the kubeconfig paths
// from `hack/fleet.sh env`.
func StartLocalFleet(ctx context.Context, opts LocalFleetOptions) (*LocalFleet, error) {
	f := &LocalFleet{opts: opts}
	tools, err := f.run(ctx, nil, filepath.Join(opts.RepoRoot, "hack", "toolchain.sh"))
	if err != nil {
		return f, fmt.Errorf("toolchain: %w", err)
	}
	f.ToolsDir = strings.TrimSpace(tools)
	if _, err := f.run(ctx, opts.Log, f.fleetScript(), "up"); err != nil {
		return f, fmt.Errorf("hack/fleet.sh up: %w", err)
	}
	out, err := f.run(ctx, nil, f.fleetScript(), "env")
	if err != nil {
		return f, fmt.Errorf("hack/fleet.sh env: %w", err)
	}
	for _, line := range strings.Split(out, "\n") {
		k, v, _ := strings.Cut(strings.TrimSpace(line), "=")
		switch k {
		case "HUB_KUBECONFIG":
			f.HubKubeconfig = v
		case "MEMBER_KUBECONFIGS":
			if f.MemberKubeconfigs, err = ParseMemberKubeconfigs(v); err != nil {
				return f, fmt.Errorf("hack/fleet.sh env: %w", err)
			}
		}
	}
	if f.HubKubeconfig == "" || len(f.MemberKubeconfigs) == 0 {
		return f, fmt.Errorf("hack/fleet.sh env printed no kubeconfigs: %q", out)
	}
	return f, nil
}

// Env is the environment hack/fleet.sh and kwokctl need to find this fleet.
func (o LocalFleetOptions) Env() []string {
	return []string{
		"FLEET_DIR=" + o.Dir,
		"FLEET_PREFIX=" + o.Prefix,
		"FLEET_MEMBERS=" + strconv.Itoa(o.Members),
		// hack/fleet.sh derives it from FLEET_DIR; kwokctl run directly needs it.
		"KWOK_WORKDIR=" + filepath.Join(o.Dir, "kwok"),
		// No node leases: a kwok controller restarted by StartMember gets a new
		// identity and, with leases, manages no node until the old leases
		// expire (200s with kwokctl's defaults), so pods on a restarted member
		// would stay Pending for minutes — an artefact of simulated nodes (real
		// kubelets keep running while their control plane is down). Without
		// leases kwok manages its nodes from the start and keeps them Ready
		// with status heartbeats.
		"FLEET_KWOKCTL_ARGS=--node-lease-duration-seconds=0",
	}
}

func (f *LocalFleet) fleetScript() string { return filepath.Join(f.opts.RepoRoot, "hack", "fleet.sh") }

// SaveLogs copies the clusters' component logs (etcd, kube-apiserver,
// kube-controller-manager, kube-scheduler, kwok-controller) to dst, since
// Stop removes them with the fleet.
func (f *LocalFleet) SaveLogs(dst string) error {
	clusters, err := filepath.Glob(filepath.Join(f.opts.Dir, "kwok", "clusters", "*", "logs"))
	if err != nil {
		return err
	}
	var errs []error
	for _, logs := range clusters {
		to := filepath.Join(dst, filepath.Base(filepath.Dir(logs)))
		if err := os.MkdirAll(filepath.Dir(to), 0o755); err != nil {
			return err
		}
		if b, err := exec.CommandContext(context.Background(), "cp", "-r", logs, to).CombinedOutput(); err != nil {
			errs = append(errs, fmt.Errorf("cp %s: %w: %s", logs, err, b))
		}
	}
	return errors.Join(errs...)
}

// Stop runs `hack/fleet.sh down`, then ends any process still running from
// the fleet's folder (found by its command line, ended by its pid): a fleet
// test run must not leave control planes behind.
func (f *LocalFleet) Stop(ctx context.Context) error {
	f.mu.Lock()
	for name, release := range f.held {
		release()
		delete(f.held, name)
	}
	f.mu.Unlock()
	_, err := f.run(ctx, f.opts.Log, f.fleetScript(), "down")
	if left := KillProcessesUnder(f.opts.Dir); len(left) > 0 {
		err = errors.Join(err, fmt.Errorf("hack/fleet.sh down left processes behind, killed: %v", left))
	}
	return err
}

// StopMember stops a member's control plane (kwokctl stop cluster): its API
// server no longer answers, as with a dead cluster. Until StartMember the
// cluster's ports stay reserved by this process (see holdPorts).
func (f *LocalFleet) StopMember(ctx context.Context, name string) error {
	cluster := f.opts.Prefix + "-" + name
	ports, err := kwokClusterPorts(filepath.Join(f.opts.Dir, "kwok", "clusters", cluster, "kwok.yaml"))
	if err != nil {
		return err
	}
	if _, err := f.run(ctx, f.opts.Log, filepath.Join(f.ToolsDir, "kwokctl"), "stop", "cluster", "--name", cluster); err != nil {
		return err
	}
	release, err := holdPorts(ports)
	if err != nil {
		return fmt.Errorf("reserving the ports of stopped %s: %w", cluster, err)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.held == nil {
		f.held = map[string]func(){}
	}
	f.held[name] = release
	return nil
}

// StartMember starts a stopped member again and waits for it to be ready.
func (f *LocalFleet) StartMember(ctx context.Context, name string) error {
	f.releasePorts(name)
	_, err := f.run(ctx, f.opts.Log, filepath.Join(f.ToolsDir, "kwokctl"), "start", "cluster", "--name", f.opts.Prefix+"-"+name, "--wait", "120s")
	return err
}

func (f *LocalFleet) releasePorts(name string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if release := f.held[name]; release != nil {
		release()
		delete(f.held, name)
	}
}

// kwokClusterPorts reads the host ports kwokctl gave a cluster's components
// from its kwok.yaml (etcdPort, kubeApiserverPort, kwokControllerPort, ...).
func kwokClusterPorts(path string) ([]int, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading the cluster's ports: %w", err)
	}
	var ports []int
	for _, m := range kwokPortRE.FindAllSubmatch(b, -1) {
		if p, err := strconv.Atoi(string(m[1])); err == nil && p > 0 {
			ports = append(ports, p)
		}
	}
	if len(ports) == 0 {
		return nil, fmt.Errorf("no ports in %s", path)
	}
	return ports, nil
}

var kwokPortRE = regexp.MustCompile(`(?m)^\s+(?:etcdPeerPort|etcdPort|kubeApiserverPort|kubeControllerManagerPort|kubeSchedulerPort|kwokControllerPort): (\d+)\s*$`)

// holdPorts keeps ports taken while a member is stopped and returns a func
// that frees them. kwokctl gives every cluster fixed host ports, chosen by
// probing for free ones, so while a member is stopped any other kwok fleet
// created on the machine (a developer's, a benchmark's) may take them, and
// the member cannot start again (seen on a shared machine: "bind: address
// already in use" from the restarted member's kwok-controller).
//
// The holder listens (a socket that only binds cannot take a port that still
// has connections in TIME_WAIT) and resets every connection at once, so a
// client of the stopped member gets "connection reset" rather than "refused":
// either way the member does not answer.
func holdPorts(ports []int) (func(), error) {
	var listeners []net.Listener
	release := func() {
		for _, l := range listeners {
			_ = l.Close()
		}
	}
	// kwokctl stop returns before its processes have let go of their ports.
	deadline := time.Now().Add(30 * time.Second)
	for _, p := range ports {
		var lc net.ListenConfig
		l, err := lc.Listen(context.Background(), "tcp", ":"+strconv.Itoa(p))
		for err != nil && time.Now().Before(deadline) {
			time.Sleep(100 * time.Millisecond)
			l, err = lc.Listen(context.Background(), "tcp", ":"+strconv.Itoa(p))
		}
		if err != nil {
			release()
			return nil, err
		}
		listeners = append(listeners, l)
		go func() {
			for {
				c, err := l.Accept()
				if err != nil {
					return
				}
				if tc, ok := c.(*net.TCPConn); ok {
					_ = tc.SetLinger(0) // RST, and no TIME_WAIT left on the port
				}
				_ = c.Close()
			}
		}()
	}
	return release, nil
}

var _ MemberControl = &LocalFleet{}

// run runs a command with the fleet's environment; stderr goes to log (or is
// kept for the error), stdout is returned.
func (f *LocalFleet) run(ctx context.Context, log io.Writer, name string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = f.opts.RepoRoot
	cmd.Env = append(os.Environ(), f.opts.Env()...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout = &stdout
	cmd.Stderr = &stderr
	if log != nil {
		cmd.Stderr = io.MultiWriter(&stderr, log)
	}
	if err := cmd.Run(); err != nil {
		return stdout.String(), fmt.Errorf("%s %s: %w: %s", filepath.Base(name), strings.Join(args, " "), err, tail(stderr.String(), 4000))
	}
	return stdout.String(), nil
}

// ParseMemberKubeconfigs parses "name=path,name=path".
func ParseMemberKubeconfigs(s string) ([]NamedPath, error) {
	var out []NamedPath
	for _, item := range strings.Split(s, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			continue
		}
		name, path, ok := strings.Cut(item, "=")
		if !ok || name == "" || path == "" {
			return nil, fmt.Errorf("member kubeconfig %q is not name=path", item)
		}
		out = append(out, NamedPath{Name: name, Path: path})
	}
	return out, nil
}

// KillProcessesUnder sends SIGKILL to every process whose command line
// mentions dir (a folder unique to this run) and returns them as "pid
// command". It reads /proc, so it does nothing where there is none.
func KillProcessesUnder(dir string) []string {
	if dir == "" {
		return nil
	}
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	var killed []string
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		cmdline, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil || !bytes.Contains(cmdline, []byte(dir)) {
			continue
		}
		if syscall.Kill(pid, syscall.SIGKILL) == nil {
			argv0, _, _ := bytes.Cut(cmdline, []byte{0})
			killed = append(killed, fmt.Sprintf("%d %s", pid, argv0))
		}
	}
	return killed
}

// ---- the hub as a child process ----

// BuildHub builds the hub binary from the checkout.
func BuildHub(ctx context.Context, repoRoot, out string) error {
	cmd := exec.CommandContext(ctx, "go", "build", "-o", out, "./hub/cmd/fleetdb-hub")
	cmd.Dir = repoRoot
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go build ./hub/cmd/fleetdb-hub: %w: %s", err, b)
	}
	return nil
}

// HubProcess is the hub binary running as a child of the test process.
type HubProcess struct {
	cmd     *exec.Cmd
	logFile *os.File
	// LogPath is where the hub's output goes.
	LogPath string
	done    chan struct{}
	waitErr error
	stop    sync.Once
}

// StartHub starts the hub binary against the hub kubeconfig with the
// suite's flags; its output goes to logPath.
func StartHub(binary, kubeconfig, logPath string, extraArgs ...string) (*HubProcess, error) {
	logFile, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	args := append([]string{
		"--kubeconfig", kubeconfig,
		"--metrics-bind-address", "127.0.0.1:0",
		"--health-probe-bind-address", "127.0.0.1:0",
		"--probe-interval", "1s",
		"--probe-grace-period", "3s",
	}, extraArgs...)
	// Not tied to a context: the hub lives until Stop.
	cmd := exec.CommandContext(context.Background(), binary, args...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	// Its own process group: a Ctrl-C reaches the test process, which stops
	// the hub after the specs' cleanups, not before.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		_ = logFile.Close()
		return nil, fmt.Errorf("starting the hub: %w", err)
	}
	h := &HubProcess{cmd: cmd, logFile: logFile, LogPath: logPath, done: make(chan struct{})}
	go func() {
		h.waitErr = cmd.Wait()
		close(h.done)
	}()
	return h, nil
}

// Pid is the hub's process id.
func (h *HubProcess) Pid() int { return h.cmd.Process.Pid }

// Exited reports whether the hub process ended, and how.
func (h *HubProcess) Exited() (bool, error) {
	select {
	case <-h.done:
		return true, h.waitErr
	default:
		return false, nil
	}
}

// Stop sends SIGTERM, waits up to 20s for a clean exit, then kills.
func (h *HubProcess) Stop() {
	h.stop.Do(func() {
		_ = h.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-h.done:
		case <-time.After(20 * time.Second):
			_ = h.cmd.Process.Kill()
			<-h.done
		}
		_ = h.logFile.Close()
	})
}

// ---- the watchdog ----

// watchdogScript runs in its own process group with the test process holding
// its stdin. It learns pids to end ("pid N") and exits quietly on "done". If
// stdin ends without "done" the test process died without cleaning up (a
// panic, `go test -timeout`, SIGKILL): it ends those pids, runs the teardown
// command and ends whatever still runs from the run's folder.
const watchdogScript = `
pids=""
while IFS= read -r line; do
	case "$line" in
	"pid "*) pids="$pids ${line#pid }" ;;
	done) exit 0 ;;
	esac
done
echo "e2e watchdog: the test process ended without cleaning up; cleaning up" >&2
for p in $pids; do kill -TERM "$p" 2>/dev/null || true; done
if [ -n "$E2E_TEARDOWN" ]; then $E2E_TEARDOWN || true; fi
if [ -n "$E2E_RUN_DIR" ] && [ -d /proc ]; then
	for p in /proc/[0-9]*; do
		cmd=$(tr '\0' ' ' <"$p/cmdline" 2>/dev/null) || continue
		case "$cmd" in *"$E2E_RUN_DIR"*) kill -KILL "${p#/proc/}" 2>/dev/null || true ;; esac
	done
fi
if [ -n "$E2E_RUN_DIR" ]; then rm -f "$E2E_RUN_DIR/fleetdb-hub"; fi
echo "e2e watchdog: done" >&2
`

// Watchdog is a helper process that cleans up after the test process if it
// dies without doing so itself: TestMain's defers do not run when a test
// panics or `go test -timeout` fires.
type Watchdog struct {
	cmd *exec.Cmd
	in  io.WriteCloser
	mu  sync.Mutex
}

// StartWatchdog starts the watchdog. teardown is a shell command line run
// on an unclean exit (may be empty); runDir, when set, is the run's unique
// folder: processes mentioning it are killed after the teardown. env is
// added to the watchdog's environment; its output goes to logPath.
func StartWatchdog(teardown, runDir, logPath string, env []string) (*Watchdog, error) {
	logFile, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	defer logFile.Close() // the child has its own descriptor
	// Not tied to a context: it must outlive everything in this process.
	cmd := exec.CommandContext(context.Background(), "bash", "-c", watchdogScript)
	cmd.Env = append(append(os.Environ(), env...), "E2E_TEARDOWN="+teardown, "E2E_RUN_DIR="+runDir)
	// Never the test's stdout: a watchdog writing to a pipe whose reader is
	// gone would die of SIGPIPE halfway through the cleanup.
	cmd.Stdout, cmd.Stderr = logFile, logFile
	// Its own process group, so that a Ctrl-C aimed at `go test` does not end it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	in, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting the watchdog: %w", err)
	}
	return &Watchdog{cmd: cmd, in: in}, nil
}

// Track asks the watchdog to end pid on an unclean exit.
func (w *Watchdog) Track(pid int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	_, _ = fmt.Fprintf(w.in, "pid %d\n", pid)
}

// Release tells the watchdog that the test process cleaned up itself.
func (w *Watchdog) Release() {
	w.mu.Lock()
	defer w.mu.Unlock()
	_, _ = io.WriteString(w.in, "done\n")
	_ = w.in.Close()
	_ = w.cmd.Wait()
}

// ---- small helpers ----

func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return "..." + s[len(s)-n:]
}

// TailFile returns at most the last n bytes of a file, starting at a line.
func TailFile(path string, n int64) string {
	fd, err := os.Open(path)
	if err != nil {
		return fmt.Sprintf("(cannot read %s: %v)", path, err)
	}
	defer fd.Close()
	st, err := fd.Stat()
	if err != nil {
		return err.Error()
	}
	off := max(st.Size()-n, 0)
	if _, err := fd.Seek(off, io.SeekStart); err != nil {
		return err.Error()
	}
	r := bufio.NewReader(fd)
	if off > 0 {
		_, _ = r.ReadString('\n') // skip a partial line
	}
	b, _ := io.ReadAll(r)
	return string(b)
}
