// Command scaleplot turns the JSON of benchmark scale runs (make
// bench-scale) into PNG plots and a Markdown table of the least-squares fit
// of the hub's costs (marginal cost per member and per Database) with the
// extrapolation to a target fleet size. See docs/reports/scale.md.
//
//	go run ./test/bench/scaleplot -in docs/reports/scale/run-a.json,docs/reports/scale/run-b.json -out docs/reports/scale/
package main

import (
	"errors"
	"flag"
	"fmt"
	"image/color"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"

	"github.com/fleetdb/fleetdb/test/bench/scale"
)

// Target is the fleet size the fit is extrapolated to, with the goal per
// hub replica (issue 13).
type Target struct {
	Members, Databases float64
	Cores              float64
	MiB                float64
}

func main() {
	in := flag.String("in", "", "scale run JSON files, comma-separated (globs allowed)")
	out := flag.String("out", ".", "folder for the PNGs and fit.md")
	members := flag.Float64("target-members", 1000, "members of the extrapolation")
	dbs := flag.Float64("target-databases", 10000, "Databases of the extrapolation")
	flag.Parse()
	t := Target{Members: *members, Databases: *dbs, Cores: 2, MiB: 4096}
	if err := render(strings.Split(*in, ","), *out, t, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "scaleplot:", err)
		os.Exit(1)
	}
}

// render reads the runs, writes one PNG per figure, fit.md (the fit) and
// steps.md (every step's figures) into out, and prints fit.md to w.
func render(inputs []string, out string, t Target, w io.Writer) error {
	var runs []*scale.Run
	for _, pattern := range inputs {
		pattern = strings.TrimSpace(pattern)
		if pattern == "" {
			continue
		}
		paths, err := filepath.Glob(pattern)
		if err != nil {
			return err
		}
		if len(paths) == 0 {
			return fmt.Errorf("no file matches %s", pattern)
		}
		for _, p := range paths {
			r, err := scale.Read(p)
			if err != nil {
				return err
			}
			runs = append(runs, r)
		}
	}
	steps := scale.Steps(runs...)
	if len(steps) == 0 {
		return errors.New("no completed step in the input")
	}
	if err := os.MkdirAll(out, 0o755); err != nil {
		return err
	}
	for _, f := range plotFigures() {
		if err := plotFigure(f, steps, filepath.Join(out, f.Key+".png")); err != nil {
			return fmt.Errorf("%s: %w", f.Key, err)
		}
	}
	md := fitTable(steps, t)
	if err := os.WriteFile(filepath.Join(out, "fit.md"), []byte(md), 0o644); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(out, "steps.md"), []byte(stepsTable(steps)), 0o644); err != nil {
		return err
	}
	_, err := io.WriteString(w, md)
	return err
}

// plotFigures are the fitted figures and the propagation ratios.
func plotFigures() []scale.Figure {
	ratio := func(p99 bool) func(*scale.Step) (float64, bool) {
		return func(s *scale.Step) (float64, bool) {
			if s.Change == nil || s.Change.RatioP50 == 0 {
				return 0, false
			}
			if p99 {
				return s.Change.RatioP99, true
			}
			return s.Change.RatioP50, true
		}
	}
	return append(slices.Clone(scale.Figures),
		scale.Figure{Key: "propagation-p50", Name: "propagation P50 / floor", Unit: "×", Value: ratio(false)},
		scale.Figure{Key: "propagation-p99", Name: "propagation P99 / floor", Unit: "×", Value: ratio(true)},
	)
}

// plotFigure draws f against Databases (a line per member count) and
// against members (a line per Database count), side by side.
func plotFigure(f scale.Figure, steps []*scale.Step, path string) error {
	pts := f.Points(steps)
	if len(pts) == 0 {
		return nil
	}
	byDB := panel(f, pts, "Databases", func(p scale.Point) (float64, float64) { return p.Members, p.Databases }, "%g members")
	byMember := panel(f, pts, "members", func(p scale.Point) (float64, float64) { return p.Databases, p.Members }, "%g Databases")
	const width, height = 8 * vg.Inch, 3.2 * vg.Inch
	img := vgimg.NewWith(vgimg.UseWH(width, height), vgimg.UseDPI(90))
	dc := draw.New(img)
	tiles := draw.Tiles{Rows: 1, Cols: 2, PadX: vg.Millimeter * 6, PadTop: vg.Millimeter * 2, PadBottom: vg.Millimeter * 2,
		PadLeft: vg.Millimeter * 2, PadRight: vg.Millimeter * 2}
	plots := [][]*plot.Plot{{byDB, byMember}}
	canvases := plot.Align(plots, tiles, dc)
	byDB.Draw(canvases[0][0])
	byMember.Draw(canvases[0][1])
	file, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := (vgimg.PngCanvas{Canvas: img}).WriteTo(file); err != nil {
		_ = file.Close()
		return err
	}
	return file.Close()
}

var palette = []color.Color{
	color.RGBA{R: 0x1f, G: 0x77, B: 0xb4, A: 0xff}, color.RGBA{R: 0xff, G: 0x7f, B: 0x0e, A: 0xff},
	color.RGBA{R: 0x2c, G: 0xa0, B: 0x2c, A: 0xff}, color.RGBA{R: 0xd6, G: 0x27, B: 0x28, A: 0xff},
	color.RGBA{R: 0x94, G: 0x67, B: 0xbd, A: 0xff}, color.RGBA{R: 0x8c, G: 0x56, B: 0x4b, A: 0xff},
}

