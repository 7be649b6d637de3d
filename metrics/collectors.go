package metrics

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// registrar builds collectors and registers each on reg as it is built, so
// that no collector can be built and left unregistered. After the first
// registration error it registers nothing more, and New returns that
// error.
type registrar struct {
	reg prometheus.Registerer
	err error
	// nativeBreakdowns: breakdown histograms get native buckets only.
	nativeBreakdowns bool
}

func (r *registrar) register(c prometheus.Collector) {
	if r.err == nil {
		r.err = r.reg.Register(c)
	}
}

func (r *registrar) counter(name, help string, labels ...string) *prometheus.CounterVec {
	c := prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: namespace, Name: name, Help: help}, labels)
	r.register(c)
	return c
}

func (r *registrar) gauge(name, help string, labels ...string) *prometheus.GaugeVec {
	g := prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: namespace, Name: name, Help: help}, labels)
	r.register(g)
	return g
}

func (r *registrar) histogram(name, help string, buckets []float64, labels ...string) *prometheus.HistogramVec {
	h := prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Namespace:                       namespace,
		Name:                            name,
		Help:                            help,
		Buckets:                         buckets,
		NativeHistogramBucketFactor:     nativeFactor,
		NativeHistogramMaxBucketNumber:  nativeMaxBuckets,
		NativeHistogramMinResetDuration: time.Hour,
	}, labels)
	r.register(h)
	return h
}

// breakdown builds a histogram that breaks a main clock down (by load,
// position, context or turn), describes each stream's shape or each
// response's tokens, or holds an engine's own figures: with classic
// buckets, coarse (plus the objectives that judge what it observes, which
// the caller adds), beside the native ones; without any when the scraper
// takes native histograms (Options.NativeBreakdowns).
func (r *registrar) breakdown(name, help string, classic []float64, labels ...string) *prometheus.HistogramVec {
	if r.nativeBreakdowns {
		classic = nil
	}
	return r.histogram(name, help, classic, labels...)
}

// latencyCollectors builds the histograms of the three token clocks and
// of the request's duration, and the breakdowns of ITL by position and of
// TPOT by context. Objectives (and, in the ITL histogram, the stall
// threshold) are bucket bounds too, so that histogram_quantile and bucket
// ratios are exact at them; the breakdowns take their kind's objectives
// but not the stall threshold, as ITL by load does (itlproxy_stalls_total
// counts the stalls).
func (m *Metrics) latencyCollectors(r *registrar, slos SLOs, stallThreshold time.Duration) {
	itlBounds := itlBounds(slos, stallThreshold)
	m.ttft = r.histogram("time_to_first_token_seconds",
		"Time to first token of each stream that produced one, from t0 to its first token-bearing "+
			"event fully read from the upstream.",
		withBounds(ttftBuckets, slos.bounds(SLOTTFT)...), "model", "endpoint")
	m.itl = r.histogram("inter_token_latency_seconds",
		"Inter-token latency, the gap between two consecutive token-bearing events of a stream, each "+
			"stamped when fully read from the upstream, one observation per gap.",
		withBounds(gapBuckets, itlBounds...), "model", "endpoint")
	m.itlByPosition = r.breakdown("inter_token_latency_by_position_seconds",
		"Inter-token latency by where the gap falls in its stream (a band of output positions), with "+
			"the same gaps and clock as itlproxy_inter_token_latency_seconds.",
		withBounds(breakdownGapBuckets, slos.bounds(SLOITL)...), "model", "endpoint", "position")
	m.tpot = r.histogram("time_per_output_token_seconds",
		"Time per output token of each stream, the time from its first token-bearing event to its "+
			"last divided by its output tokens minus 1, observed when it ends.",
		withBounds(tpotBuckets, slos.bounds(SLOTPOT)...), "model", "endpoint")
	m.tpotByContext = r.breakdown("time_per_output_token_by_context_seconds",
		"Time per output token by the length of the stream's context (a band of its input tokens), "+
			"with the same observations and clock as itlproxy_time_per_output_token_seconds.",
		withBounds(breakdownGapBuckets, slos.bounds(SLOTPOT)...), "model", "endpoint", "context")
	m.duration = r.histogram("request_duration_seconds",
		"Request duration, from t0 to the last byte of the response handed to the client, or to the "+
			"request failing, of every request, streamed or not.",
		durationBuckets, "model", "endpoint", "streaming")
}

// itlBounds are the bucket bounds gap histograms add to their own: every
// ITL objective and the stall threshold.
func itlBounds(slos SLOs, stallThreshold time.Duration) []float64 {
	b := slos.bounds(SLOITL)
	if stallThreshold > 0 {
		b = append(b, stallThreshold.Seconds())
	}
	return b
}

// trafficCollectors builds the counts of requests, streams, tokens and
// unreadable data, and the streams in flight.
func (m *Metrics) trafficCollectors(r *registrar) {
	m.requests = r.counter("requests_total",
		"Requests proxied, counted when the response ends, by the status returned to the client.",
		"model", "endpoint", "streaming", "code", "tenant")
	m.streams = r.counter("streams_total",
		"Streams ended, by outcome, counted once per stream when its response ends.",
		"model", "endpoint", "outcome", "tenant")
	m.outputTokens = r.counter("output_tokens_total",
		"Output tokens, counted when a response ends, from the usage the upstream reported, else, for "+
			"streams, the number of token-bearing events.",
		"model", "endpoint", "tenant")
	m.inputTokens = r.counter("input_tokens_total",
		"Input (prompt) tokens, cached or not, from the usage the upstream reported, counted when a "+
			"response that reported usage ends.",
		"model", "endpoint", "tenant")
	m.tokensPerResponse = r.breakdown("tokens_per_response",
		"Tokens of each response by type (input, output), observed once when it ends, from the counts "+
			"itlproxy_input_tokens_total and itlproxy_output_tokens_total add.",
		responseTokenBuckets, "model", "endpoint", "type")
	m.active = r.gauge("active_streams",
		"Streams in flight, each from t0 (or the upstream's event-stream headers) to the end of its "+
			"response.",
		"model", "endpoint")
	m.parseFailures = r.counter("parse_failures_total",
		"Upstream response data the measurement could not read, by reason, its bytes forwarded "+
			"unchanged all the same.",
		"model", "endpoint", "reason")
}

