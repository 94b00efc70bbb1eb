package topology

import (
	"testing"
	"time"
)

// The report requests of one wait: a new value at every step of the
// documented spacing (10 s for 2 minutes, 30 s until 15 minutes, then 10
// minutes), the same value in between, and the wait to the next change.
func TestReportRequestSpacing(t *testing.T) {
	since := time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC)
	changes, last := 0, ""
	var gaps []time.Duration
	prevChange := since
	for age := time.Duration(0); age <= 2*time.Hour; age += time.Second {
		now := since.Add(age)
		v, next := ReportRequest(since, now)
		if next <= 0 || next > reportRequestIdle {
			t.Fatalf("at %s the next request is in %s", age, next)
		}
		if nv, _ := ReportRequest(since, now.Add(next)); nv == v {
			t.Fatalf("at %s the value does not change after the %s it names", age, next)
		}
		if v != last {
			changes++
			if age > 0 {
				gaps = append(gaps, now.Sub(prevChange))
			}
			prevChange, last = now, v
		}
	}
	// 12 in the first 2 minutes, 26 until 15 minutes, 10 in the next 105.
	if want := 12 + 26 + 10 + 1; changes != want {
		t.Fatalf("%d requests in 2 hours, want %d", changes, want)
	}
	for i, g := range gaps {
		var want time.Duration
		switch {
		case i < 12:
			want = reportRequestFast
		case i < 38:
			want = reportRequestSlow
		default:
			want = reportRequestIdle
		}
		if g != want {
			t.Fatalf("request %d came %s after the one before, want %s", i+1, g, want)
		}
	}
	if a, _ := ReportRequest(since, since); a == func() string { v, _ := ReportRequest(since.Add(time.Second), since.Add(time.Second)); return v }() {
		t.Fatalf("two waits that began at different times ask with the same value %q", a)
	}
}
