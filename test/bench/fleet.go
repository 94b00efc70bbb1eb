package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// fleet is the benchmark's own local fleet, run by hack/fleet.sh.
type fleet struct {
	root    string // repository
	dir     string // FLEET_DIR
	prefix  string // FLEET_PREFIX
	members int
	log     io.Writer

	hubKubeconfig     string
	memberKubeconfigs map[string]string // name -> path
	memberNames       []string
}

func (f *fleet) env() []string {
	return append(os.Environ(),
		"FLEET_DIR="+f.dir,
		"FLEET_PREFIX="+f.prefix,
		fmt.Sprintf("FLEET_MEMBERS=%d", f.members),
		"FLEET_AUDIT_POLICY="+filepath.Join(f.dir, "audit-policy.yaml"),
	)
}

// script runs hack/fleet.sh in its own process group: a Ctrl-C on the
// terminal reaches the benchmark only, which then tears down in order.
// Cancelling ctx kills the whole group.
func (f *fleet) script(ctx context.Context, arg string) (string, error) {
	cmd := exec.CommandContext(ctx, "bash", filepath.Join(f.root, "hack", "fleet.sh"), arg)
	cmd.Dir = f.root
	cmd.Env = f.env()
	var out bytes.Buffer
	cmd.Stdout = &out
	cmd.Stderr = f.log
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 10 * time.Second
	err := cmd.Run()
	return out.String(), err
}

func (f *fleet) up(ctx context.Context) error {
	if err := os.MkdirAll(f.dir, 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(f.dir, "audit-policy.yaml"), []byte(auditPolicy), 0o644); err != nil {
		return err
	}
	// kwokctl picks free ports when it creates a cluster; another fleet being
	// created on the machine at the same time can take one first. Start over
	// once in that case.
	for attempt := 1; ; attempt++ {
		_, err := f.script(ctx, "up")
		if err == nil {
			break
		}
		if attempt == 3 || ctx.Err() != nil {
			return fmt.Errorf("hack/fleet.sh up: %w (see the fleet log)", err)
		}
		fmt.Fprintf(f.log, "bench: hack/fleet.sh up failed (%v); removing the fleet and trying again\n", err)
		logf("hack/fleet.sh up failed (%v); removing the fleet and trying again", err)
		if err := f.down(); err != nil {
			return fmt.Errorf("hack/fleet.sh down after a failed up: %w", err)
		}
		if err := os.MkdirAll(f.dir, 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(f.dir, "audit-policy.yaml"), []byte(auditPolicy), 0o644); err != nil {
			return err
		}
	}
	out, err := f.script(ctx, "env")
	if err != nil {
		return fmt.Errorf("hack/fleet.sh env: %w", err)
	}
	f.memberKubeconfigs = map[string]string{}
	for line := range strings.SplitSeq(out, "\n") {
		k, v, ok := strings.Cut(strings.TrimSpace(line), "=")
		if !ok {
			continue
		}
		switch k {
		case "HUB_KUBECONFIG":
			f.hubKubeconfig = v
		case "MEMBER_KUBECONFIGS":
			for pair := range strings.SplitSeq(v, ",") {
				name, path, ok := strings.Cut(pair, "=")
				if ok {
					f.memberKubeconfigs[name] = path
					f.memberNames = append(f.memberNames, name)
				}
			}
		}
	}
	if f.hubKubeconfig == "" || len(f.memberNames) != f.members {
		return fmt.Errorf("hack/fleet.sh env printed no usable kubeconfigs: %q", out)
	}
	return nil
}

// down removes the fleet; it ignores ctx cancellation on purpose.
func (f *fleet) down() error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	_, err := f.script(ctx, "down")
	return err
}

// auditLog is where kwokctl's binary runtime writes a cluster's audit log.
func (f *fleet) auditLog(cluster string) string {
	return filepath.Join(f.dir, "kwok", "clusters", f.prefix+"-"+cluster, "logs", "audit.log")
}

// hubProcess is the fleetdb hub, run as a separate process.
type hubProcess struct {
	cmd        *exec.Cmd
	pid        int
	metricsURL string
	exited     chan struct{}
	err        error
}

func buildHub(ctx context.Context, root, out string, log io.Writer) error {
	cmd := exec.CommandContext(ctx, "go", "build", "-o", out, "./hub/cmd/fleetdb-hub")
	cmd.Dir = root
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("building the hub: %w", err)
	}
	return nil
}

func freePort() (int, error) {
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

func startHub(ctx context.Context, bin, kubeconfig string, probeInterval time.Duration, extra []string, logPath string) (*hubProcess, error) {
	mport, err := freePort()
	if err != nil {
		return nil, err
	}
	hport, err := freePort()
	if err != nil {
		return nil, err
	}
	logf, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	args := append([]string{
		"--kubeconfig", kubeconfig,
		"--metrics-bind-address", fmt.Sprintf("127.0.0.1:%d", mport),
		"--health-probe-bind-address", fmt.Sprintf("127.0.0.1:%d", hport),
		"--probe-interval", probeInterval.String(),
	}, extra...)
	// Not bound to ctx: on Ctrl-C the hub is stopped in order (stop), not killed.
	cmd := exec.CommandContext(context.WithoutCancel(ctx), bin, args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.Env = os.Environ()
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		_ = logf.Close()
		return nil, fmt.Errorf("starting the hub: %w", err)
	}
	h := &hubProcess{cmd: cmd, pid: cmd.Process.Pid, metricsURL: fmt.Sprintf("http://127.0.0.1:%d/metrics", mport), exited: make(chan struct{})}
	go func() {
		h.err = cmd.Wait()
		_ = logf.Close()
		close(h.exited)
	}()
	// Ready when the metrics endpoint answers.
	err = waitFor(ctx, 60*time.Second, "the hub's metrics endpoint", func() bool {
		select {
		case <-h.exited:
			return true
		default:
		}
		_, err := httpGet(ctx, h.metricsURL)
		return err == nil
	})
	select {
	case <-h.exited:
		return nil, fmt.Errorf("the hub exited at start (%w); see %s", h.err, logPath)
	default:
	}
	if err != nil {
		h.stop()
		return nil, err
	}
	return h, nil
}

func (h *hubProcess) alive() bool {
	select {
	case <-h.exited:
		return false
	default:
		return true
	}
}

// stop ends the hub: SIGTERM, then SIGKILL of its process group after 15 s.
func (h *hubProcess) stop() {
	if h == nil || !h.alive() {
		return
	}
	_ = syscall.Kill(h.pid, syscall.SIGTERM)
	select {
	case <-h.exited:
	case <-time.After(15 * time.Second):
		_ = syscall.Kill(-h.pid, syscall.SIGKILL)
		<-h.exited
	}
}

func (h *hubProcess) metrics(ctx context.Context) ([]promSample, error) {
	text, err := httpGet(ctx, h.metricsURL)
	if err != nil {
		return nil, err
	}
	return parseProm(text), nil
}

// heapMin samples go_memstats_heap_alloc_bytes n times over d and returns the
// smallest value: the closest to the live heap right after a collection.
func (h *hubProcess) heapMin(ctx context.Context, n int, d time.Duration) float64 {
	best := 0.0
	for i := range n {
		if s, err := h.metrics(ctx); err == nil {
			if v := sumProm(s, "go_memstats_heap_alloc_bytes", nil); v > 0 && (best == 0 || v < best) {
				best = v
			}
		}
		if i < n-1 {
			select {
			case <-ctx.Done():
				return best
			case <-time.After(d / time.Duration(n)):
			}
		}
	}
	return best
}
