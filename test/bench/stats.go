package main

import (
	"math"
	"slices"
	"time"
)

// Dist summarises a set of durations in milliseconds.
type Dist struct {
	N    int     `json:"n"`
	P50  float64 `json:"p50_ms"`
	P90  float64 `json:"p90_ms"`
	P99  float64 `json:"p99_ms"`
	Max  float64 `json:"max_ms"`
	Mean float64 `json:"mean_ms"`
}

// newDist computes nearest-rank percentiles of ds.
func newDist(ds []time.Duration) Dist {
	if len(ds) == 0 {
		return Dist{}
	}
	ms := make([]float64, len(ds))
	sum := 0.0
	for i, d := range ds {
		ms[i] = float64(d) / float64(time.Millisecond)
		sum += ms[i]
	}
	slices.Sort(ms)
	return Dist{
		N:    len(ms),
		P50:  percentile(ms, 50),
		P90:  percentile(ms, 90),
		P99:  percentile(ms, 99),
		Max:  ms[len(ms)-1],
		Mean: round1(sum / float64(len(ms))),
	}
}

// percentile is the nearest-rank percentile of sorted values.
func percentile(sorted []float64, p float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	i := int(math.Ceil(p/100*float64(len(sorted)))) - 1
	i = max(0, min(i, len(sorted)-1))
	return round1(sorted[i])
}

func round1(v float64) float64 { return math.Round(v*10) / 10 }

// ratio is a/b, or 0 when b is not positive.
func ratio(a, b float64) float64 {
	if b <= 0 {
		return 0
	}
	return math.Round(a/b*100) / 100
}
