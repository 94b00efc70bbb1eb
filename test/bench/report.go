package main

import (
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"text/tabwriter"
	"time"
)

// Report is the JSON the benchmark writes (and the table it prints).
type Report struct {
	Started   time.Time     `json:"started"`
	Finished  time.Time     `json:"finished"`
	Config    ReportConfig  `json:"config"`
	Machine   Machine       `json:"machine"`
	Source    string        `json:"source"`
	Latencies []*Latency    `json:"latencies"`
	Scalars   []*Scalar     `json:"scalars"`
	Writes    []*WritePhase `json:"writes"`
	// HubPhases are the latency fleet's phases: the hub's metrics only (no audit log there).
	HubPhases []*WritePhase  `json:"hubPhasesLatencyFleet,omitempty"`
	Checks    []*Check       `json:"checks"`
	Agents    map[string]int `json:"auditUserAgents,omitempty"`
	Notes     []string       `json:"notes,omitempty"`
	Error     string         `json:"error,omitempty"`
}

// ReportConfig is the run's settings.
type ReportConfig struct {
	Members        int    `json:"members"`
	Burst          int    `json:"burst"`
	BurstPlacement string `json:"burstPlacement"`
	BurstWorkers   int    `json:"burstWorkers"`
	Samples        int    `json:"samples"`
	Rest           string `json:"rest"`
	ProbeInterval  string `json:"probeInterval"`
	Replicas       int32  `json:"replicas"`
	SlowDelay      string `json:"slowDelay"`
	HubArgs        string `json:"hubArgs,omitempty"`
	WriteSamples   int    `json:"writeSamples"`
}

// Machine describes where the run happened.
type Machine struct {
	NProc              int       `json:"nproc"`
	MemTotalMiB        int64     `json:"memTotalMiB"`
	GoVersion          string    `json:"goVersion"`
	OtherControlPlanes int       `json:"otherKubeAPIServersAtStart"`
	LoadAvg1           []float64 `json:"loadAvg1MinMeanMax"`
}

// Latency is a fleetdb latency beside its direct-apply floor: Floor is the
// minimal floor (the workload object only, every member in parallel) and the
// ratios are to it; the other floors are shown beside it.
type Latency struct {
	Name     string  `json:"name"`
	Fleetdb  Dist    `json:"fleetdb"`
	Floor    *Dist   `json:"floor,omitempty"`
	RatioP50 float64 `json:"ratioP50,omitempty"`
	RatioP99 float64 `json:"ratioP99,omitempty"`
	// FloorParallel: every object of a member at once.
	FloorParallel *Dist `json:"floorParallel,omitempty"`
	// FloorSequential: every object of a member one after the other (the floor before issue 13).
	FloorSequential *Dist   `json:"floorSequential,omitempty"`
	RatioSeqP50     float64 `json:"ratioSequentialP50,omitempty"`
	RatioSeqP99     float64 `json:"ratioSequentialP99,omitempty"`
	// Peer is the same change through the peer (Open Cluster Management's
	// ManifestWork, test/bench/peer.go), measured in the same run; the
	// ratios are fleetdb's to it (below 1: fleetdb is faster).
	PeerName     string  `json:"peerName,omitempty"`
	Peer         *Dist   `json:"peer,omitempty"`
	RatioPeerP50 float64 `json:"ratioToPeerP50,omitempty"`
	RatioPeerP99 float64 `json:"ratioToPeerP99,omitempty"`
	Note         string  `json:"note,omitempty"`
}

// Scalar is a single figure (a wall time, a count, a size).
type Scalar struct {
	Name  string   `json:"name"`
	Unit  string   `json:"unit"`
	Value float64  `json:"value"`
	Floor *float64 `json:"floor,omitempty"`
	Ratio float64  `json:"ratio,omitempty"`
	// FloorSequential is the sequential floor (the floor before issue 13), when measured.
	FloorSequential *float64 `json:"floorSequential,omitempty"`
	Note            string   `json:"note,omitempty"`
}

