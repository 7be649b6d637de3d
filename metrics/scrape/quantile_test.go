package scrape

import (
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/expfmt"
)

func TestHistogramQuantile(t *testing.T) {
	nan, inf := math.NaN(), math.Inf(+1)
	cases := []struct {
		name       string
		b          Buckets
		q          float64
		want       float64
		beyondLast bool
	}{
		// Rank 10 of 20 closes (0.01, 0.02]; rank 15 is half-way through
		// (0.02, 0.05].
		{"rank closes a bucket", Buckets{Bounds: []float64{0.01, 0.02, 0.05}, Cumulative: []uint64{0, 10, 20}, Count: 20}, 0.5, 0.02, false},
		{"half-way through a bucket", Buckets{Bounds: []float64{0.01, 0.02, 0.05}, Cumulative: []uint64{0, 10, 20}, Count: 20}, 0.75, 0.035, false},
		// Rank 2 of 8, in (0, 0.1] which holds 4: half of 0.1.
		{"first bucket, from 0", Buckets{Bounds: []float64{0.1, 0.2}, Cumulative: []uint64{4, 8}, Count: 8}, 0.25, 0.05, false},
		{"first bucket bounded at 0", Buckets{Bounds: []float64{0, 1}, Cumulative: []uint64{3, 4}, Count: 4}, 0.5, 0, false},
		{"first bucket bounded below 0", Buckets{Bounds: []float64{-1, 1}, Cumulative: []uint64{3, 4}, Count: 4}, 0.5, -1, false},
		// Rank 1.98 of 2 is past the last finite bucket's 1.
		{"+Inf bucket: the last finite bound", Buckets{Bounds: []float64{0.1, 0.2}, Cumulative: []uint64{1, 1}, Count: 2}, 0.99, 0.2, true},
		{"q=1 within the finite buckets", Buckets{Bounds: []float64{1, 2}, Cumulative: []uint64{1, 2}, Count: 2}, 1, 2, false},
		// Forced monotonic: [5 5 6]; rank 5.4 is 0.4 into (2, 3], not 2.4
		// of 3 into it (2.8).
		{"counts going down are raised", Buckets{Bounds: []float64{1, 2, 3}, Cumulative: []uint64{5, 3, 6}, Count: 6}, 0.9, 2.4, false},
		{"empty", Buckets{Bounds: []float64{1, 2}, Cumulative: []uint64{0, 0}}, 0.5, nan, false},
		{"no finite buckets", Buckets{Count: 5, Sum: 1}, 0.5, nan, true},
		{"q NaN", Buckets{Bounds: []float64{1}, Cumulative: []uint64{1}, Count: 1}, nan, nan, false},
		{"q below 0", Buckets{Bounds: []float64{1}, Cumulative: []uint64{1}, Count: 1}, -0.1, math.Inf(-1), false},
		{"q above 1", Buckets{Bounds: []float64{1}, Cumulative: []uint64{1}, Count: 1}, 1.1, inf, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := HistogramQuantile(c.q, c.b)
			if !same(got, c.want) {
				t.Errorf("HistogramQuantile(%v) = %v, want %v", c.q, got, c.want)
			}
			if q := min(max(c.q, 0), 1); !math.IsNaN(c.q) && c.b.BeyondBounds(q) != c.beyondLast {
				t.Errorf("BeyondBounds(%v) = %v, want %v", q, !c.beyondLast, c.beyondLast)
			}
		})
	}
}

// TestWithinFirstBucket: a quantile is in the first bucket when its rank
// is at most that bucket's count, and never without observations.
func TestWithinFirstBucket(t *testing.T) {
	bounds := []float64{0.00001, 0.0001, 0.001}
	cases := []struct {
		name string
		b    Buckets
		q    float64
		want bool
	}{
		// Rank 50 of 100, 60 under 10 µs.
		{"median under the first bound", Buckets{Bounds: bounds, Cumulative: []uint64{60, 90, 100}, Count: 100}, 0.5, true},
		// Rank 99 of 100 is in (10 µs, 100 µs].
		{"p99 above it", Buckets{Bounds: bounds, Cumulative: []uint64{60, 99, 100}, Count: 100}, 0.99, false},
		// Rank 60 of 100 closes the first bucket: still in it.
		{"rank closing the first bucket", Buckets{Bounds: bounds, Cumulative: []uint64{60, 90, 100}, Count: 100}, 0.6, true},
		{"every observation past the last bound", Buckets{Bounds: bounds, Cumulative: []uint64{0, 0, 0}, Count: 5}, 0.5, false},
		{"empty", Buckets{Bounds: bounds, Cumulative: []uint64{0, 0, 0}}, 0.5, false},
		{"no finite buckets", Buckets{Count: 5, Sum: 1}, 0.5, false},
	}
	for _, c := range cases {
		if got := c.b.WithinFirstBucket(c.q); got != c.want {
			t.Errorf("%s: WithinFirstBucket(%v) = %v, want %v", c.name, c.q, got, c.want)
		}
	}
}