// panel plots the points against an x axis, one line per series value;
// split gives a point's (series, x).
func panel(f scale.Figure, pts []scale.Point, xName string, split func(scale.Point) (float64, float64), series string) *plot.Plot {
	p := plot.New()
	p.Title.Text = fmt.Sprintf("%s vs %s", f.Name, xName)
	p.Title.TextStyle.Font.Size = vg.Points(10)
	p.X.Label.Text = xName
	p.Y.Label.Text = f.Unit
	p.Y.Min = 0
	p.Legend.Top, p.Legend.Left = true, true
	p.Legend.TextStyle.Font.Size = vg.Points(8)
	groups := map[float64]plotter.XYs{}
	for _, pt := range pts {
		s, x := split(pt)
		groups[s] = append(groups[s], plotter.XY{X: x, Y: pt.Value})
	}
	keys := make([]float64, 0, len(groups))
	for k := range groups {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for i, k := range keys {
		xys := groups[k]
		slices.SortFunc(xys, func(a, b plotter.XY) int { return compare(a.X, b.X) })
		line, points, err := plotter.NewLinePoints(xys)
		if err != nil {
			continue
		}
		c := palette[i%len(palette)]
		line.Color, points.Color = c, c
		points.Shape = draw.CircleGlyph{}
		p.Add(line, points)
		p.Legend.Add(fmt.Sprintf(series, k), line, points)
	}
	p.Add(plotter.NewGrid())
	return p
}

func compare(a, b float64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// fitTable fits every figure and extrapolates it to the target.
func fitTable(steps []*scale.Step, t Target) string {
	var b strings.Builder
	fmt.Fprintf(&b, "| figure | unit | fixed | per member | per Database | R² | points | at %s members × %s Databases | goal per replica |\n",
		num(t.Members), num(t.Databases))
	b.WriteString("|---|---|---|---|---|---|---|---|---|\n")
	for _, f := range scale.Figures {
		pts := f.Points(steps)
		m, err := scale.Fit(pts)
		if err != nil {
			fmt.Fprintf(&b, "| %s | %s | – | – | – | – | %d | not fitted: %v | |\n", f.Name, f.Unit, len(pts), err)
			continue
		}
		// A negative slope is noise over the measured range (no cost
		// shrinks as the fleet grows): the extrapolation takes it as 0.
		at := m.Intercept + max(0, m.PerMember)*t.Members + max(0, m.PerDatabase)*t.Databases
		atStr := sig(at)
		if m.PerMember < 0 || m.PerDatabase < 0 {
			atStr += " (negative slope taken as 0)"
		}
		goal := ""
		switch f.Unit {
		case "cores":
			goal = verdict(at, t.Cores, "cores")
		case "MiB":
			goal = verdict(at, t.MiB, "MiB")
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %.2f | %d | %s | %s |\n",
			f.Name, f.Unit, sig(m.Intercept), sig(m.PerMember), sig(m.PerDatabase), m.R2, m.N, atStr, goal)
	}
	return b.String()
}

func verdict(v, limit float64, unit string) string {
	if v <= limit {
		return fmt.Sprintf("≤ %s %s: within", num(limit), unit)
	}
	return fmt.Sprintf("≤ %s %s: over (%.1f× the goal)", num(limit), unit, v/limit)
}

// sig prints v with three significant digits, whole numbers from 1,000 up.
func sig(v float64) string {
	if v >= 1000 || v <= -1000 {
		return num(v)
	}
	return fmt.Sprintf("%.3g", v)
}

// num prints v rounded, with thousands separators.
func num(v float64) string {
	s := fmt.Sprintf("%.0f", v)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	if neg {
		return "-" + s
	}
	return s
}

// stepsTable is one Markdown row per step.
func stepsTable(steps []*scale.Step) string {
	var b strings.Builder
	b.WriteString("| members | Databases | load | grow s | CPU at rest (cores) | heap MiB | RSS MiB | peak RSS MiB | " +
		"req/s at rest (reads / writes) | req per change | propagation P50 / floor (ms) | P99 / floor (ms) | " +
		"restart → in sync s | restart writes to hub / members | member objects changed | Ready flips |\n")
	b.WriteString("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, s := range steps {
		reads := s.Rest.RequestsPerSecond["client reads to hub"] + s.Rest.RequestsPerSecond["client reads to members"]
		writes := s.Rest.RequestsPerSecond["client writes to hub"] + s.Rest.RequestsPerSecond["client writes to members"]
		change, p50, p99 := "–", "–", "–"
		if c := s.Change; c != nil {
			tot := 0.0
			for _, v := range c.RequestsPerChange {
				tot += v
			}
			change = fmt.Sprintf("%.1f", tot)
			p50 = fmt.Sprintf("%.2f× (%.0f / %.0f)", c.RatioP50, c.P50Ms, c.FloorP50Ms)
			p99 = fmt.Sprintf("%.2f× (%.0f / %.0f)", c.RatioP99, c.P99Ms, c.FloorP99Ms)
		}
		rs, rw, rc, rf := "–", "–", "–", "–"
		if r := s.Restart; r != nil {
			rs = fmt.Sprintf("%.1f", r.SyncSeconds)
			rw = fmt.Sprintf("%d / %d", r.AuditWritesToHub, r.AuditWritesToMembers)
			rc = fmt.Sprintf("%d of %d", r.MemberObjectsChanged, r.MemberObjects)
			rf = fmt.Sprintf("%d", r.ReadyFlips)
		}
		fmt.Fprintf(&b, "| %d | %s | %.1f | %.1f | %.4f | %.1f | %.1f | %.1f | %.2f / %.2f | %s | %s | %s | %s | %s | %s | %s |\n",
			s.Members, num(float64(s.Databases)), s.LoadAvg1, s.GrowSeconds, s.Rest.CPUCores, s.HeapMiB, s.RSSMiB, s.PeakRSSMiB,
			reads, writes, change, p50, p99, rs, rw, rc, rf)
	}
	return b.String()
}
