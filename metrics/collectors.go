package metrics

import (
	"strings"
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
// position, context or turn), describes each stream's shape, or holds an
// engine's own figures: with classic buckets, coarse (plus the objectives
// that judge what it observes, which the caller adds), beside the native
// ones; without any when the scraper takes native histograms
// (Options.NativeBreakdowns).
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
		"Time to first token: from the proxy receiving the request headers (t0) to the first "+
			"token-bearing SSE event (or NDJSON line) fully read from the upstream; for a Realtime API "+
			"response (endpoint realtime), from the client's response.create passing the proxy (or the "+
			"upstream's response.created, for a response it began itself) to the response's first output "+
			"delta. One observation per stream that produced a token.",
		withBounds(ttftBuckets, slos.bounds(SLOTTFT)...), "model", "endpoint")
	m.itl = r.histogram("inter_token_latency_seconds",
		"Inter-token latency: the gap between two consecutive token-bearing SSE events (or NDJSON "+
			"lines, or output deltas of a Realtime API response) of a stream, each stamped when fully read "+
			"from the upstream. One observation per gap; events that "+
			"arrive in the same read are 0 s apart.",
		withBounds(gapBuckets, itlBounds...), "model", "endpoint")
	m.itlByPosition = r.breakdown("inter_token_latency_by_position_seconds",
		"Inter-token latency by where the gap falls in its stream: position is the band (1-32, "+
			"33-128, 129-512, 513-2048, 2049+) of the output position of the token event that ends the "+
			"gap. Same gaps and clock as itlproxy_inter_token_latency_seconds; "+coarseBuckets+".",
		withBounds(breakdownGapBuckets, slos.bounds(SLOITL)...), "model", "endpoint", "position")
	m.tpot = r.histogram("time_per_output_token_seconds",
		"Time per output token: the time from a stream's first token-bearing event to its last, "+
			"divided by N - 1, where N = usage.completion_tokens when the upstream reported usage, else "+
			"the number of token-bearing events. One observation per stream with N >= 2, when it ends.",
		withBounds(tpotBuckets, slos.bounds(SLOTPOT)...), "model", "endpoint")
	m.tpotByContext = r.breakdown("time_per_output_token_by_context_seconds",
		"Time per output token by the length of the stream's context: context is the band ("+
			contextBandsHelp()+") of the input tokens the upstream reported, cached ones included "+
			"(usage.prompt_tokens of chat and completions; input_tokens of the Responses API; Anthropic's "+
			"input_tokens + cache_read_input_tokens + cache_creation_input_tokens; Ollama's "+
			"prompt_eval_count; llama.cpp's tokens_evaluated; TGI's details.input_length; SGLang's "+
			"meta_info.prompt_tokens), or "+contextUnknown+" when it reported none. Decode reads the whole "+
			"context at every step, so TPOT grows with it. The same observations and clock as "+
			"itlproxy_time_per_output_token_seconds, each one in exactly one band; "+coarseBuckets+".",
		withBounds(breakdownGapBuckets, slos.bounds(SLOTPOT)...), "model", "endpoint", "context")
	m.duration = r.histogram("request_duration_seconds",
		"Request duration: from the proxy receiving the request headers (t0) to the last byte of the "+
			"response handed to the client, or to the request failing (a Realtime API WebSocket: to the "+
			"end of the connection). Every request, streamed or not.",
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
		"Requests proxied, counted when the response ends, by the status returned to the client "+
			"(499: the client went away before any response; a Realtime API WebSocket is counted when "+
			"the connection ends, 101 once switched). streaming is true when the request asked "+
			"for a stream or the response was an event stream.",
		"model", "endpoint", "streaming", "code", "tenant")
	m.streams = r.counter("streams_total",
		"Streams ended, by outcome: completed (the upstream ended the stream cleanly), "+
			"client_canceled (the client went away first; the upstream request was canceled), "+
			"upstream_error (unreachable, timed out, a 5xx status, cut mid-stream, or an error event), "+
			"rejected (the upstream refused the request with a 4xx status, which itlproxy_requests_total "+
			"has), idle_timeout (the upstream went silent for the stream idle timeout and the proxy cut "+
			"the stream), incomplete (the upstream ended the response early, as the Responses API's "+
			"response.incomplete says). A stream whose end marker arrived ([DONE], response.completed, "+
			"message_stop) is completed even if the client leaves before the connection ends, as SDKs do. "+
			"Each response of a Realtime API WebSocket is a stream.",
		"model", "endpoint", "outcome", "tenant")
	m.outputTokens = r.counter("output_tokens_total",
		"Output tokens, counted when a response ends: the usage the upstream reported "+
			"(usage.completion_tokens, or output_tokens from the Responses and Messages APIs), else, for "+
			"streams, the number of token-bearing events.",
		"model", "endpoint", "tenant")
	m.inputTokens = r.counter("input_tokens_total",
		"Input (prompt) tokens from the usage the upstream reported, when it reported usage: every "+
			"prompt token the model attended to, cached or not (usage.prompt_tokens of chat and "+
			"completions, which counts cached tokens; input_tokens of the Responses API; Anthropic's "+
			"input_tokens + cache_read_input_tokens + cache_creation_input_tokens; the native APIs' "+
			"prompt_eval_count, tokens_evaluated, details.input_length or meta_info.prompt_tokens).",
		"model", "endpoint", "tenant")
	m.active = r.gauge("active_streams",
		"Streams in flight: from the proxy receiving a stream request's headers (or, if the "+
			"request did not say, the upstream's event-stream headers) to the end of the response; a "+
			"Realtime API response from its response.created to its response.done.",
		"model", "endpoint")
	m.parseFailures = r.counter("parse_failures_total",
		"Upstream response data the measurement could not read, by reason (invalid_json, "+
			"event_too_large, truncated, body_too_large, content_encoding, invalid_frame). The bytes were forwarded "+
			"unchanged; only the measurement is missing.",
		"model", "endpoint", "reason")
}