// WritePhase counts API write requests during one phase, from the audit logs.
type WritePhase struct {
	Phase   string `json:"phase"`
	Changes int    `json:"databaseChanges"`
	// Written by the hub process, to the hub and to the members.
	HubToHub     int `json:"hubToHub"`
	HubToMembers int `json:"hubToMembers"`
	// The hub's renewals of its own liveness Leases (peer Leases of a
	// sharded hub, the leader's Lease), not in HubToHub.
	HubLiveness int `json:"hubLivenessLeaseRenewals,omitempty"`
	// The baseline's writes (to members only).
	Direct int `json:"direct"`
	// Everyone else (kube-controller-manager, scheduler, kwok, the bench driver).
	Others int `json:"others"`
	// The hub's own count of its write requests (client-go rest_client_requests_total).
	HubClientSide int            `json:"hubClientSide"`
	HubByResource map[string]int `json:"hubByResource,omitempty"`
	// What the hub's metrics say happened (deltas over the phase).
	HubMetrics map[string]float64 `json:"hubMetrics,omitempty"`
	PerChange  map[string]float64 `json:"perChange,omitempty"`
	// apiserver_request_total (all clients, write verbs) summed over the fleet.
	ServerAllClients int     `json:"apiserverRequestTotalWrites,omitempty"`
	HubCPUSeconds    float64 `json:"hubCPUSeconds"`
	// Derived figures of the phase (status patches per Database, deletes per object).
	Derived map[string]float64 `json:"derived,omitempty"`
	Seconds float64            `json:"seconds"`
}

// Check is one target of the issue or SPEC 8, with its verdict.
type Check struct {
	Target   string `json:"target"`
	Measured string `json:"measured"`
	Verdict  string `json:"verdict"` // PASS, MISS or N/A
	Note     string `json:"note,omitempty"`
}

func (r *Report) latency(name string, fleetdb []time.Duration, floor []time.Duration, note string) *Latency {
	l := &Latency{Name: name, Fleetdb: newDist(fleetdb), Note: note}
	if floor != nil {
		d := newDist(floor)
		l.Floor = &d
		l.RatioP50, l.RatioP99 = ratio(l.Fleetdb.P50, d.P50), ratio(l.Fleetdb.P99, d.P99)
	}
	r.Latencies = append(r.Latencies, l)
	return l
}

// floors adds the parallel and sequential floors to l (either may be nil).
func (l *Latency) floors(parallel, sequential []time.Duration) *Latency {
	if parallel != nil {
		d := newDist(parallel)
		l.FloorParallel = &d
	}
	if sequential != nil {
		d := newDist(sequential)
		l.FloorSequential = &d
		l.RatioSeqP50, l.RatioSeqP99 = ratio(l.Fleetdb.P50, d.P50), ratio(l.Fleetdb.P99, d.P99)
	}
	return l
}

// peer adds the peer's figure to l (nil: not measured).
func (l *Latency) peer(name string, runs []time.Duration) *Latency {
	if runs != nil {
		d := newDist(runs)
		l.PeerName, l.Peer = name, &d
		l.RatioPeerP50, l.RatioPeerP99 = ratio(l.Fleetdb.P50, d.P50), ratio(l.Fleetdb.P99, d.P99)
	}
	return l
}

func (r *Report) scalar(name, unit string, v float64, floor *float64, note string) *Scalar {
	s := &Scalar{Name: name, Unit: unit, Value: round1(v), Note: note}
	if floor != nil {
		f := round1(*floor)
		s.Floor = &f
		s.Ratio = ratio(v, *floor)
	}
	r.Scalars = append(r.Scalars, s)
	return s
}

func (r *Report) check(target, measured string, pass bool, note string) {
	v := "MISS"
	if pass {
		v = "PASS"
	}
	r.Checks = append(r.Checks, &Check{Target: target, Measured: measured, Verdict: v, Note: note})
}

func (r *Report) write(path string) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}

func ms(v float64) string {
	if v >= 10000 {
		return fmt.Sprintf("%.0f", v)
	}
	return fmt.Sprintf("%.1f", v)
}

func ratioStr(v float64) string {
	if v == 0 {
		return "–"
	}
	return fmt.Sprintf("%.2f×", v)
}

