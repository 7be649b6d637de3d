package metrics

import (
	"math"
	"runtime/metrics"
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// TestRuntimeHistogram: a runtime histogram becomes classic buckets (each
// runtime bucket under the first bound it fits below) and native ones of
// schema 2 whose counts add up to the whole, with the sum estimated from
// the buckets' middles.
func TestRuntimeHistogram(t *testing.T) {
	h := &metrics.Float64Histogram{
		// 4-6 µs, 6-8 µs, 0.8-1 ms, 4-5 ms, 5-6 ms, 1 s and over.
		Buckets: []float64{0.000004, 0.000006, 0.000008, 0.0008, 0.001, 0.004, 0.005, 0.006, 1, math.Inf(1)},
		Counts:  []uint64{3, 1, 0, 10, 0, 2, 4, 0, 1},
	}
	var m dto.Metric
	if err := (runtimeHistogram{h: h}).Write(&m); err != nil {
		t.Fatal(err)
	}
	got := m.GetHistogram()
	if got.GetSampleCount() != 21 {
		t.Errorf("count %d, want 21", got.GetSampleCount())
	}
	wantSum := 3*0.000005 + 1*0.000007 + 10*0.0009 + 2*0.0045 + 4*0.0055 + 1*1
	if math.Abs(got.GetSampleSum()-wantSum) > 1e-12 {
		t.Errorf("sum %v, want %v", got.GetSampleSum(), wantSum)
	}
	want := map[float64]uint64{0.00001: 4, 0.00005: 4, 0.001: 14, 0.0025: 14, 0.005: 16, 0.01: 20, 1: 20}
	for _, b := range got.GetBucket() {
		if w, ok := want[b.GetUpperBound()]; ok && b.GetCumulativeCount() != w {
			t.Errorf("le=%v: %d, want %d", b.GetUpperBound(), b.GetCumulativeCount(), w)
		}
	}
	native := int64(0)
	var counts []int64
	count := int64(0)
	for _, d := range got.GetPositiveDelta() {
		count += d
		counts = append(counts, count)
		native += count
	}
	// Native buckets have no +Inf: the sample of 1 s and over is in the
	// bucket of its lower edge.
	if got.GetSchema() != 2 || native != 21 || got.GetZeroCount() != 0 {
		t.Errorf("schema %d, native buckets hold %d (%v in %v), zero bucket %d; want schema 2, all 21 samples",
			got.GetSchema(), native, counts, got.GetPositiveSpan(), got.GetZeroCount())
	}
}

// TestSchedulerCollector: the collector reads the runtime's own sample,
// with classic and native buckets.
func TestSchedulerCollector(t *testing.T) {
	var wg sync.WaitGroup
	for range 200 {
		wg.Go(func() {})
	}
	wg.Wait()
	reg := prometheus.NewRegistry()
	reg.MustRegister(newSchedulerCollector(false))
	fs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	h := fs[0].GetMetric()[0].GetHistogram()
	if fs[0].GetName() != "itlproxy_scheduler_latency_seconds" || h.GetSampleCount() == 0 || len(h.GetBucket()) != len(schedulerBuckets) || len(h.GetPositiveDelta()) == 0 {
		t.Errorf("%s: %d samples, %d classic buckets, %d native", fs[0].GetName(), h.GetSampleCount(), len(h.GetBucket()), len(h.GetPositiveDelta()))
	}
}
