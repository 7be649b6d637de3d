package main

import (
	"math"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"
)

func TestBucketsCoverEveryValue(t *testing.T) {
	for _, v := range []uint64{0, 1, 255, 256, 257, 1000, 1 << 20, 20_000_000, 1<<62 + 12345, math.MaxInt64} {
		i := bucketOf(v)
		low, width := bucketRange(i)
		if i < 0 || i >= histBuckets || v < low || v >= low+width {
			t.Errorf("%d: bucket %d = [%d, %d)", v, i, low, low+width)
		}
		if low >= 2*subBuckets && float64(width)/float64(low) > 1.0/subBuckets {
			t.Errorf("%d: bucket [%d, +%d) is wider than 1/%d of its bound", v, low, width, subBuckets)
		}
	}
	// Buckets are contiguous and ordered.
	for i := 1; i < histBuckets; i++ {
		low, _ := bucketRange(i)
		prevLow, prevWidth := bucketRange(i - 1)
		if prevLow+prevWidth != low {
			t.Fatalf("bucket %d starts at %d, bucket %d ends at %d", i, low, i-1, prevLow+prevWidth)
		}
	}
}

// TestQuantilesWithinStatedError records samples shaped like token gaps
// (a body around 20ms, a tail of stalls) and checks each reported
// quantile against the exact nearest-rank sample.
func TestQuantilesWithinStatedError(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	var h histogram
	samples := make([]time.Duration, 0, 100_000)
	for range 100_000 {
		d := time.Duration(rng.NormFloat64()*2e6 + 20e6)
		if rng.Float64() < 0.01 {
			d = time.Duration(rng.ExpFloat64() * 5e8)
		}
		d = max(d, 0)
		samples = append(samples, d)
		h.record(d)
	}
	slices.Sort(samples)
	d := h.snapshot()
	for _, q := range []float64{0, 0.001, 0.5, 0.9, 0.99, 0.999, 1} {
		rank := max(int(math.Ceil(q*float64(len(samples)))), 1)
		exact := samples[rank-1]
		got := d.quantile(q)
		if err := math.Abs(float64(got-exact)) / float64(exact); err > quantileError {
			t.Errorf("q%v: %v, exact %v: off by %.3f%%, more than %.2f%%", q, got, exact, 100*err, 100*quantileError)
		}
	}
	var sum time.Duration
	for _, s := range samples {
		sum += s
	}
	if d.count != uint64(len(samples)) || d.sum != sum || d.min != samples[0] || d.max != samples[len(samples)-1] {
		t.Errorf("count %d sum %v min %v max %v; want %d %v %v %v", d.count, d.sum, d.min, d.max,
			len(samples), sum, samples[0], samples[len(samples)-1])
	}
}

func TestHistogramConcurrentAndMerged(t *testing.T) {
	var a, b histogram
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 1000 {
				a.record(time.Duration(g*1000+i) * time.Microsecond)
			}
		})
	}
	wg.Wait()
	b.record(time.Hour)
	var d dist
	d.merge(a.snapshot())
	d.merge(b.snapshot())
	d.merge(dist{})
	if d.count != 8001 || d.min != 0 || d.max != time.Hour {
		t.Errorf("merged: count %d, min %v, max %v", d.count, d.min, d.max)
	}
	if got := d.quantile(0.5); math.Abs(float64(got-4000*time.Microsecond)) > quantileError*float64(4*time.Millisecond) {
		t.Errorf("median %v, want 4ms", got)
	}
	if (dist{}).quantile(0.5) != 0 || (dist{}).mean() != 0 {
		t.Error("an empty distribution reports values")
	}
}
