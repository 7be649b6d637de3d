package metrics

import "slices"

// Classic bucket bounds, in seconds, shaped for LLM serving. Every histogram
// also has native buckets (see nativeFactor), so these bounds matter for
// Prometheus servers that scrape only the classic form and for
// histogram_quantile over _bucket series.
var (
	// gapBuckets resolve token gaps from sub-millisecond (several events
	// in one read, speculative decoding) to multi-second stalls. vLLM's own
	// inter-token histogram starts at 10 ms, which hides the interesting
	// range of fast models; these start at 0.5 ms and are dense from 5 to
	// 100 ms where decode steps of real deployments fall.
	gapBuckets = []float64{
		0.0005, 0.001, 0.002, 0.003, 0.004, 0.005, 0.0075,
		0.01, 0.0125, 0.015, 0.0175, 0.02, 0.025, 0.03, 0.035, 0.04, 0.05,
		0.06, 0.075, 0.1, 0.125, 0.15, 0.2, 0.25, 0.3, 0.4, 0.5, 0.75,
		1, 1.5, 2, 3, 5, 10,
	}

	// ttftBuckets cover a prefill of a short prompt on an idle server
	// (a few ms) up to minutes spent queued behind a saturated batch.
	ttftBuckets = []float64{
		0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.25, 0.3, 0.4,
		0.5, 0.6, 0.8, 1, 1.25, 1.5, 2, 2.5, 3, 4, 5, 7.5, 10, 15, 20, 30,
		45, 60, 120,
	}

	// spreadBuckets: a stream's p99 gap over its median, 1 for a perfectly
	// steady stream.
	spreadBuckets = []float64{1, 1.25, 1.5, 2, 2.5, 3, 4, 5, 7.5, 10, 20, 50, 100}

	// ratioBuckets: a stream's median gap over its session's baseline.
	ratioBuckets = []float64{0.25, 0.5, 0.75, 0.9, 1, 1.1, 1.25, 1.5, 2, 3, 5, 10}

	// tokenCountBuckets: tokens per event, 1 for one token per event; more
	// with speculative decoding (a few) or stream intervals (tens).
	tokenCountBuckets = []float64{1, 1.5, 2, 3, 4, 5, 6, 8, 10, 12, 16, 24, 32, 64}

	// durationBuckets cover health checks to long generations.
	durationBuckets = []float64{
		0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2, 3, 5, 7.5, 10, 15, 20, 30,
		45, 60, 90, 120, 180, 300, 600, 1200,
	}
)

// Native histogram settings shared by every histogram: schema 3 (buckets
// grow by at most 1.1x, about 4.5% relative error at any quantile), bounded
// to 160 buckets per series, and reset no more than hourly when that bound
// forces a reset.
const (
	nativeFactor     = 1.1
	nativeMaxBuckets = 160
)

// withBounds returns bounds with extra added, sorted and without
// duplicates.
func withBounds(bounds []float64, extra ...float64) []float64 {
	out := slices.Concat(bounds, extra)
	slices.Sort(out)
	return slices.Compact(out)
}
