package metrics

import (
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

func TestSketchBuckets(t *testing.T) {
	// Every duration lands in a bucket whose midpoint is within 12.5% of
	// it (from 4 units up; below, within one unit), and buckets are
	// monotonic.
	prev := -1
	for d := time.Duration(0); d < 2*time.Hour; d = d*21/20 + time.Microsecond {
		i := sketchIndex(d)
		if i < prev {
			t.Fatalf("index of %v is %d, below %d", d, i, prev)
		}
		prev = i
		mid := sketchMid(i)
		if i == sketchBuckets-1 {
			continue // the last bucket collects everything beyond
		}
		if d >= 4<<sketchUnitShift {
			if r := float64(mid) / float64(d); r < 1/1.125 || r > 1.125 {
				t.Fatalf("%v: bucket %d midpoint %v is %.3f of it", d, i, mid, r)
			}
		} else if diff := mid - d; diff > 1<<sketchUnitShift || diff < -(1<<sketchUnitShift) {
			t.Fatalf("%v: bucket %d midpoint %v", d, i, mid)
		}
	}
	if sketchIndex(time.Hour) >= sketchBuckets-1 {
		t.Errorf("an hour does not fit below the last bucket")
	}
}

func TestSketchQuantiles(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, tc := range []struct {
		name string
		gaps []time.Duration
	}{
		{"steady 30ms", repeat(30*time.Millisecond, 200)},
		{"uniform 5-50ms", uniform(rng, 5*time.Millisecond, 50*time.Millisecond, 1000)},
		{"mostly fast, 2% stalls", append(repeat(10*time.Millisecond, 490), repeat(2*time.Second, 10)...)},
		{"one gap", []time.Duration{7 * time.Millisecond}},
	} {
		var s gapSketch
		for _, g := range tc.gaps {
			s.add(g)
		}
		sorted := slices.Sorted(slices.Values(tc.gaps))
		for _, q := range []float64{0.5, 0.9, 0.99} {
			exact := sorted[max(0, int(q*float64(len(sorted))+0.999999)-1)]
			got := s.quantile(q)
			if r := float64(got) / float64(exact); r < 0.88 || r > 1.13 {
				t.Errorf("%s: q%.2f = %v, exact %v", tc.name, q, got, exact)
			}
		}
	}
	var empty gapSketch
	if empty.quantile(0.5) != 0 {
		t.Error("empty sketch has a median")
	}
}

func repeat(d time.Duration, n int) []time.Duration {
	out := make([]time.Duration, n)
	for i := range out {
		out[i] = d
	}
	return out
}

func uniform(rng *rand.Rand, lo, hi time.Duration, n int) []time.Duration {
	out := make([]time.Duration, n)
	for i := range out {
		out[i] = lo + time.Duration(rng.Int64N(int64(hi-lo)))
	}
	return out
}
