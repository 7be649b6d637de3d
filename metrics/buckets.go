package metrics

import "slices"

// Classic bucket bounds, in seconds, shaped for LLM serving. Every histogram
// also has native buckets (see nativeFactor), so these bounds matter for
// Prometheus servers that scrape only the classic form and for
// histogram_quantile over _bucket series.
//
// Each classic bucket is a series in every label set of its family, and
// the breakdowns multiply label sets by their bands: the two histograms
// every gap and every first token is observed in (ITL and TTFT) keep full
// resolution, and the breakdowns of the same clocks by band or by turn,
// and the figures of each stream's shape and each response's tokens, get
// coarse sets. A breakdown that
// an objective judges (ITL by load and by position, TTFT by load and by
// turn, TPOT by context, each stream's longest gap) adds every objective of
// that kind to its coarse set, as the main histograms do, so that a band's
// breaches can be counted from its buckets. Native buckets keep the same
// resolution (about 4.5%) in every family.
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

	// tpotBuckets: a stream's time per output token is the mean of its
	// gaps, so it has neither their zero-length gaps nor their stalls:
	// dense over the decode speeds of real deployments, 10 to 50 ms.
	tpotBuckets = []float64{
		0.005, 0.01, 0.015, 0.02, 0.025, 0.03, 0.04, 0.05, 0.075, 0.1, 0.25, 0.5,
	}

	// breakdownGapBuckets: the gaps (and TPOT) broken down by load,
	// position, context and turn. A step of 2 to 2.5 across the decode
	// speeds of real deployments, 10 to 250 ms: enough to see which band
	// is slower; the quantiles' precision is in the native buckets.
	breakdownGapBuckets = []float64{0.01, 0.025, 0.05, 0.1, 0.25}

	// upstreamGapBuckets and upstreamTTFTBuckets: the gaps and TTFT of
	// each upstream endpoint (a model server pod), where the question is
	// which pod of a model is slower than its peers, over the range where
	// pods of one model differ. The E6 series of preferred numbers (1, 1.5,
	// 2.2, 3.3, 4.7, 6.8 per decade, a step of about 10^(1/6) = 1.47):
	// 2 is no power of the step, so a p99 read by histogram_quantile puts
	// pods 2x apart at least 1.4x apart, and pods 2.5x or 3x apart at
	// least 2x apart (TestUpstreamBucketsSeparatePods). A step of 2 or a
	// ladder of 1-1.5-2-3 puts 2.5x apart at 2x exactly, which a rule
	// comparing with twice the peers' median does not call slower.
	upstreamGapBuckets = []float64{
		0.0033, 0.0047, 0.0068, 0.01, 0.015, 0.022, 0.033, 0.047, 0.068, 0.1, 0.15, 0.22, 0.33, 0.47,
	}
	upstreamTTFTBuckets = []float64{
		0.015, 0.022, 0.033, 0.047, 0.068, 0.1, 0.15, 0.22, 0.33, 0.47, 0.68, 1, 1.5, 2.2, 3.3, 4.7, 6.8, 10,
	}

	// maxGapBuckets: each stream's longest gap, from a steady stream's
	// slowest step to a stall.
	maxGapBuckets = []float64{0.1, 0.25, 0.5, 1, 2.5}

	// breakdownTTFTBuckets: TTFT broken down by load and by turn: a
	// prefill on an idle server, one behind a busy batch, a wait in a
	// queue.
	breakdownTTFTBuckets = []float64{0.25, 1, 4}

	// spreadBuckets: a stream's p99 gap over its median, 1 for a perfectly
	// steady stream.
	spreadBuckets = []float64{1.5, 2, 3, 5}

	// ratioBuckets: a stream's median gap over its session's baseline.
	ratioBuckets = []float64{0.9, 1.1, 1.5, 2}

	// tokenCountBuckets: tokens per event, 1 for one token per event; more
	// with speculative decoding (a few) or stream intervals (tens). The
	// dashboards read the mean (_sum over _count); le="1" is the share of
	// events of a single token.
	tokenCountBuckets = []float64{1, 2, 4}

	// responseTokenBuckets: the input and the output tokens of each
	// response, from a short reply to a long document's prompt: every
	// third bound of the GenAI conventions' advice for
	// gen_ai.client.token.usage (powers of 4), coarse because the OTLP
	// export carries the native buckets.
	responseTokenBuckets = []float64{16, 1024, 65536}

	// durationBuckets cover health checks to long generations.
	durationBuckets = []float64{0.1, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 600}
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
