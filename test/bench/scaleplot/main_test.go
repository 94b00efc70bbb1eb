package main

import (
	"bytes"
	"image/png"
	"os"
	"path/filepath"
	"strings"
	"testing"

	. "github.com/onsi/gomega"

	"github.com/fleetdb/fleetdb/test/bench/scale"
)

// smallRun is two fleets of two steps each whose heap grows by exactly
// 2 MiB per member and 0.05 MiB per Database over 30 MiB.
func smallRun() *scale.Run {
	r := &scale.Run{}
	for _, m := range []int{1, 4} {
		f := &scale.Fleet{Members: m}
		for _, d := range []int{100, 300} {
			f.Steps = append(f.Steps, &scale.Step{
				Members: m, Databases: d, Created: 100,
				GrowCPUSeconds: 1.5,
				HeapMiB:        30 + 2*float64(m) + 0.05*float64(d),
				RSSMiB:         80 + 3*float64(m) + 0.1*float64(d),
				PeakRSSMiB:     90 + 3*float64(m) + 0.1*float64(d),
				Rest: scale.Rest{Seconds: 30, CPUCores: 0.002 + 0.001*float64(m) + 0.00001*float64(d),
					RequestsPerSecond: map[string]float64{"client reads to members": 0.1 * float64(m)}},
				Change:  &scale.Change{RatioP50: 1.5, RatioP99: 2, RequestsPerChange: map[string]float64{"client writes to members": 6}},
				Restart: &scale.Restart{SyncSeconds: 2 + 0.01*float64(d), CPUSeconds: 1, AuditWritesToMembers: d},
			})
		}
		r.Fleets = append(r.Fleets, f)
	}
	return r
}

// TestRenderWritesPlotsAndFit: from a small JSON, render writes a PNG per
// figure (valid, small enough to commit) and a fit table that extrapolates
// the known heap costs exactly.
func TestRenderWritesPlotsAndFit(t *testing.T) {
	g := NewWithT(t)
	dir := t.TempDir()
	in := filepath.Join(dir, "run.json")
	g.Expect(smallRun().Write(in)).To(Succeed())
	out := filepath.Join(dir, "plots")
	var printed bytes.Buffer
	g.Expect(render([]string{in}, out, Target{Members: 1000, Databases: 10000, Cores: 2, MiB: 4096}, &printed)).To(Succeed())

	for _, f := range plotFigures() {
		path := filepath.Join(out, f.Key+".png")
		info, err := os.Stat(path)
		g.Expect(err).NotTo(HaveOccurred(), f.Key)
		g.Expect(info.Size()).To(BeNumerically("<=", 100*1024), f.Key)
		file, err := os.Open(path)
		g.Expect(err).NotTo(HaveOccurred())
		img, err := png.Decode(file)
		_ = file.Close()
		g.Expect(err).NotTo(HaveOccurred(), f.Key)
		g.Expect(img.Bounds().Dx()).To(BeNumerically(">", 400))
	}

	md, err := os.ReadFile(filepath.Join(out, "fit.md"))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(string(md)).To(Equal(printed.String()))
	st, err := os.ReadFile(filepath.Join(out, "steps.md"))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(strings.Count(string(st), "\n")).To(Equal(2 + 4))
	g.Expect(string(st)).To(ContainSubstring("| 4 | 300 |"))

	// heap at 1,000 × 10,000 = 30 + 2·1000 + 0.05·10000 = 2530 MiB.
	heapRow := ""
	for line := range strings.SplitSeq(string(md), "\n") {
		if strings.HasPrefix(line, "| hub heap") {
			heapRow = line
		}
	}
	g.Expect(heapRow).To(ContainSubstring("| 30 | 2 | 0.05 | 1.00 | 4 | 2,530 | ≤ 4,096 MiB: within |"))
}

// TestRenderRefusesEmptyInput: no steps, no plots.
func TestRenderRefusesEmptyInput(t *testing.T) {
	g := NewWithT(t)
	dir := t.TempDir()
	in := filepath.Join(dir, "empty.json")
	g.Expect((&scale.Run{}).Write(in)).To(Succeed())
	g.Expect(render([]string{in}, dir, Target{}, &bytes.Buffer{})).To(MatchError(ContainSubstring("no completed step")))
	g.Expect(render([]string{filepath.Join(dir, "missing-*.json")}, dir, Target{}, &bytes.Buffer{})).To(MatchError(ContainSubstring("no file matches")))
}
