package scale

import (
	"errors"
	"math"
	"path/filepath"
	"testing"

	. "github.com/onsi/gomega"
)

// TestFitRecoversKnownCosts: points made from known marginal costs, with
// noise that sums to zero per column, give those costs back.
func TestFitRecoversKnownCosts(t *testing.T) {
	g := NewWithT(t)
	var pts []Point
	for _, m := range []float64{1, 5, 10, 20} {
		for _, d := range []float64{100, 500, 1000} {
			pts = append(pts, Point{Members: m, Databases: d, Value: 12 + 3.5*m + 0.04*d})
		}
	}
	m, err := Fit(pts)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(m.Intercept).To(BeNumerically("~", 12, 1e-6))
	g.Expect(m.PerMember).To(BeNumerically("~", 3.5, 1e-9))
	g.Expect(m.PerDatabase).To(BeNumerically("~", 0.04, 1e-9))
	g.Expect(m.R2).To(BeNumerically("~", 1, 1e-9))
	g.Expect(m.N).To(Equal(12))
	g.Expect(m.At(1000, 10000)).To(BeNumerically("~", 12+3500+400, 1e-6))

	// Noisy: a 2×2 design, worked by hand. The slopes are the differences
	// of the means (m: (8+15)/2 − (6+9)/2 = 4; d: (9+15)/2 − (6+8)/2 = 5),
	// the intercept 9.5 − 4·1.5 − 5·1.5 = −4; the points are off the plane,
	// so R² < 1.
	noisy := []Point{{1, 1, 6}, {2, 1, 8}, {1, 2, 9}, {2, 2, 15}}
	m, err = Fit(noisy)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(m.PerMember).To(BeNumerically("~", 4, 1e-9))
	g.Expect(m.PerDatabase).To(BeNumerically("~", 5, 1e-9))
	g.Expect(m.Intercept).To(BeNumerically("~", -4, 1e-9))
	g.Expect(m.R2).To(BeNumerically("<", 1))
	g.Expect(math.IsNaN(m.R2)).To(BeFalse())
}

// TestFitNeedsBothDimensions: one member count cannot give a cost per member.
func TestFitNeedsBothDimensions(t *testing.T) {
	g := NewWithT(t)
	_, err := Fit([]Point{{1, 100, 1}, {1, 500, 2}, {1, 1000, 3}})
	g.Expect(errors.Is(err, ErrUnderdetermined)).To(BeTrue())
	_, err = Fit([]Point{{1, 100, 1}, {5, 100, 2}})
	g.Expect(errors.Is(err, ErrUnderdetermined)).To(BeTrue())
}

// TestRunRoundTrip: a run written and read back keeps its steps, and failed
// steps are left out of the fit.
func TestRunRoundTrip(t *testing.T) {
	g := NewWithT(t)
	r := &Run{Fleets: []*Fleet{{Members: 2, Steps: []*Step{
		{Members: 2, Databases: 100, HeapMiB: 40, Rest: Rest{Seconds: 30, CPUCores: 0.01}},
		{Members: 2, Databases: 500, Error: "timed out"},
	}}}}
	path := filepath.Join(t.TempDir(), "run.json")
	g.Expect(r.Write(path)).To(Succeed())
	back, err := Read(path)
	g.Expect(err).NotTo(HaveOccurred())
	steps := Steps(back)
	g.Expect(steps).To(HaveLen(1))
	g.Expect(steps[0].HeapMiB).To(Equal(40.0))
	heap := Figures[1]
	g.Expect(heap.Key).To(Equal("heap"))
	g.Expect(heap.Points(steps)).To(Equal([]Point{{Members: 2, Databases: 100, Value: 40}}))
}