// sloCollectors builds the objectives, their breaches and the stalls.
func (m *Metrics) sloCollectors(r *registrar) {
	m.sloBreaches = r.counter("slo_breaches_total",
		"Observations over the objective of the stream's model and service class, by kind (slo), each "+
			"counted when it exceeds the objective.",
		"model", "class", "tenant", "slo")
	m.sloObserved = r.counter("slo_observations_total",
		"Observations judged against an objective of the stream's model and service class, by kind "+
			"(slo), counted only where the objective exists.",
		"model", "class", "tenant", "slo")
	m.sloObjective = r.gauge("slo_objective_seconds",
		"The configured objective of each model label value, service class and kind (ttft, itl, "+
			"tpot, max_gap); absent where there is none.",
		"model", "class", "slo")
	m.stalls = r.counter("stalls_total",
		"Gaps between consecutive token-bearing events longer than the stall threshold "+
			"(ITLPROXY_STALL_THRESHOLD), by cause: a frozen stream, whatever the objectives.",
		"model", "endpoint", "cause")
}

// shapeCollectors builds the per-stream figures observed when a stream
// ends, and the tokens each event carries; the longest gap has every
// max_gap objective as a bound.
func (m *Metrics) shapeCollectors(r *registrar, slos SLOs) {
	m.maxGap = r.breakdown("stream_max_gap_seconds",
		"Each stream's longest gap between consecutive token-bearing events, observed when the "+
			"stream ends (streams with at least one gap).",
		withBounds(maxGapBuckets, slos.bounds(SLOMaxGap)...), "model", "endpoint")
	m.gapSpread = r.breakdown("stream_gap_spread_ratio",
		"How choppy each stream is, its p99 gap divided by its median gap, observed when a stream "+
			"with at least 20 gaps ends.",
		spreadBuckets, "model", "endpoint")
	m.tokensPerEvent = r.breakdown("tokens_per_event",
		"Output tokens carried by each token-bearing event, observed once per event where the "+
			"upstream reports tokens per event or in its final usage.",
		tokenCountBuckets, "model", "endpoint")
	m.itlPerToken = r.breakdown("inter_token_latency_per_token_seconds",
		"A gap between token-bearing events divided by the tokens the later event carries, where the "+
			"upstream reports tokens per event.",
		breakdownGapBuckets, "model", "endpoint")
}

// sessionCollectors builds the figures of streams by turn, those of
// streams that carry a session id, and the session tracker's own size;
// TTFT by turn has every TTFT objective as a bound.
func (m *Metrics) sessionCollectors(r *registrar, slos SLOs) {
	m.ttftByTurn = r.breakdown("time_to_first_token_by_turn_seconds",
		"Time to first token by the stream's turn in its conversation, from t0 to the first token-bearing event.",
		withBounds(breakdownTTFTBuckets, slos.bounds(SLOTTFT)...), "model", "turn")
	m.medianGapByTurn = r.breakdown("stream_median_gap_by_turn_seconds",
		"Median gap between token-bearing events of each stream whose turn is known, by its turn in its "+
			"conversation, observed when a stream with at least 5 gaps ends.",
		breakdownGapBuckets, "model", "turn")
	m.sessionRatio = r.breakdown("session_gap_ratio",
		"A session stream's median gap divided by its session's baseline, observed when each later stream "+
			"with at least 5 gaps ends.",
		ratioBuckets, "model")
	m.sessionUnjudged = r.counter("session_streams_unjudged_total",
		"Session streams not compared with their session's baseline because this proxy did not serve "+
			"every baseline turn before them.",
		"model")
	m.sessionsDegraded = r.counter("sessions_degraded_total",
		"Sessions counted once, when a stream's median gap first exceeds the degradation factor "+
			"(ITLPROXY_SESSION_DEGRADE_FACTOR) times the session's baseline.",
		"model")
	r.register(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Namespace: namespace, Name: "sessions_tracked",
		Help: "Sessions the tracker remembers now (at most ITLPROXY_SESSION_MAX).",
	}, func() float64 { live, _ := m.sessions.size(time.Now()); return float64(live) }))
	r.register(prometheus.NewCounterFunc(prometheus.CounterOpts{
		Namespace: namespace, Name: "session_evictions_total",
		Help: "Live sessions the tracker forgot to stay within ITLPROXY_SESSION_MAX.",
	}, func() float64 { _, evicted := m.sessions.size(time.Now()); return float64(evicted) }))
}

// buildInfo registers itlproxy_build_info, always 1.
func buildInfo(r *registrar, opts Options) {
	g := prometheus.NewGauge(prometheus.GaugeOpts{
		Namespace: namespace, Name: "build_info",
		Help:        "Always 1; the labels name the running build.",
		ConstLabels: prometheus.Labels{"version": opts.Version, "revision": opts.Revision, "goversion": opts.GoVersion},
	})
	g.Set(1)
	r.register(g)
}