// sloCollectors builds the objectives, their breaches and the stalls.
func (m *Metrics) sloCollectors(r *registrar) {
	m.sloBreaches = r.counter("slo_breaches_total",
		"Observations over the objective of the stream's model and service class, counted exactly: "+
			"slo=ttft once per stream whose time to first token exceeds it, itl once per gap that exceeds "+
			"it, tpot once per stream whose time per output token exceeds it, max_gap once per stream "+
			"whose longest gap exceeds it. Breach ratio = this / itlproxy_slo_observations_total.",
		"model", "class", "tenant", "slo")
	m.sloObserved = r.counter("slo_observations_total",
		"Observations judged against an objective of the stream's model and service class: slo=ttft "+
			"once per stream that produced a token, itl once per gap, tpot once per stream with a time "+
			"per output token, max_gap once per stream with a gap; counted only where the objective "+
			"exists. The denominator of breach ratios by class and tenant.",
		"model", "class", "tenant", "slo")
	m.sloObjective = r.gauge("slo_objective_seconds",
		"The configured objective of each model label value, service class and kind (ttft, itl, "+
			"tpot, max_gap); absent where there is none.",
		"model", "class", "slo")
	m.stalls = r.counter("stalls_total",
		"Gaps between consecutive token-bearing events longer than the stall threshold "+
			"(ITLPROXY_STALL_THRESHOLD): a frozen stream, whatever the objectives.",
		"model", "endpoint")
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
		"How choppy each stream is: its p99 gap divided by its median gap (within 12.5%), observed "+
			"when a stream with at least 20 gaps ends. A smooth stream is near 1.",
		spreadBuckets, "model", "endpoint")
	m.tokensPerEvent = r.breakdown("tokens_per_event",
		"Output tokens carried by each token-bearing event: the event's own count where the upstream "+
			"reports cumulative usage on every event (vLLM's continuous_usage_stats), else the stream's "+
			"final usage divided by its token-bearing events, once per event. Above 1: speculative decoding "+
			"or stream intervals send several tokens at once.",
		tokenCountBuckets, "model", "endpoint")
	m.itlPerToken = r.breakdown("inter_token_latency_per_token_seconds",
		"A gap between token-bearing events divided by the tokens the later event carries: the time "+
			"per token within the stream, where the upstream reports tokens per event (else not observed). "+
			"Not the inter-token latency a reader feels: that is itlproxy_inter_token_latency_seconds, one "+
			"observation per gap.",
		breakdownGapBuckets, "model", "endpoint")
}

// sessionCollectors builds the figures of streams that carry a session
// id, and the session tracker's own size; TTFT by turn has every TTFT
// objective as a bound.
func (m *Metrics) sessionCollectors(r *registrar, slos SLOs) {
	m.ttftByTurn = r.breakdown("time_to_first_token_by_turn_seconds",
		"Time to first token of streams that carry a session id, by the stream's turn in its session "+
			"(1, 2-4, 5-16, 17+): from the proxy receiving the request headers to the first "+
			"token-bearing event. "+capitalized(coarseBuckets)+".",
		withBounds(breakdownTTFTBuckets, slos.bounds(SLOTTFT)...), "model", "turn")
	m.medianGapByTurn = r.breakdown("stream_median_gap_by_turn_seconds",
		"Median gap between token-bearing events of each stream that carries a session id, by the "+
			"stream's turn in its session (1, 2-4, 5-16, 17+); observed when a stream with at least 5 "+
			"gaps ends.",
		breakdownGapBuckets, "model", "turn")
	m.sessionRatio = r.breakdown("session_gap_ratio",
		"A stream's median gap divided by its session's baseline (the median of the median gaps of "+
			"the session's first 3 streams), observed when each later stream with at least 5 gaps ends. "+
			"Above 1: the session got slower.",
		ratioBuckets, "model")
	m.sessionsDegraded = r.counter("sessions_degraded_total",
		"Sessions counted once, when a stream's median gap first exceeds the degradation factor "+
			"(ITLPROXY_SESSION_DEGRADE_FACTOR) times the session's baseline.",
		"model")
	r.register(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Namespace: namespace, Name: "sessions_tracked",
		Help: "Sessions the tracker remembers now (at most ITLPROXY_SESSION_MAX).",
	}, func() float64 { live, _ := m.sessions.size(); return float64(live) }))
	r.register(prometheus.NewCounterFunc(prometheus.CounterOpts{
		Namespace: namespace, Name: "session_evictions_total",
		Help: "Live sessions the tracker forgot to stay within ITLPROXY_SESSION_MAX.",
	}, func() float64 { _, evicted := m.sessions.size(); return float64(evicted) }))
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

// coarseBuckets is what a breakdown's Help says of its classic buckets.
const coarseBuckets = "coarse classic buckets (the native ones are as fine as every family's)"

// capitalized returns s with its first letter upper case.
func capitalized(s string) string { return strings.ToUpper(s[:1]) + s[1:] }
