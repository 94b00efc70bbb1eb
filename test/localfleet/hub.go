package localfleet

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"syscall"
	"time"
)

// BuildHub builds the hub binary from the checkout at repoRoot into out;
// the compiler's output goes to log (nil: into the error).
func BuildHub(ctx context.Context, repoRoot, out string, log io.Writer) error {
	cmd := exec.CommandContext(ctx, "go", "build", "-o", out, "./cmd/fleetdb-hub")
	cmd.Dir = repoRoot
	var output bytes.Buffer
	cmd.Stdout, cmd.Stderr = &output, &output
	if log != nil {
		cmd.Stdout, cmd.Stderr = log, log
	}
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("go build ./cmd/fleetdb-hub: %w: %s", err, output.String())
	}
	return nil
}

// HubOptions say how to run the hub binary.
type HubOptions struct {
	// Binary is the hub binary (BuildHub).
	Binary string
	// Kubeconfig is the hub cluster's kubeconfig.
	Kubeconfig string
	// LogPath is where the hub's output goes.
	LogPath string
	// ReplicaName, when set, is the hub's --replica-name: its Lease
	// holderIdentity and its user agents start with ReplicaName + "_".
	ReplicaName string
	// Args are further flags (probe interval, workers, ...).
	Args []string
	// StopGrace is how long Stop waits for a clean exit after SIGTERM
	// before it kills the hub's process group (default 20 s).
	StopGrace time.Duration
}

// HubProcess is the hub binary running as a child process, in its own
// process group: a Ctrl-C reaches the parent, which stops the hub in order.
type HubProcess struct {
	cmd     *exec.Cmd
	logFile *os.File
	grace   time.Duration
	// LogPath is where the hub's output goes.
	LogPath string
	// ReplicaName is HubOptions.ReplicaName.
	ReplicaName string
	// MetricsURL is the hub's Prometheus endpoint.
	MetricsURL string
	done       chan struct{}
	waitErr    error
}

// StartHub starts the hub on free local ports for its metrics and health
// endpoints. It does not wait for the hub: see WaitReady.
func StartHub(opts HubOptions) (*HubProcess, error) {
	mport, err := FreePort()
	if err != nil {
		return nil, err
	}
	hport, err := FreePort()
	if err != nil {
		return nil, err
	}
	logFile, err := os.Create(opts.LogPath)
	if err != nil {
		return nil, err
	}
	args := append([]string{
		"--kubeconfig", opts.Kubeconfig,
		// Plain HTTP on loopback: the bench and e2e scrape it without a token.
		"--metrics-bind-address", fmt.Sprintf("127.0.0.1:%d", mport), "--metrics-secure=false",
		"--health-probe-bind-address", fmt.Sprintf("127.0.0.1:%d", hport),
	}, opts.Args...)
	if opts.ReplicaName != "" {
		args = append(args, "--replica-name", opts.ReplicaName)
	}
	// Not tied to a context: the hub lives until Stop.
	cmd := exec.CommandContext(context.Background(), opts.Binary, args...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		_ = logFile.Close()
		return nil, fmt.Errorf("starting the hub: %w", err)
	}
	h := &HubProcess{
		cmd: cmd, logFile: logFile, grace: opts.StopGrace, LogPath: opts.LogPath, ReplicaName: opts.ReplicaName,
		MetricsURL: fmt.Sprintf("http://127.0.0.1:%d/metrics", mport), done: make(chan struct{}),
	}
	if h.grace <= 0 {
		h.grace = 20 * time.Second
	}
	go func() {
		h.waitErr = cmd.Wait()
		_ = logFile.Close()
		close(h.done)
	}()
	return h, nil
}

// WaitReady waits until the hub's metrics endpoint answers; an error when
// the hub exits first or timeout passes.
func (h *HubProcess) WaitReady(ctx context.Context, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	for {
		if exited, err := h.Exited(); exited {
			return fmt.Errorf("the hub exited at start (%w); see %s", err, h.LogPath)
		}
		if h.metricsAnswer(ctx) {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("the hub's metrics endpoint did not answer within %s; see %s", timeout, h.LogPath)
		case <-h.done:
		case <-tick.C:
		}
	}
}

func (h *HubProcess) metricsAnswer(ctx context.Context) bool {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, h.MetricsURL, nil)
	if err != nil {
		return false
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return false
	}
	_ = resp.Body.Close()
	return resp.StatusCode == http.StatusOK
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

// Stop sends SIGTERM, waits up to the stop grace for a clean exit, then
// kills the hub's process group. It may be called more than once.
func (h *HubProcess) Stop() {
	if h == nil {
		return
	}
	if exited, _ := h.Exited(); exited {
		return
	}
	_ = h.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-h.done:
	case <-time.After(h.grace):
		_ = syscall.Kill(-h.cmd.Process.Pid, syscall.SIGKILL)
		<-h.done
	}
}

// Kill ends the hub with SIGKILL, as a crash or a lost node would: no clean
// shutdown, its Lease is not released. It returns when the process is gone.
func (h *HubProcess) Kill() error {
	if h == nil {
		return errors.New("no hub")
	}
	if exited, _ := h.Exited(); exited {
		return errors.New("the hub had exited already")
	}
	// The process group: the hub and anything it started.
	if err := syscall.Kill(-h.cmd.Process.Pid, syscall.SIGKILL); err != nil {
		return fmt.Errorf("killing the hub: %w", err)
	}
	<-h.done
	return nil
}

// FreePort is a free TCP port on the loopback address.
func FreePort() (int, error) {
	ln, err := (&net.ListenConfig{}).Listen(context.Background(), "tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	addr, ok := ln.Addr().(*net.TCPAddr)
	if !ok {
		return 0, errors.New("no TCP address")
	}
	return addr.Port, nil
}