func (r *Report) print(w io.Writer) {
	fmt.Fprintf(w, "\nfleetdb benchmark: %d members, %d samples one at a time, burst %d (%s), rest %s; nproc %d, %d MiB, load avg (1 min) min/mean/max %v, other kube-apiservers running: %d\n",
		r.Config.Members, r.Config.Samples, r.Config.Burst, r.Config.BurstPlacement, r.Config.Rest,
		r.Machine.NProc, r.Machine.MemTotalMiB, r.Machine.LoadAvg1, r.Machine.OtherControlPlanes)

	fmt.Fprintf(w, "source: %s\n", r.Source)
	fmt.Fprintln(w, "\nLatencies (ms)")
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "measure\tn\tP50\tP90\tP99\tmax\tfloor P50\tfloor P90\tfloor P99\tP50 ratio\tP99 ratio\tparallel floor P50/P99\tsequential floor P50/P99\tratio to sequential P50/P99\tpeer P50/P99\tratio to peer P50/P99\t")
	for _, l := range r.Latencies {
		fl := []string{"–", "–", "–"}
		if l.Floor != nil {
			fl = []string{ms(l.Floor.P50), ms(l.Floor.P90), ms(l.Floor.P99)}
		}
		pair := func(d *Dist) string {
			if d == nil {
				return "–"
			}
			return ms(d.P50) + " / " + ms(d.P99)
		}
		seqRatio := "–"
		if l.FloorSequential != nil {
			seqRatio = ratioStr(l.RatioSeqP50) + " / " + ratioStr(l.RatioSeqP99)
		}
		peerRatio := "–"
		if l.Peer != nil {
			peerRatio = ratioStr(l.RatioPeerP50) + " / " + ratioStr(l.RatioPeerP99)
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t\n", l.Name, l.Fleetdb.N,
			ms(l.Fleetdb.P50), ms(l.Fleetdb.P90), ms(l.Fleetdb.P99), ms(l.Fleetdb.Max), fl[0], fl[1], fl[2],
			ratioStr(l.RatioP50), ratioStr(l.RatioP99), pair(l.FloorParallel), pair(l.FloorSequential), seqRatio, pair(l.Peer), peerRatio)
	}
	_ = tw.Flush()

	fmt.Fprintln(w, "\nWall times, costs and sizes")
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "measure\tvalue\tunit\tfloor\tratio\tsequential floor\t")
	for _, s := range r.Scalars {
		f, seq := "–", "–"
		if s.Floor != nil {
			f = fmt.Sprintf("%.1f", *s.Floor)
		}
		if s.FloorSequential != nil {
			seq = fmt.Sprintf("%.1f", *s.FloorSequential)
		}
		fmt.Fprintf(tw, "%s\t%.1f\t%s\t%s\t%s\t%s\t\n", s.Name, s.Value, s.Unit, f, ratioStr(s.Ratio), seq)
	}
	_ = tw.Flush()

	fmt.Fprintln(w, "\nAPI writes (audit logs of every kube-apiserver, by user agent)")
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "phase\tchanges\thub→hub\thub→members\tper change\tdirect\tdirect per change\thub client-side\tothers\thub CPU s\tseconds\t")
	for _, p := range r.Writes {
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%s\t%d\t%s\t%d\t%d\t%.2f\t%.0f\t\n", p.Phase, p.Changes, p.HubToHub, p.HubToMembers,
			perChangeStr(p.PerChange["hub"]), p.Direct, perChangeStr(p.PerChange["direct"]), p.HubClientSide, p.Others, p.HubCPUSeconds, p.Seconds)
	}
	_ = tw.Flush()
	for _, p := range r.Writes {
		if len(p.HubByResource) > 0 {
			fmt.Fprintf(w, "  hub writes in %s: %s\n", p.Phase, sortedPairs(p.HubByResource, "%s=%d"))
		}
	}
	for _, p := range r.Writes {
		if len(p.Derived) > 0 {
			fmt.Fprintf(w, "  derived in %s: %s\n", p.Phase, sortedPairs(p.Derived, "%s=%g"))
		}
	}
	for _, p := range r.Writes {
		if len(p.HubMetrics) > 0 {
			fmt.Fprintf(w, "  hub metrics in %s: %s\n", p.Phase, sortedPairs(p.HubMetrics, "%s=%g"))
		}
	}
	for _, p := range r.HubPhases {
		fmt.Fprintf(w, "  latency fleet, hub metrics in %s (CPU %.2f s, %d writes): %s\n", p.Phase, p.HubCPUSeconds, p.HubClientSide, sortedPairs(p.HubMetrics, "%s=%g"))
	}

	fmt.Fprintln(w, "\nTargets")
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "target\tmeasured\tverdict\tnote")
	for _, c := range r.Checks {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", c.Target, c.Measured, c.Verdict, c.Note)
	}
	_ = tw.Flush()
	for _, n := range r.Notes {
		fmt.Fprintf(w, "note: %s\n", n)
	}
	if r.Error != "" {
		fmt.Fprintf(w, "\nERROR: %s\n", r.Error)
	}
}

func perChangeStr(v float64) string {
	if v == 0 {
		return "–"
	}
	return fmt.Sprintf("%.1f", v)
}

// sortedPairs formats m's entries with format (key, value), by key, comma-separated.
func sortedPairs[V any](m map[string]V, format string) string {
	keys := slices.Sorted(maps.Keys(m))
	parts := make([]string, 0, len(keys))
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf(format, k, m[k]))
	}
	return strings.Join(parts, ", ")
}
