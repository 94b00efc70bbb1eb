package chaos

import (
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"os"
	"runtime"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"
)

// Finding is a broken invariant, with what replays it.
type Finding struct {
	Cycle     int    `json:"cycle"`
	Seed      uint64 `json:"seed"`
	Step      string `json:"step"`
	Invariant string `json:"invariant"`
	Message   string `json:"message"`
}

// CycleResult is one cycle's step and timings.
type CycleResult struct {
	Seed     uint64  `json:"seed"`
	Cycle    int     `json:"cycle"`
	Step     string  `json:"step"`
	Seconds  float64 `json:"seconds"`
	Converge float64 `json:"convergeSeconds"`
	Findings int     `json:"findings"`
}

// Report is a chaos run's result.
type Report struct {
	Seeds    []uint64       `json:"seeds"`
	Members  int            `json:"members"`
	Planned  int            `json:"plannedCycles"`
	Cycles   []CycleResult  `json:"cycles"`
	Steps    map[string]int `json:"steps"`
	Faults   map[string]int `json:"faults"`
	Findings []Finding      `json:"findings"`
	FleetUp  string         `json:"fleetUp"`
	Started  time.Time      `json:"started"`
	Finished time.Time      `json:"finished"`
	Machine  string         `json:"machine"`
	Error    string         `json:"error,omitempty"`
	// SelfTest maps an invariant to whether its deliberate breakage was reported.
	SelfTest map[string]bool `json:"selfTest,omitempty"`
}

func newReport(cfg Config) *Report {
	return &Report{
		Seeds: cfg.Seeds, Members: cfg.Members, Planned: cfg.Cycles * len(cfg.Seeds), Steps: map[string]int{}, Faults: map[string]int{},
		Started: time.Now(), Machine: fmt.Sprintf("%s/%s, %d CPUs, %s", runtime.GOOS, runtime.GOARCH, runtime.NumCPU(), runtime.Version()),
	}
}

func (r *Report) finding(f Finding) { r.Findings = append(r.Findings, f) }

func (r *Report) cycleDone(seed uint64, n int, step string, total, converge time.Duration) {
	found := 0
	for _, f := range r.Findings {
		if f.Cycle == n && f.Seed == seed {
			found++
		}
	}
	r.Cycles = append(r.Cycles, CycleResult{Seed: seed, Cycle: n, Step: step, Seconds: total.Seconds(), Converge: converge.Seconds(), Findings: found})
}

// Clean reports whether the run ended without error, without findings,
// and with every deliberate breakage of the self-test reported.
func (r *Report) Clean() bool {
	for _, ok := range r.SelfTest {
		if !ok {
			return false
		}
	}
	return r.Error == "" && len(r.Findings) == 0
}

// WriteJSON writes the report as JSON.
func (r *Report) WriteJSON(path string) error {
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}

// Markdown writes the report as a markdown section.
func (r *Report) Markdown(w io.Writer) {
	fmt.Fprintf(w, "- seeds `%s`, %d members, %d of %d cycles run, %s → %s (%s; fleet up in %s)\n",
		seedList(r.Seeds), r.Members, len(r.Cycles), r.Planned, r.Started.UTC().Format("2006-01-02 15:04:05"),
		r.Finished.UTC().Format("15:04:05 UTC"), r.Finished.Sub(r.Started).Round(time.Second), r.FleetUp)
	fmt.Fprintf(w, "- machine: %s\n", r.Machine)
	if r.Error != "" {
		fmt.Fprintf(w, "- **the run stopped**: %s\n", r.Error)
	}
	fmt.Fprintf(w, "\n| step | cycles |\n|---|---|\n")
	for _, k := range slices.Sorted(maps.Keys(r.Steps)) {
		fmt.Fprintf(w, "| %s | %d |\n", k, r.Steps[k])
	}
	fmt.Fprintf(w, "\n| fault injected | count |\n|---|---|\n")
	for _, k := range slices.Sorted(maps.Keys(r.Faults)) {
		fmt.Fprintf(w, "| %s | %d |\n", k, r.Faults[k])
	}
	if len(r.Cycles) > 0 {
		var all, conv []float64
		for _, c := range r.Cycles {
			all, conv = append(all, c.Seconds), append(conv, c.Converge)
		}
		fmt.Fprintf(w, "\n| timing (s) | min | P50 | P90 | max |\n|---|---|---|---|---|\n")
		for _, row := range []struct {
			name string
			v    []float64
		}{{"cycle (workload + kills + converge + check)", all}, {"converge and check after the last restart", conv}} {
			sort.Float64s(row.v)
			q := func(p float64) float64 { return row.v[min(len(row.v)-1, int(p*float64(len(row.v))))] }
			fmt.Fprintf(w, "| %s | %.1f | %.1f | %.1f | %.1f |\n", row.name, row.v[0], q(0.5), q(0.9), row.v[len(row.v)-1])
		}
	}
	fmt.Fprintf(w, "\nFindings: %d\n\n", len(r.Findings))
	if len(r.SelfTest) > 0 {
		fmt.Fprintf(w, "Self-test (the fleet broken on purpose, hub stopped): ")
		for _, k := range slices.Sorted(maps.Keys(r.SelfTest)) {
			fmt.Fprintf(w, "%s %s; ", k, map[bool]string{true: "reported", false: "NOT reported"}[r.SelfTest[k]])
		}
		fmt.Fprintln(w)
	}
	for _, f := range r.Findings {
		fmt.Fprintf(w, "- cycle %d (seed %d, %s), %s: %s\n", f.Cycle, f.Seed, f.Step, f.Invariant, strings.ReplaceAll(f.Message, "\n", " "))
	}
}

// seedList is seeds as the -seed flag takes them.
func seedList(seeds []uint64) string {
	s := make([]string, len(seeds))
	for i, v := range seeds {
		s[i] = strconv.FormatUint(v, 10)
	}
	return strings.Join(s, ",")
}
