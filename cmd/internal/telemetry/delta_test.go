package telemetry

import (
	"slices"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
)

// TestDownscale: a bucket of the lower scale sums the buckets it covers,
// negative indexes too (floored).
func TestDownscale(t *testing.T) {
	b := metricdata.ExponentialBucket{Offset: -3, Counts: []uint64{1, 2, 3, 4, 5, 6}} // indexes -3..2
	got := downscale(b, 1)                                                            // -2: {-3}, -1: {-2,-1}, 0: {0,1}, 1: {2}
	if want := (metricdata.ExponentialBucket{Offset: -2, Counts: []uint64{1, 5, 9, 6}}); got.Offset != want.Offset || !slices.Equal(got.Counts, want.Counts) {
		t.Errorf("downscale by 1: %+v, want %+v", got, want)
	}
	got = downscale(b, 2) // -1: {-3..-1}, 0: {0..2}
	if want := (metricdata.ExponentialBucket{Offset: -1, Counts: []uint64{6, 15}}); got.Offset != want.Offset || !slices.Equal(got.Counts, want.Counts) {
		t.Errorf("downscale by 2: %+v, want %+v", got, want)
	}
}

// TestSubtract: bucket by bucket, trimmed; refused when the earlier total
// counts more anywhere, or counts where the later has no bucket.
func TestSubtract(t *testing.T) {
	cur := metricdata.ExponentialBucket{Offset: 10, Counts: []uint64{1, 4, 6, 2}}
	got, ok := subtract(cur, metricdata.ExponentialBucket{Offset: 10, Counts: []uint64{1, 3}})
	if want := (metricdata.ExponentialBucket{Offset: 11, Counts: []uint64{1, 6, 2}}); !ok || got.Offset != want.Offset || !slices.Equal(got.Counts, want.Counts) {
		t.Errorf("subtract: %+v %v, want %+v", got, ok, want)
	}
	if _, ok := subtract(cur, metricdata.ExponentialBucket{Offset: 12, Counts: []uint64{7}}); ok {
		t.Error("an earlier total counting more was subtracted")
	}
	if _, ok := subtract(cur, metricdata.ExponentialBucket{Offset: 9, Counts: []uint64{1}}); ok {
		t.Error("an earlier total counting outside the later's buckets was subtracted")
	}
	if got, ok := subtract(cur, cur); !ok || len(got.Counts) != 0 {
		t.Errorf("a total less itself: %+v %v, want no bucket", got, ok)
	}
}

// TestDeltasOfANativeHistogram pushes a real native histogram through the
// producer under the delta temporality, across the resolution drop
// client_golang makes when it outgrows its buckets: each push is exactly
// what was observed since the previous one.
func TestDeltasOfANativeHistogram(t *testing.T) {
	reg := prometheus.NewRegistry()
	h := prometheus.NewHistogram(prometheus.HistogramOpts{
		Name: "h_seconds", Help: "H.", NativeHistogramBucketFactor: 1.1, NativeHistogramMaxBucketNumber: 20,
		NativeHistogramMinResetDuration: time.Hour,
	})
	reg.MustRegister(h)
	p := newRegistryProducer(reg, nil, Delta, GenAI{}, "v")
	var pushed, observed uint64
	scales := map[int32]bool{}
	for round := range 4 {
		// Each round spreads over more buckets, past the limit of 20.
		for i := range 10 * (round + 1) {
			h.Observe(0.001 * float64(1+i*(round+1)))
			observed++
		}
		pt := exponentialPoint(t, p, "h_seconds")
		scales[pt.Scale] = true
		var inBuckets uint64
		for _, c := range pt.PositiveBucket.Counts {
			inBuckets += c
		}
		if inBuckets+pt.ZeroCount != pt.Count {
			t.Errorf("round %d: %d in buckets, count %d", round, inBuckets+pt.ZeroCount, pt.Count)
		}
		pushed += pt.Count
		if pushed != observed {
			t.Errorf("round %d: the deltas add up to %d observations, %d were made", round, pushed, observed)
		}
	}
	if len(scales) < 2 {
		t.Errorf("scales %v: the histogram never lowered its resolution, which the test is about", scales)
	}
}

// exponentialPoint produces once and returns the point of the exponential
// histogram name.
func exponentialPoint(t *testing.T, p *registryProducer, name string) metricdata.ExponentialHistogramDataPoint[float64] {
	t.Helper()
	scopes, err := p.Produce(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range scopes {
		for _, m := range s.Metrics {
			if e, ok := m.Data.(metricdata.ExponentialHistogram[float64]); ok && m.Name == name && len(e.DataPoints) == 1 {
				if e.Temporality != metricdata.DeltaTemporality {
					t.Errorf("%s pushed %v", name, e.Temporality)
				}
				return e.DataPoints[0]
			}
		}
	}
	t.Fatalf("no exponential histogram %s with one point", name)
	return metricdata.ExponentialHistogramDataPoint[float64]{}
}

// TestDeltaOfAResetSeries: a series whose start moved is pushed whole from
// its new start; one whose total went down under the same start is not
// pushed.
func TestDeltaOfAResetSeries(t *testing.T) {
	t0 := time.Unix(1000, 0)
	prev := metricdata.DataPoint[float64]{StartTime: t0, Time: t0.Add(time.Minute), Value: 10}
	reset := metricdata.DataPoint[float64]{StartTime: t0.Add(90 * time.Second), Time: t0.Add(2 * time.Minute), Value: 3}
	if d, _, ok := sumDelta(reset, prev); !ok || d.Value != 3 || !d.StartTime.Equal(reset.StartTime) {
		t.Errorf("a reset series: %+v %v, want its total from its new start", d, ok)
	}
	cont := metricdata.DataPoint[float64]{StartTime: t0, Time: t0.Add(2 * time.Minute), Value: 14}
	if d, _, ok := sumDelta(cont, prev); !ok || d.Value != 4 || !d.StartTime.Equal(prev.Time) {
		t.Errorf("a counter: %+v %v, want 4 since the previous push", d, ok)
	}
	down := metricdata.DataPoint[float64]{StartTime: t0, Time: t0.Add(2 * time.Minute), Value: 9}
	if _, _, ok := sumDelta(down, prev); ok {
		t.Error("a total that went down under the same start was pushed")
	}
}
