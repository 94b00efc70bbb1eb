package localfleet

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
)

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

// components are the processes of every kwokctl "binary" cluster of the fleet.
var components = []string{"etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok-controller"}

// DeadComponents lists the control-plane processes of the fleet's clusters
// (hub and members) that are not running, as "cluster/component". A
// component can die after `hack/fleet.sh up` succeeded: kwokctl picks its
// ports by probing for free ones, and on a shared machine another fleet
// created at the same time may bind one first ("address already in use"),
// leaving, say, a member without a scheduler whose pods stay Pending. It
// reads /proc: on a system without one it reports nothing.
func (f *Fleet) DeadComponents() []string {
	running := map[string]bool{}
	root := filepath.Join(f.opts.Dir, "kwok", "clusters") + string(filepath.Separator)
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	for _, e := range entries {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		cmdline, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil {
			continue
		}
		argv0, _, _ := bytes.Cut(cmdline, []byte{0})
		if rest, ok := bytes.CutPrefix(argv0, []byte(root)); ok {
			// <cluster>/bin/<component>
			if parts := bytes.Split(rest, []byte{filepath.Separator}); len(parts) == 3 {
				running[string(parts[0])+"/"+string(parts[2])] = true
			}
		}
	}
	var dead []string
	for _, c := range append([]string{"hub"}, f.MemberNames()...) {
		for _, comp := range components {
			if !running[f.opts.Prefix+"-"+c+"/"+comp] {
				dead = append(dead, c+"/"+comp)
			}
		}
	}
	return dead
}
