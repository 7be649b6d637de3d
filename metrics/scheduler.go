package metrics

import (
	"math"
	"runtime/metrics"

	"github.com/prometheus/client_golang/prometheus"
)

// schedulerLatencies is the Go runtime's sample of the time goroutines
// wait to run once they are ready: runtime/metrics' /sched/latencies.
const schedulerLatencies = "/sched/latencies:seconds"

// schedulerBuckets are the bounds it is exported with: fine from 10 µs to
// 25 ms, where a proxy's wait to run goes from idle to overloaded, with
// 5 ms, the alert's threshold, among them.
var schedulerBuckets = []float64{0.00001, 0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.1, 1}

// schedulerCollector exports the runtime's sample of the goroutines' wait
// to run, read at each scrape and never on the data path: the wait a
// stream's goroutine goes through between its upstream's bytes being
// ready and its read returning, which no per-event clock of the proxy can
// see.
type schedulerCollector struct{ desc *prometheus.Desc }

func newSchedulerCollector() schedulerCollector {
	return schedulerCollector{desc: prometheus.NewDesc(namespace+"_scheduler_latency_seconds",
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
	count, sum, buckets := rebucket(s[0].Value.Float64Histogram(), schedulerBuckets)
	ch <- prometheus.MustNewConstHistogram(c.desc, count, sum, buckets)
}

// rebucket turns a runtime histogram (h.Counts[i] between h.Buckets[i]
// and h.Buckets[i+1]) into the cumulative counts at bounds, each runtime
// bucket counted under the first bound its upper edge does not pass (the
// runtime's buckets grow by 19%: a bound falls within one at most), and
// an estimate of the sum from each bucket's middle.
func rebucket(h *metrics.Float64Histogram, bounds []float64) (count uint64, sum float64, cumulative map[float64]uint64) {
	cumulative = make(map[float64]uint64, len(bounds))
	perBound := make([]uint64, len(bounds))
	for i, n := range h.Counts {
		if n == 0 {
			continue
		}
		lo, hi := max(h.Buckets[i], 0), h.Buckets[i+1]
		count += n
		mid := lo
		if !math.IsInf(hi, 1) {
			mid = (lo + hi) / 2
		}
		sum += float64(n) * mid
		for b, bound := range bounds {
			if hi <= bound*(1+1e-9) {
				perBound[b] += n
				break
			}
		}
	}
	var running uint64
	for b, bound := range bounds {
		running += perBound[b]
		cumulative[bound] = running
	}
	return count, sum, cumulative
}