// same: equal within rounding, or both NaN.
func same(a, b float64) bool {
	return a == b || math.Abs(a-b) < 1e-12 || math.IsNaN(a) && math.IsNaN(b)
}

// TestBucketsOfARealHistogram: a client_golang histogram, gathered and
// parsed back from its text exposition (which adds the +Inf bucket), sums
// and interpolates to the same hand-computed values.
func TestBucketsOfARealHistogram(t *testing.T) {
	reg := prometheus.NewRegistry()
	h := prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "h_seconds", Help: "h", Buckets: []float64{0.01, 0.02, 0.05}}, []string{"model", "endpoint"})
	reg.MustRegister(h)
	for range 4 {
		h.WithLabelValues("a", "x").Observe(0.015) // (0.01, 0.02]
		h.WithLabelValues("b", "x").Observe(0.03)  // (0.02, 0.05]
		h.WithLabelValues("b", "y").Observe(1)     // +Inf
	}
	gathered, err := Gather(reg)
	if err != nil {
		t.Fatal(err)
	}
	var text strings.Builder
	for _, f := range gathered {
		if _, err := expfmt.MetricFamilyToText(&text, f); err != nil {
			t.Fatal(err)
		}
	}
	parsed, err := Parse(strings.NewReader(text.String()))
	if err != nil {
		t.Fatalf("%v\n%s", err, text.String())
	}
	for name, fs := range map[string]Families{"gathered": gathered, "parsed": parsed} {
		x := fs.Buckets("h_seconds", "endpoint", "x")
		if fmt.Sprint(x.Bounds, x.Cumulative, x.Count) != "[0.01 0.02 0.05] [0 4 8] 8" || math.Abs(x.Sum-0.18) > 1e-9 {
			t.Errorf("%s endpoint x: %+v, want bounds [0.01 0.02 0.05], cumulative [0 4 8], count 8, sum 0.18", name, x)
		}
		// Rank 6 of 8 is half-way through (0.02, 0.05].
		if got := HistogramQuantile(0.75, x); !same(got, 0.035) {
			t.Errorf("%s endpoint x: p75 %v, want 0.035", name, got)
		}
		b := fs.Buckets("h_seconds", "model", "b")
		if got := HistogramQuantile(0.9, b); got != 0.05 || !b.BeyondBounds(0.9) {
			t.Errorf("%s model b: p90 %v (beyond the bounds: %v), want the last bound 0.05, beyond", name, got, b.BeyondBounds(0.9))
		}
		if n, sum := fs.Histogram("h_seconds", "model", "b", "endpoint", "y"); n != 4 || sum != 4 {
			t.Errorf("%s model b endpoint y: count %d sum %v, want 4 and 4", name, n, sum)
		}
	}
}

func TestBucketsWithOtherBounds(t *testing.T) {
	reg := prometheus.NewRegistry()
	for i, bounds := range [][]float64{{1, 2}, {1, 3}} {
		h := prometheus.NewHistogram(prometheus.HistogramOpts{Name: fmt.Sprintf("h%d", i), Help: "h", Buckets: bounds})
		reg.MustRegister(h)
		h.Observe(0.5)
	}
	fs, err := Gather(reg)
	if err != nil {
		t.Fatal(err)
	}
	var b Buckets
	b.Add(fs.Series("h0")[0].GetHistogram())
	b.Add(fs.Series("h1")[0].GetHistogram())
	if b.Bounds != nil || b.Cumulative != nil || b.Count != 2 || b.Sum != 1 {
		t.Errorf("summing different bounds: %+v, want no buckets, count 2, sum 1", b)
	}
	if !math.IsNaN(HistogramQuantile(0.5, b)) {
		t.Error("a quantile of a sum without buckets")
	}
}
