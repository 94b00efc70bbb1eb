// Package scale holds the results of the benchmark's scale mode (fleets of
// growing member counts, each grown in Database steps) as they are written
// to JSON, and the least-squares fit of the hub's costs over members and
// Databases that docs/reports/scale.md extrapolates from.
package scale

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"time"
)

// Run is one scale run: the JSON file the scale mode writes.
type Run struct {
	Started  time.Time `json:"started"`
	Finished time.Time `json:"finished"`
	Source   string    `json:"source"`
	Machine  Machine   `json:"machine"`
	Config   Config    `json:"config"`
	Fleets   []*Fleet  `json:"fleets"`
	// Skipped are the member counts asked for and not run, with why.
	Skipped []Skip   `json:"skipped,omitempty"`
	Notes   []string `json:"notes,omitempty"`
	Error   string   `json:"error,omitempty"`
}

// Machine describes where the run happened.
type Machine struct {
	NProc       int    `json:"nproc"`
	MemTotalMiB int64  `json:"memTotalMiB"`
	GoVersion   string `json:"goVersion"`
	// LoadAvg1 is the 1-minute load average over the run: min, mean, max.
	LoadAvg1 []float64 `json:"loadAvg1MinMeanMax,omitempty"`
	// OtherKubeAPIServers are kube-apiserver processes of other fleets
	// running on the machine when the run started.
	OtherKubeAPIServers int `json:"otherKubeAPIServersAtStart"`
}

// Config is the run's settings.
type Config struct {
	Members   []int `json:"members"`
	Databases []int `json:"databases"`
	// Placement says where each Database goes.
	Placement     string `json:"placement"`
	Samples       int    `json:"samples"`
	Rest          string `json:"rest"`
	ProbeInterval string `json:"probeInterval"`
	Workers       int    `json:"createWorkers"`
	HubArgs       string `json:"hubArgs,omitempty"`
}

// Skip is a member count not run.
type Skip struct {
	Members int    `json:"members"`
	Reason  string `json:"reason"`
}

// Fleet is one fleet of Members members, grown step by step.
type Fleet struct {
	Members int `json:"members"`
	// MemAvailableMiB is /proc/meminfo's MemAvailable before the fleet started.
	MemAvailableMiB int64   `json:"memAvailableMiBAtStart"`
	FleetUpSeconds  float64 `json:"fleetUpSeconds"`
	// MembersReadySeconds: hub started → every MemberCluster Ready.
	MembersReadySeconds float64 `json:"membersReadySeconds"`
	Steps               []*Step `json:"steps"`
	Error               string  `json:"error,omitempty"`
}

// Step is what was measured with Databases Databases in place.
type Step struct {
	Members   int `json:"members"`
	Databases int `json:"databases"`
	// LoadAvg1 is the 1-minute load average when the step's measurements began.
	LoadAvg1 float64 `json:"loadAvg1"`

	// Grow: creating the step's new Databases until every one is Ready on the hub.
	Created        int     `json:"created"`
	GrowSeconds    float64 `json:"growSeconds"`
	GrowCPUSeconds float64 `json:"growCPUSeconds"`

	// The hub at rest with the step's Databases in place.
	HubCPUSeconds float64 `json:"hubCPUSecondsTotal"` // utime+stime of every hub process so far
	HeapMiB       float64 `json:"heapMiB"`            // go_memstats_heap_alloc_bytes, least of 10 samples
	RSSMiB        float64 `json:"rssMiB"`             // VmRSS
	PeakRSSMiB    float64 `json:"peakRSSMiB"`         // VmHWM of the running hub process
	Rest          Rest    `json:"rest"`

	Change  *Change  `json:"change,omitempty"`
	Restart *Restart `json:"restart,omitempty"`
	Error   string   `json:"error,omitempty"`
}

// Rest is the hub's cost over a quiet interval.
type Rest struct {
	Seconds  float64 `json:"seconds"`
	CPUCores float64 `json:"cpuCores"` // CPU seconds per second
	// RequestsPerSecond is the hub's own rest_client_requests_total rate:
	// "reads to hub", "writes to hub", "reads to members", "writes to members".
	RequestsPerSecond map[string]float64 `json:"requestsPerSecond"`
	// Writes the API servers logged from the hub (audit logs).
	AuditWritesToHub     int `json:"auditWritesToHub"`
	AuditWritesToMembers int `json:"auditWritesToMembers"`
}

