package main

import (
	"context"
	"io"
	"path/filepath"
	"time"

	"github.com/fleetdb/fleetdb/test/localfleet"
)

// startFleet brings the benchmark's own local fleet up (test/localfleet,
// shared with the e2e suite). With audit its kube-apiservers write audit
// logs (the write-count fleet); without, they do not (the latency fleet: an
// audit log costs the API server CPU on every write, the floor's included).
// The fleet is returned also on an error, to be taken down.
func startFleet(ctx context.Context, cfg config, audit bool, log io.Writer) (*localfleet.Fleet, error) {
	opts := localfleet.Options{
		RepoRoot: cfg.root, Dir: cfg.fleetDir, Prefix: cfg.prefix, Members: cfg.members, Log: log,
		Attempts: 3,
	}
	if audit {
		opts.ExtraEnv = []string{"FLEET_AUDIT_POLICY=" + filepath.Join(cfg.fleetDir, "audit-policy.yaml")}
		opts.Files = map[string][]byte{"audit-policy.yaml": []byte(auditPolicy)}
	}
	return localfleet.Start(ctx, opts)
}

// memberKubeconfig is the path of a member's kubeconfig.
func memberKubeconfig(f *localfleet.Fleet, name string) string {
	for _, m := range f.MemberKubeconfigs {
		if m.Name == name {
			return m.Path
		}
	}
	return ""
}

// startHub runs the hub (test/localfleet) and waits for its metrics endpoint.
func startHub(ctx context.Context, bin, kubeconfig string, probeInterval time.Duration, extra []string, logPath string) (*localfleet.HubProcess, error) {
	h, err := localfleet.StartHub(localfleet.HubOptions{
		Binary: bin, Kubeconfig: kubeconfig, LogPath: logPath,
		Args:      append([]string{"--probe-interval", probeInterval.String()}, extra...),
		StopGrace: 15 * time.Second,
	})
	if err != nil {
		return nil, err
	}
	if err := h.WaitReady(ctx, 60*time.Second); err != nil {
		h.Stop()
		return nil, err
	}
	return h, nil
}

// hubMetrics scrapes the hub's metrics endpoint.
func hubMetrics(ctx context.Context, h *localfleet.HubProcess) ([]promSample, error) {
	text, err := httpGet(ctx, h.MetricsURL)
	if err != nil {
		return nil, err
	}
	return parseProm(text), nil
}

// heapMin samples go_memstats_heap_alloc_bytes n times over d and returns the
// smallest value: the closest to the live heap right after a collection.
func heapMin(ctx context.Context, h *localfleet.HubProcess, n int, d time.Duration) float64 {
	best := 0.0
	for i := range n {
		if s, err := hubMetrics(ctx, h); err == nil {
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
