package metrics

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// overheadBuckets: a stream's wire TPOT over its engine's TPOT. 1 is a
// user who sees the decode as the engine ran it; each step above is time
// added between the engine and the user.
var overheadBuckets = []float64{0.9, 1, 1.05, 1.1, 1.25, 1.5, 2, 3}

// engineHistograms are the upstream's own account of its decode, beside
// the wire's.
type engineHistograms struct {
	tpot, ttft, overhead *prometheus.HistogramVec
}

// engineCollectors builds the histograms of the timing the servers'
// native APIs report. Each says where the figure comes from: the proxy
// does not measure it, it reads it. The engine's TPOT has the wire TPOT's
// buckets, so that the two compare bucket for bucket.
func (m *Metrics) engineCollectors(r *registrar) {
	m.engine.tpot = r.breakdown("engine_time_per_output_token_seconds",
		"Time per output token as the upstream reports it, on the engine's clock from its first "+
			"decode step to its last, one observation per response that reports it.",
		tpotBuckets, "model", "endpoint")
	m.engine.ttft = r.breakdown("engine_time_to_first_token_seconds",
		"Time to first token as the upstream reports it, on the engine's clock from the start of the "+
			"model's work on the request to the end of the prefill.",
		breakdownTTFTBuckets, "model", "endpoint")
	m.engine.overhead = r.breakdown("wire_overhead_ratio",
		"A stream's time per output token on the wire (itlproxy_time_per_output_token_seconds) over "+
			"the engine's own, one observation per stream that has both.",
		overheadBuckets, "model", "endpoint")
}

// Engine records the timing the upstream reported for one response:
// tpot and ttft (0 when not reported), and, when wireTPOT (the stream's
// TPOT on the wire, -1 when none) is known too, their ratio.
func (m *Metrics) Engine(l Labels, tpot, ttft, wireTPOT time.Duration) {
	if tpot > 0 {
		m.engine.tpot.WithLabelValues(l.Model, l.Endpoint).Observe(tpot.Seconds())
		if wireTPOT >= 0 {
			m.engine.overhead.WithLabelValues(l.Model, l.Endpoint).Observe(float64(wireTPOT) / float64(tpot))
		}
	}
	if ttft > 0 {
		m.engine.ttft.WithLabelValues(l.Model, l.Endpoint).Observe(ttft.Seconds())
	}
}
