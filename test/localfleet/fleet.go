// Package localfleet runs fleetdb's local fleet (a hub and members as kwokctl
// "binary" clusters, brought up and torn down with hack/fleet.sh) and the hub
// binary as a child process: the harness the e2e suite (-e2e.fleet=local)
// and the benchmark share.
package localfleet

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Options configure a local fleet (hack/fleet.sh).
type Options struct {
	// RepoRoot is the fleetdb checkout.
	RepoRoot string
	// Dir is the fleet's own FLEET_DIR: a fresh folder, so that the fleet
	// never touches a developer's `make run` fleet.
	Dir string
	// Prefix is FLEET_PREFIX, the prefix of the kwokctl cluster names.
	Prefix string
	// Members is FLEET_MEMBERS.
	Members int
	// ExtraEnv is added to the environment of hack/fleet.sh and kwokctl
	// (e.g. FLEET_KWOKCTL_ARGS, FLEET_AUDIT_POLICY).
	ExtraEnv []string
	// Files are written into Dir (name relative to Dir -> content) before
	// the fleet is brought up.
	Files map[string][]byte
	// Attempts is how often `hack/fleet.sh up` is tried (default 1): kwokctl
	// picks free ports when it creates a cluster, and another fleet being
	// created on the machine at the same time can take one first. A failed
	// attempt removes the fleet before the next.
	Attempts int
	// Log receives hack/fleet.sh's progress output.
	Log io.Writer
}

// Fleet is a running local fleet.
type Fleet struct {
	opts Options
	// HubKubeconfig is the hub's admin kubeconfig.
	HubKubeconfig string
	// HubIdentityKubeconfig is the hub's own identity (deploy/rbac's
	// ServiceAccount with its long-lived token): run the hub with it.
	HubIdentityKubeconfig string
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

// Start runs `hack/fleet.sh up` (which builds the toolchain with
// hack/toolchain.sh first when it is missing) and reads the kubeconfig paths
// from `hack/fleet.sh env`. On an error the returned Fleet can still Stop
// what was started.
func Start(ctx context.Context, opts Options) (*Fleet, error) {
	f := &Fleet{opts: opts}
	tools, err := f.run(ctx, nil, filepath.Join(opts.RepoRoot, "hack", "toolchain.sh"))
	if err != nil {
		return f, fmt.Errorf("toolchain: %w", err)
	}
	f.ToolsDir = strings.TrimSpace(tools)
	if err := f.up(ctx); err != nil {
		return f, err
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
		case "HUB_IDENTITY_KUBECONFIG":
			f.HubIdentityKubeconfig = v
		case "MEMBER_KUBECONFIGS":
			if f.MemberKubeconfigs, err = ParseMemberKubeconfigs(v); err != nil {
				return f, fmt.Errorf("hack/fleet.sh env: %w", err)
			}
		}
	}
	if f.HubKubeconfig == "" || f.HubIdentityKubeconfig == "" || len(f.MemberKubeconfigs) == 0 {
		return f, fmt.Errorf("hack/fleet.sh env printed no kubeconfigs: %q", out)
	}
	return f, nil
}

// up runs `hack/fleet.sh up` up to opts.Attempts times.
func (f *Fleet) up(ctx context.Context) error {
	for attempt := 1; ; attempt++ {
		err := f.writeFiles()
		if err == nil {
			_, err = f.run(ctx, f.opts.Log, f.fleetScript(), "up")
		}
		if err == nil {
			return nil
		}
		if attempt >= max(f.opts.Attempts, 1) || ctx.Err() != nil {
			return fmt.Errorf("hack/fleet.sh up: %w", err)
		}
		if f.opts.Log != nil {
			fmt.Fprintf(f.opts.Log, "localfleet: hack/fleet.sh up failed (%v); removing the fleet and trying again\n", err)
		}
		if _, err := f.run(ctx, f.opts.Log, f.fleetScript(), "down"); err != nil {
			return fmt.Errorf("hack/fleet.sh down after a failed up: %w", err)
		}
	}
}

func (f *Fleet) writeFiles() error {
	if err := os.MkdirAll(f.opts.Dir, 0o755); err != nil {
		return err
	}
	for name, content := range f.opts.Files {
		if err := os.WriteFile(filepath.Join(f.opts.Dir, name), content, 0o644); err != nil {
			return err
		}
	}
	return nil
}

// Env is the environment hack/fleet.sh and kwokctl need to find this fleet.
func (o Options) Env() []string {
	return append([]string{
		"FLEET_DIR=" + o.Dir,
		"FLEET_PREFIX=" + o.Prefix,
		"FLEET_MEMBERS=" + strconv.Itoa(o.Members),
		// hack/fleet.sh derives it from FLEET_DIR; kwokctl run directly needs it.
		"KWOK_WORKDIR=" + filepath.Join(o.Dir, "kwok"),
	}, o.ExtraEnv...)
}

func (f *Fleet) fleetScript() string { return filepath.Join(f.opts.RepoRoot, "hack", "fleet.sh") }

// MemberNames are the members' names, "member-1" first.
func (f *Fleet) MemberNames() []string {
	out := make([]string, 0, len(f.MemberKubeconfigs))
	for _, m := range f.MemberKubeconfigs {
		out = append(out, m.Name)
	}
	return out
}

// AuditLog is where kwokctl's binary runtime writes a cluster's audit log
// (cluster is "hub" or a member's name).
func (f *Fleet) AuditLog(cluster string) string {
	return filepath.Join(f.opts.Dir, "kwok", "clusters", f.opts.Prefix+"-"+cluster, "logs", "audit.log")
}

// SaveLogs copies the clusters' component logs (etcd, kube-apiserver,
// kube-controller-manager, kube-scheduler, kwok-controller) to dst, since
// Stop removes them with the fleet.
func (f *Fleet) SaveLogs(dst string) error {
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
func (f *Fleet) Stop(ctx context.Context) error {
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

// Down runs `hack/fleet.sh down`, bounded by five minutes whatever ctx says
// (a fleet must come down after a Ctrl-C too).
func (f *Fleet) Down() error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	_, err := f.run(ctx, f.opts.Log, f.fleetScript(), "down")
	return err
}

// StopMember stops a member's control plane (kwokctl stop cluster): its API
// server no longer answers, as with a dead cluster. Until StartMember the
// cluster's ports stay reserved by this process (see holdPorts).
func (f *Fleet) StopMember(ctx context.Context, name string) error {
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
func (f *Fleet) StartMember(ctx context.Context, name string) error {
	f.releasePorts(name)
	_, err := f.run(ctx, f.opts.Log, filepath.Join(f.ToolsDir, "kwokctl"), "start", "cluster", "--name", f.opts.Prefix+"-"+name, "--wait", "120s")
	return err
}

func (f *Fleet) releasePorts(name string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if release := f.held[name]; release != nil {
		release()
		delete(f.held, name)
	}
}

// run runs a command with the fleet's environment in its own process group
// (a Ctrl-C on the terminal reaches the caller, which tears down in order;
// cancelling ctx ends the whole group). stderr goes to log (or is kept for
// the error), stdout is returned.
func (f *Fleet) run(ctx context.Context, log io.Writer, name string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = f.opts.RepoRoot
	cmd.Env = append(os.Environ(), f.opts.Env()...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout = &stdout
	cmd.Stderr = &stderr
	if log != nil {
		cmd.Stderr = io.MultiWriter(&stderr, log)
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 10 * time.Second
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

func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return "..." + s[len(s)-n:]
}
