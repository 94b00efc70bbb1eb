package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"
)

// clockTicks is USER_HZ, the unit of utime and stime in /proc/<pid>/stat
// (100 on every Linux architecture Go supports).
const clockTicks = 100

// procSample is what /proc says about a process.
type procSample struct {
	CPUSeconds float64 // utime + stime
	RSSBytes   int64   // VmRSS
	HWMBytes   int64   // VmHWM: peak RSS
}

func readProc(pid int) (procSample, error) {
	var s procSample
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return s, err
	}
	// The command name may hold spaces; fields count from after its ")".
	rest := string(stat)
	if i := strings.LastIndexByte(rest, ')'); i >= 0 {
		rest = rest[i+1:]
	}
	f := strings.Fields(rest)
	// f[0] is field 3 (state); utime and stime are fields 14 and 15.
	if len(f) < 13 {
		return s, fmt.Errorf("short /proc/%d/stat", pid)
	}
	ut, _ := strconv.ParseFloat(f[11], 64)
	st, _ := strconv.ParseFloat(f[12], 64)
	s.CPUSeconds = (ut + st) / clockTicks
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return s, err
	}
	sc := bufio.NewScanner(strings.NewReader(string(status)))
	for sc.Scan() {
		line := sc.Text()
		key, val, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		kb := func() int64 {
			v, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(val), " kB"), 10, 64)
			return v * 1024
		}
		switch key {
		case "VmRSS":
			s.RSSBytes = kb()
		case "VmHWM":
			s.HWMBytes = kb()
		}
	}
	return s, nil
}

// promSample is one line of the Prometheus text format.
type promSample struct {
	Name   string
	Labels map[string]string
	Value  float64
}

// parseProm parses the Prometheus text exposition format, enough for
// counters and gauges (no escapes inside label values are expected).
func parseProm(text string) []promSample {
	var out []promSample
	for line := range strings.SplitSeq(text, "\n") {
		line = strings.TrimSpace(line)
		if line == "" || line[0] == '#' {
			continue
		}
		var s promSample
		var rest string
		if i := strings.IndexByte(line, '{'); i >= 0 {
			j := strings.LastIndexByte(line, '}')
			if j < i {
				continue
			}
			s.Name = line[:i]
			s.Labels = parseLabels(line[i+1 : j])
			rest = strings.TrimSpace(line[j+1:])
		} else {
			name, r, ok := strings.Cut(line, " ")
			if !ok {
				continue
			}
			s.Name, rest = name, strings.TrimSpace(r)
		}
		val, _, _ := strings.Cut(rest, " ")
		v, err := strconv.ParseFloat(val, 64)
		if err != nil {
			continue
		}
		s.Value = v
		out = append(out, s)
	}
	return out
}

func parseLabels(s string) map[string]string {
	m := map[string]string{}
	for s != "" {
		k, rest, ok := strings.Cut(s, "=\"")
		if !ok {
			break
		}
		v, rest, ok := strings.Cut(rest, "\"")
		if !ok {
			break
		}
		m[strings.TrimSpace(strings.TrimPrefix(k, ","))] = v
		s = strings.TrimPrefix(rest, ",")
	}
	return m
}

// sumProm adds up the samples named name for which keep is true.
func sumProm(samples []promSample, name string, keep func(map[string]string) bool) float64 {
	t := 0.0
	for _, s := range samples {
		if s.Name == name && (keep == nil || keep(s.Labels)) {
			t += s.Value
		}
	}
	return t
}

func httpGet(ctx context.Context, url string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return "", err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return "", err
	}
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return string(b), nil
}

// loadSampler records the 1-minute load average while the benchmark runs.
type loadSampler struct {
	samples []float64
}

func (l *loadSampler) run(ctx context.Context, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		if b, err := os.ReadFile("/proc/loadavg"); err == nil {
			if f := strings.Fields(string(b)); len(f) > 0 {
				if v, err := strconv.ParseFloat(f[0], 64); err == nil {
					l.samples = append(l.samples, v)
				}
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// otherControlPlanes counts kube-apiserver processes that are not the bench
// fleet's: other fleets (test runs) sharing the machine.
func otherControlPlanes(ownDir string) int {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return -1
	}
	n := 0
	for _, e := range entries {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		if err != nil {
			continue
		}
		cmd := strings.ReplaceAll(string(b), "\x00", " ")
		first, _, _ := strings.Cut(cmd, " ")
		if strings.HasSuffix(first, "/kube-apiserver") && !strings.Contains(cmd, ownDir) {
			n++
		}
	}
	return n
}

func memTotalMiB() int64 {
	b, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return 0
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "MemTotal:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return kb / 1024
		}
	}
	return 0
}
