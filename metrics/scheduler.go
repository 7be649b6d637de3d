package metrics

import (
	"math"
	"runtime/metrics"
	"slices"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// schedulerLatencies is the Go runtime's sample of the time goroutines
// wait to run once they are ready: runtime/metrics' /sched/latencies.
const schedulerLatencies = "/sched/latencies:seconds"

// schedulerBuckets are the classic bounds it is exported with: finest
// from 1 to 10 ms, where a proxy's wait to run goes from busy to
// overloaded, with 5 ms, the alert's threshold, among them; the native
// buckets resolve the rest.
var schedulerBuckets = []float64{0.0001, 0.001, 0.0025, 0.005, 0.01, 0.1}

// schedulerSchema is its native buckets' schema: 2, buckets 19% wide, as
// fine as the runtime's own (four to each doubling).
const schedulerSchema = 2

// schedulerCollector exports the runtime's sample of the goroutines' wait
// to run, read at each scrape and never on the data path: the wait a
// stream's goroutine goes through between its upstream's bytes being
// ready and its read returning, which no per-event clock of the proxy can
// see.
type schedulerCollector struct {
	desc *prometheus.Desc
	// nativeOnly: without classic buckets, as every breakdown with
	// Options.NativeBreakdowns.
	nativeOnly bool
}

func newSchedulerCollector(nativeOnly bool) schedulerCollector {
	return schedulerCollector{nativeOnly: nativeOnly, desc: prometheus.NewDesc(namespace+"_scheduler_latency_seconds",
		"Time the proxy's goroutines waited to run once ready, as the Go runtime samples it: the wait "+
			"of a stream's goroutine between its upstream's bytes being ready and its read returning.",
		nil, nil)}
}

func (c schedulerCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

func (c schedulerCollector) Collect(ch chan<- prometheus.Metric) {
	s := []metrics.Sample{{Name: schedulerLatencies}}
	metrics.Read(s)
	if s[0].Value.Kind() != metrics.KindFloat64Histogram {
		return // a runtime without it
	}
	ch <- runtimeHistogram{desc: c.desc, h: s[0].Value.Float64Histogram(), nativeOnly: c.nativeOnly}
}

// runtimeHistogram is a runtime histogram as a Prometheus histogram with
// classic buckets (schedulerBuckets) and native ones (schedulerSchema):
// each of the runtime's buckets (h.Counts[i] between h.Buckets[i] and
// h.Buckets[i+1]) is counted whole in the classic bucket of the first
// bound its upper edge does not pass, and in the native bucket of its
// middle; the sum is estimated from the middles. The runtime's buckets are
// a quarter of a doubling wide: so is the error of either.
type runtimeHistogram struct {
	desc       *prometheus.Desc
	h          *metrics.Float64Histogram
	nativeOnly bool
}

func (r runtimeHistogram) Desc() *prometheus.Desc { return r.desc }

func (r runtimeHistogram) Write(out *dto.Metric) error {
	var count, zero uint64
	var sum float64
	classic := make([]uint64, len(schedulerBuckets))
	native := map[int]int64{}
	for i, n := range r.h.Counts {
		if n == 0 {
			continue
		}
		lo, hi := max(r.h.Buckets[i], 0), r.h.Buckets[i+1]
		mid := lo
		if !math.IsInf(hi, 1) {
			mid = (lo + hi) / 2
		}
		count += n
		sum += float64(n) * mid
		for b, bound := range schedulerBuckets {
			if hi <= bound*(1+1e-9) {
				classic[b] += n
				break
			}
		}
		if mid <= 0 {
			zero += n
			continue
		}
		native[int(math.Ceil(math.Log2(mid)*(1<<schedulerSchema)))] += int64(n)
	}
	h := &dto.Histogram{SampleCount: &count, SampleSum: &sum, Schema: new(int32(schedulerSchema)),
		ZeroThreshold: new(prometheus.DefNativeHistogramZeroThreshold), ZeroCount: &zero}
	var cumulative uint64
	for b, bound := range schedulerBuckets {
		if r.nativeOnly {
			break
		}
		cumulative += classic[b]
		h.Bucket = append(h.Bucket, &dto.Bucket{UpperBound: new(bound), CumulativeCount: new(cumulative)})
	}
	h.PositiveSpan, h.PositiveDelta = nativeSpans(native)
	out.Histogram = h
	return nil
}

// nativeSpans encodes native bucket counts by index as spans and deltas.
func nativeSpans(counts map[int]int64) ([]*dto.BucketSpan, []int64) {
	if len(counts) == 0 {
		return []*dto.BucketSpan{{Offset: new(int32(0)), Length: new(uint32(0))}}, nil
	}
	indexes := make([]int, 0, len(counts))
	for i := range counts {
		indexes = append(indexes, i)
	}
	slices.Sort(indexes)
	var spans []*dto.BucketSpan
	var deltas []int64
	prev, last := int64(0), 0
	for j, i := range indexes {
		if j == 0 || i != last+1 {
			offset := int32(i)
			if j > 0 {
				offset = int32(i - last - 1)
			}
			spans = append(spans, &dto.BucketSpan{Offset: new(offset), Length: new(uint32(0))})
		}
		*spans[len(spans)-1].Length++
		deltas = append(deltas, counts[i]-prev)
		prev, last = counts[i], i
	}
	return spans, deltas
}