// Change is a few single Database creates, one at a time, each beside the
// floor (the same objects applied directly to the same member).
type Change struct {
	Samples    int     `json:"samples"`
	P50Ms      float64 `json:"propagationP50Ms"`
	P99Ms      float64 `json:"propagationP99Ms"`
	FloorP50Ms float64 `json:"floorP50Ms"`
	FloorP99Ms float64 `json:"floorP99Ms"`
	RatioP50   float64 `json:"ratioP50"`
	RatioP99   float64 `json:"ratioP99"`
	// Per create, net of the rest rate over the phase's length.
	RequestsPerChange map[string]float64 `json:"requestsPerChange"`
	CPUMsPerChange    float64            `json:"cpuMsPerChange"`
	// Writes the API servers logged from the hub, per create (audit logs).
	AuditWritesPerChange float64 `json:"auditWritesPerChange"`
	PhaseSeconds         float64 `json:"phaseSeconds"`
}

// Restart is a hub killed (SIGKILL) and started again on an unchanged fleet.
type Restart struct {
	// MetricsUpSeconds: start → the new hub's metrics endpoint answers.
	MetricsUpSeconds float64 `json:"metricsUpSeconds"`
	// SyncSeconds: start → back in sync (see InSync).
	SyncSeconds float64 `json:"syncSeconds"`
	// InSync says what "in sync" was taken to mean.
	InSync string `json:"inSync"`
	// Writes the API servers logged from the new hub until it settled.
	AuditWritesToHub     int            `json:"auditWritesToHub"`
	AuditWritesToMembers int            `json:"auditWritesToMembers"`
	AuditByResource      map[string]int `json:"auditByResource,omitempty"`
	// MemberObjects are fleetdb's objects in the members before the
	// restart; MemberObjectsChanged those whose resourceVersion differs
	// after it (or that are gone): a no-op apply is a write request that
	// changes nothing.
	MemberObjects        int `json:"memberObjects"`
	MemberObjectsChanged int `json:"memberObjectsChanged"`
	// The new hub's own request counts until it settled.
	Requests      map[string]float64 `json:"requests"`
	CPUSeconds    float64            `json:"cpuSeconds"`
	PeakRSSMiB    float64            `json:"peakRSSMiB"`
	MemberSyncs   float64            `json:"memberSyncs"`
	Reconciles    float64            `json:"databaseReconciles"`
	NotReadyAfter int                `json:"databasesNotReadyAfter"`
	// ReadyFlips counts Databases seen leaving Ready=True during the restart.
	ReadyFlips int `json:"readyFlips"`
}

// Read loads a run from path.
func Read(path string) (*Run, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var r Run
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return &r, nil
}

// Write stores the run at path as indented JSON.
func (r *Run) Write(path string) error {
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}

// Steps are every completed step of the runs, fleets in order.
func Steps(runs ...*Run) []*Step {
	var out []*Step
	for _, r := range runs {
		for _, f := range r.Fleets {
			for _, s := range f.Steps {
				if s.Error == "" {
					out = append(out, s)
				}
			}
		}
	}
	return out
}

// Point is one measurement of a figure at a fleet size.
type Point struct {
	Members, Databases float64
	Value              float64
}

// Model is y = Intercept + PerMember·members + PerDatabase·databases.
type Model struct {
	Intercept   float64 `json:"intercept"`
	PerMember   float64 `json:"perMember"`
	PerDatabase float64 `json:"perDatabase"`
	// R2 is the coefficient of determination of the fit.
	R2 float64 `json:"r2"`
	N  int     `json:"n"`
}

// At is the model's value at a fleet size.
func (m Model) At(members, databases float64) float64 {
	return m.Intercept + m.PerMember*members + m.PerDatabase*databases
}

// ErrUnderdetermined means the points do not pin both slopes down (one member
// count only, or one Database count only).
var ErrUnderdetermined = errors.New("the points vary too little to fit both slopes (need at least two member counts and two Database counts)")

// Fit is the ordinary least-squares fit of the points to a Model: the
// marginal cost of a member and of a Database, the rest being fixed cost.
func Fit(points []Point) (Model, error) {
	if len(points) < 3 {
		return Model{}, ErrUnderdetermined
	}
	// Normal equations XᵀX β = Xᵀy with X = [1, members, databases].
	var a [3][4]float64
	for _, p := range points {
		x := [3]float64{1, p.Members, p.Databases}
		for i := range 3 {
			for j := range 3 {
				a[i][j] += x[i] * x[j]
			}
			a[i][3] += x[i] * p.Value
		}
	}
	beta, ok := solve3(a)
	if !ok {
		return Model{}, ErrUnderdetermined
	}
	m := Model{Intercept: beta[0], PerMember: beta[1], PerDatabase: beta[2], N: len(points)}
	mean := 0.0
	for _, p := range points {
		mean += p.Value
	}
	mean /= float64(len(points))
	var ssRes, ssTot float64
	for _, p := range points {
		r := p.Value - m.At(p.Members, p.Databases)
		ssRes += r * r
		ssTot += (p.Value - mean) * (p.Value - mean)
	}
	m.R2 = 1
	if ssTot > 0 {
		m.R2 = 1 - ssRes/ssTot
	}
	return m, nil
}

