package localfleet

import (
	"context"
	"fmt"
	"net"
	"os"
	"regexp"
	"strconv"
	"time"
)

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
