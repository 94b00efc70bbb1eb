package localfleet

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"time"
)

// Kill ends the hub at once with SIGKILL (no graceful shutdown: a crash, an
// OOM kill, a node lost) and waits for the process to be gone. It may be
// called more than once.
func (h *HubProcess) Kill() {
	if h == nil {
		return
	}
	if exited, _ := h.Exited(); exited {
		return
	}
	_ = syscall.Kill(-h.cmd.Process.Pid, syscall.SIGKILL)
	select {
	case <-h.done:
	case <-time.After(30 * time.Second):
	}
}

// FreezeMember stops (SIGSTOP) the kube-apiserver of a member: it keeps its
// connections and ports but answers nothing, as an API server that hangs
// (rather than one that is gone, see StopMember). ThawMember resumes it.
func (f *Fleet) FreezeMember(name string) error {
	return f.signalAPIServer(name, syscall.SIGSTOP)
}

// ThawMember resumes (SIGCONT) a member frozen by FreezeMember.
func (f *Fleet) ThawMember(name string) error {
	return f.signalAPIServer(name, syscall.SIGCONT)
}

// signalAPIServer sends sig to the kube-apiserver processes of the member's
// kwok cluster, found in /proc by their binary name and their cluster folder
// on the command line.
func (f *Fleet) signalAPIServer(name string, sig syscall.Signal) error {
	dir := []byte(filepath.Join(f.opts.Dir, "kwok", "clusters", f.opts.Prefix+"-"+name) + string(filepath.Separator))
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return fmt.Errorf("finding the kube-apiserver of %s: %w", name, err)
	}
	n := 0
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		cmdline, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil || !bytes.Contains(cmdline, dir) {
			continue
		}
		argv0, _, _ := bytes.Cut(cmdline, []byte{0})
		if filepath.Base(string(argv0)) != "kube-apiserver" {
			continue
		}
		if err := syscall.Kill(pid, sig); err != nil {
			return fmt.Errorf("signalling the kube-apiserver of %s (pid %d): %w", name, pid, err)
		}
		n++
	}
	if n == 0 {
		return errors.New("no kube-apiserver process found for member " + name)
	}
	return nil
}