// solve3 solves the 3×3 system a[:, :3] x = a[:, 3] by Gaussian elimination
// with partial pivoting; false when it is singular.
func solve3(a [3][4]float64) ([3]float64, bool) {
	var x [3]float64
	scale := 0.0
	for i := range 3 {
		for j := range 3 {
			scale = math.Max(scale, math.Abs(a[i][j]))
		}
	}
	for col := range 3 {
		p := col
		for r := col + 1; r < 3; r++ {
			if math.Abs(a[r][col]) > math.Abs(a[p][col]) {
				p = r
			}
		}
		if math.Abs(a[p][col]) <= 1e-9*scale {
			return x, false
		}
		a[col], a[p] = a[p], a[col]
		for r := col + 1; r < 3; r++ {
			f := a[r][col] / a[col][col]
			for c := col; c < 4; c++ {
				a[r][c] -= f * a[col][c]
			}
		}
	}
	for i := 2; i >= 0; i-- {
		s := a[i][3]
		for j := i + 1; j < 3; j++ {
			s -= a[i][j] * x[j]
		}
		x[i] = s / a[i][i]
	}
	return x, true
}

// Figure is a measured quantity of a step, fitted and plotted.
type Figure struct {
	Key   string // short name, used in file names
	Name  string
	Unit  string
	Value func(*Step) (float64, bool)
}

// Figures are the quantities docs/reports/scale.md fits and extrapolates.
var Figures = []Figure{
	{"cpu-rest", "hub CPU at rest", "cores", func(s *Step) (float64, bool) { return s.Rest.CPUCores, s.Rest.Seconds > 0 }},
	{"heap", "hub heap (least of 10 samples)", "MiB", func(s *Step) (float64, bool) { return s.HeapMiB, s.HeapMiB > 0 }},
	{"rss", "hub RSS at rest", "MiB", func(s *Step) (float64, bool) { return s.RSSMiB, s.RSSMiB > 0 }},
	{"peak-rss", "hub peak RSS (VmHWM)", "MiB", func(s *Step) (float64, bool) { return s.PeakRSSMiB, s.PeakRSSMiB > 0 }},
	{"api-rest", "hub API requests at rest", "req/s", func(s *Step) (float64, bool) {
		return sum(s.Rest.RequestsPerSecond), s.Rest.Seconds > 0
	}},
	{"api-change", "hub API requests per change", "req", func(s *Step) (float64, bool) {
		if s.Change == nil {
			return 0, false
		}
		return sum(s.Change.RequestsPerChange), true
	}},
	{"cpu-change", "hub CPU per single create", "ms", func(s *Step) (float64, bool) {
		if s.Change == nil {
			return 0, false
		}
		return s.Change.CPUMsPerChange, true
	}},
	{"cpu-create", "hub CPU per Database created (growth)", "ms", func(s *Step) (float64, bool) {
		return s.GrowCPUSeconds * 1000 / float64(max(s.Created, 1)), s.Created > 0
	}},
	{"restart-sync", "hub restart → back in sync", "s", func(s *Step) (float64, bool) {
		if s.Restart == nil || s.Restart.SyncSeconds <= 0 {
			return 0, false
		}
		return s.Restart.SyncSeconds, true
	}},
	{"restart-cpu", "hub CPU of a restart", "s", func(s *Step) (float64, bool) {
		if s.Restart == nil || s.Restart.SyncSeconds <= 0 {
			return 0, false
		}
		return s.Restart.CPUSeconds, true
	}},
	{"restart-writes", "hub writes of a restart (audit logs)", "writes", func(s *Step) (float64, bool) {
		if s.Restart == nil || s.Restart.SyncSeconds <= 0 {
			return 0, false
		}
		return float64(s.Restart.AuditWritesToHub + s.Restart.AuditWritesToMembers), true
	}},
}

func sum(m map[string]float64) float64 {
	t := 0.0
	for _, v := range m {
		t += v
	}
	return t
}

// Points are the figure's values over the steps.
func (f Figure) Points(steps []*Step) []Point {
	var out []Point
	for _, s := range steps {
		if v, ok := f.Value(s); ok {
			out = append(out, Point{Members: float64(s.Members), Databases: float64(s.Databases), Value: v})
		}
	}
	return out
}
