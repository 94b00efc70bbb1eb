package e2e

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"sync"
	"syscall"

	"github.com/fleetdb/fleetdb/test/localfleet"
)

// The local fleet (test/localfleet) stops and starts its members' control planes.
var _ MemberControl = &localfleet.Fleet{}

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
