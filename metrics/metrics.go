// Package metrics holds every Prometheus collector itlproxy exports and the
// recorder API the proxy reports to. Nothing here is global: New registers
// the collectors on the registry it is given.
package metrics

import (
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

const namespace = "itlproxy"

// Endpoint label values. Every request gets exactly one.
const (
	EndpointChatCompletions = "chat_completions"
	EndpointCompletions     = "completions"
	EndpointResponses       = "responses"
	EndpointMessages        = "messages"
	EndpointOther           = "other"
)

// Stream outcomes: how a stream ended.
const (
	// OutcomeCompleted: the upstream ended the event stream cleanly and
	// sent no error event (or answered a stream request with a 2xx body
	// that was not a stream).
	OutcomeCompleted = "completed"
	// OutcomeClientCanceled: the client went away before the end; the
	// upstream request was canceled with it.
	OutcomeClientCanceled = "client_canceled"
	// OutcomeUpstreamError: the upstream could not be reached, timed out
	// before its headers, answered with a 5xx status, cut the stream, or
	// sent an error event.
	OutcomeUpstreamError = "upstream_error"
	// OutcomeRejected: the upstream refused a stream request with a 4xx
	// status (400, 404, 429, ...) instead of a stream.
	OutcomeRejected = "rejected"
	// OutcomeIdleTimeout: the upstream sent nothing for the stream idle
	// timeout (ITLPROXY_STREAM_IDLE_TIMEOUT), and the proxy ended the stream.
	OutcomeIdleTimeout = "idle_timeout"
	// OutcomeIncomplete: the upstream ended the response early and said so
	// (the Responses API's response.incomplete: a token limit or a content
	// filter).
	OutcomeIncomplete = "incomplete"
)

// Parse-failure reasons: what the measurement could not read. The bytes
// are forwarded unchanged whatever the reason.
const (
	// ParseInvalidJSON: an event's data, or a response body, is not the
	// JSON object expected.
	ParseInvalidJSON = "invalid_json"
	// ParseEventTooLarge: an SSE event grew past the event size bound; it
	// was forwarded but not measured.
	ParseEventTooLarge = "event_too_large"
	// ParseTruncated: the stream ended in the middle of an event (no
	// closing blank line), so the event never reached the client's parser.
	ParseTruncated = "truncated"
	// ParseBodyTooLarge: a JSON response body grew past the bound the
	// measurement buffers, so its usage was not read.
	ParseBodyTooLarge = "body_too_large"
	// ParseEncoded: the body has a Content-Encoding the measurement does
	// not decode.
	ParseEncoded = "content_encoding"
)

// Options configures New.
type Options struct {
	// Models is the allow-list of model label values; empty means any
	// model, up to MaxModels distinct ones.
	Models []string
	// MaxModels caps distinct model label values when Models is empty.
	MaxModels int
	// SLOs are the latency objectives per model. Models with objectives of
	// their own always keep their label.
	SLOs SLOs
	// StallThreshold: a gap longer than this is a stall. Zero means no
	// stall counting.
	StallThreshold time.Duration
	// SessionMax bounds the sessions tracked; SessionTTL forgets a session
	// idle that long; a session whose stream's median gap exceeds
	// DegradeFactor times its baseline counts as degraded.
	SessionMax    int
	SessionTTL    time.Duration
	DegradeFactor float64
	// Version and Revision are exported by itlproxy_build_info.
	Version, Revision, GoVersion string
}

// Metrics is itlproxy's set of collectors and the recorder the proxy
// reports to.
type Metrics struct {
	ttft          *prometheus.HistogramVec
	itl           *prometheus.HistogramVec
	tpot          *prometheus.HistogramVec
	duration      *prometheus.HistogramVec
	requests      *prometheus.CounterVec
	streams       *prometheus.CounterVec
	outputTokens  *prometheus.CounterVec
	inputTokens   *prometheus.CounterVec
	active        *prometheus.GaugeVec
	parseFailures *prometheus.CounterVec
	sloBreaches   *prometheus.CounterVec
	sloObjective  *prometheus.GaugeVec
	stalls        *prometheus.CounterVec

	// How streams and sessions degrade (stream.go).
	itlByPosition    *prometheus.HistogramVec
	maxGap           *prometheus.HistogramVec
	gapSpread        *prometheus.HistogramVec
	ttftByTurn       *prometheus.HistogramVec
	medianGapByTurn  *prometheus.HistogramVec
	sessionRatio     *prometheus.HistogramVec
	sessionsDegraded *prometheus.CounterVec

	// Several tokens per event.
	tokensPerEvent *prometheus.HistogramVec
	itlPerToken    *prometheus.HistogramVec

	models         *modelLabels
	slos           SLOs
	stallThreshold time.Duration
	sessions       *sessionTracker
	degradeFactor  float64
}

// New creates itlproxy's collectors and registers them on reg.
func New(reg prometheus.Registerer, opts Options) (*Metrics, error) {
	// Objectives (and the stall threshold) are bucket bounds too, so that
	// histogram_quantile and bucket ratios are exact at them.
	itlBounds := opts.SLOs.bounds(SLOITL)
	if opts.StallThreshold > 0 {
		itlBounds = append(itlBounds, opts.StallThreshold.Seconds())
	}
	m := &Metrics{
		models:         newModelLabels(opts.Models, opts.SLOs.modelNames(), opts.MaxModels),
		slos:           opts.SLOs,
		stallThreshold: opts.StallThreshold,
		sessions:       newSessionTracker(max(opts.SessionMax, 1), opts.SessionTTL),
		degradeFactor:  opts.DegradeFactor,
		ttft: histogram("time_to_first_token_seconds",
			"Time to first token: from the proxy receiving the request headers (t0) to the first "+
				"token-bearing SSE event fully read from the upstream. One observation per stream that "+
				"produced a token.",
			withBounds(ttftBuckets, opts.SLOs.bounds(SLOTTFT)...), "model", "endpoint"),
		itl: histogram("inter_token_latency_seconds",
			"Inter-token latency: the gap between two consecutive token-bearing SSE events of a stream, "+
				"each stamped when fully read from the upstream. One observation per gap; events that "+
				"arrive in the same read are 0 s apart.",
			withBounds(gapBuckets, itlBounds...), "model", "endpoint"),
		tpot: histogram("time_per_output_token_seconds",
			"Time per output token: the time from a stream's first token-bearing event to its last, "+
				"divided by N - 1, where N = usage.completion_tokens when the upstream reported usage, else "+
				"the number of token-bearing events. One observation per stream with N >= 2, when it ends.",
			withBounds(gapBuckets, opts.SLOs.bounds(SLOTPOT)...), "model", "endpoint"),
		duration: histogram("request_duration_seconds",
			"Request duration: from the proxy receiving the request headers (t0) to the last byte of the "+
				"response handed to the client, or to the request failing. Every request, streamed or not.",
			durationBuckets, "model", "endpoint", "streaming"),
		requests: counter("requests_total",
			"Requests proxied, counted when the response ends, by the status returned to the client "+
				"(499: the client went away before any response). streaming is true when the request asked "+
				"for a stream or the response was an event stream.",
			"model", "endpoint", "streaming", "code"),
		streams: counter("streams_total",
			"Streams ended, by outcome: completed (the upstream ended the stream cleanly), "+
				"client_canceled (the client went away first; the upstream request was canceled), "+
				"upstream_error (unreachable, timed out, a 5xx status, cut mid-stream, or an error event), "+
				"rejected (the upstream refused the request with a 4xx status), idle_timeout (the upstream "+
				"went silent for the stream idle timeout and the proxy cut the stream), incomplete (the "+
				"upstream ended the response early, as the Responses API's response.incomplete says).",
			"model", "endpoint", "outcome"),
		outputTokens: counter("output_tokens_total",
			"Output tokens, counted when a response ends: usage.completion_tokens when the upstream "+
				"reported usage, else, for streams, the number of token-bearing events.",
			"model", "endpoint"),
		inputTokens: counter("input_tokens_total",
			"Input (prompt) tokens from usage.prompt_tokens, when the upstream reported usage.",
			"model", "endpoint"),
		active: gauge("active_streams",
			"Streams in flight: from the proxy receiving a stream request's headers (or, if the "+
				"request did not say, the upstream's event-stream headers) to the end of the response.",
			"model", "endpoint"),
		parseFailures: counter("parse_failures_total",
			"Upstream response data the measurement could not read, by reason (invalid_json, "+
				"event_too_large, truncated, body_too_large, content_encoding). The bytes were forwarded "+
				"unchanged; only the measurement is missing.",
			"model", "endpoint", "reason"),
		sloBreaches: counter("slo_breaches_total",
			"Observations over the model's objective, counted exactly: slo=ttft once per stream whose "+
				"time to first token exceeds it, itl once per gap that exceeds it, tpot once per stream whose "+
				"time per output token exceeds it. Breach ratio = this / the matching histogram's _count.",
			"model", "slo"),
		sloObjective: gauge("slo_objective_seconds",
			"The configured objective of each model label value and kind (ttft, itl, tpot); absent "+
				"where there is none.",
			"model", "slo"),
		stalls: counter("stalls_total",
			"Gaps between consecutive token-bearing events longer than the stall threshold "+
				"(ITLPROXY_STALL_THRESHOLD): a frozen stream, whatever the objectives.",
			"model", "endpoint"),
		itlByPosition: histogram("inter_token_latency_by_position_seconds",
			"Inter-token latency by where the gap falls in its stream: position is the band (1-32, "+
				"33-128, 129-512, 513-2048, 2049+) of the output position of the token event that ends the "+
				"gap. Same gaps, clock and buckets as itlproxy_inter_token_latency_seconds.",
			withBounds(gapBuckets, itlBounds...), "model", "endpoint", "position"),
		maxGap: histogram("stream_max_gap_seconds",
			"Each stream's longest gap between consecutive token-bearing events, observed when the "+
				"stream ends (streams with at least one gap).",
			gapBuckets, "model", "endpoint"),
		gapSpread: histogram("stream_gap_spread_ratio",
			"How choppy each stream is: its p99 gap divided by its median gap (within 12.5%), observed "+
				"when a stream with at least 20 gaps ends. A smooth stream is near 1.",
			spreadBuckets, "model", "endpoint"),
		ttftByTurn: histogram("time_to_first_token_by_turn_seconds",
			"Time to first token of streams that carry a session id, by the stream's turn in its session "+
				"(1, 2-4, 5-16, 17+): from the proxy receiving the request headers to the first "+
				"token-bearing event.",
			withBounds(ttftBuckets, opts.SLOs.bounds(SLOTTFT)...), "model", "turn"),
		medianGapByTurn: histogram("stream_median_gap_by_turn_seconds",
			"Median gap between token-bearing events of each stream that carries a session id, by the "+
				"stream's turn in its session (1, 2-4, 5-16, 17+); observed when a stream with at least 5 "+
				"gaps ends.",
			gapBuckets, "model", "turn"),
		sessionRatio: histogram("session_gap_ratio",
			"A stream's median gap divided by its session's baseline (the median of the median gaps of "+
				"the session's first 3 streams), observed when each later stream with at least 5 gaps ends. "+
				"Above 1: the session got slower.",
			ratioBuckets, "model"),
		sessionsDegraded: counter("sessions_degraded_total",
			"Sessions counted once, when a stream's median gap first exceeds the degradation factor "+
				"(ITLPROXY_SESSION_DEGRADE_FACTOR) times the session's baseline.",
			"model"),
	}
	m.tokensPerEvent = histogram("tokens_per_event",
		"Output tokens carried by each token-bearing event: the event's own count where the upstream "+
			"reports cumulative usage on every event (vLLM's continuous_usage_stats), else the stream's "+
			"final usage divided by its token-bearing events, once per event. Above 1: speculative decoding "+
			"or stream intervals send several tokens at once.",
		tokenCountBuckets, "model", "endpoint")
	m.itlPerToken = histogram("inter_token_latency_per_token_seconds",
		"A gap between token-bearing events divided by the tokens the later event carries: the time "+
			"per token within the stream, where the upstream reports tokens per event (else not observed). "+
			"Not the inter-token latency a reader feels: that is itlproxy_inter_token_latency_seconds, one "+
			"observation per gap.",
		gapBuckets, "model", "endpoint")
	sessionsTracked := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Namespace: namespace, Name: "sessions_tracked",
		Help: "Sessions the tracker remembers now (at most ITLPROXY_SESSION_MAX).",
	}, func() float64 { live, _ := m.sessions.size(); return float64(live) })
	sessionEvictions := prometheus.NewCounterFunc(prometheus.CounterOpts{
		Namespace: namespace, Name: "session_evictions_total",
		Help: "Live sessions the tracker forgot to stay within ITLPROXY_SESSION_MAX.",
	}, func() float64 { _, evicted := m.sessions.size(); return float64(evicted) })
	buildInfo := prometheus.NewGauge(prometheus.GaugeOpts{
		Namespace: namespace, Name: "build_info",
		Help:        "Always 1; the labels name the running build.",
		ConstLabels: prometheus.Labels{"version": opts.Version, "revision": opts.Revision, "goversion": opts.GoVersion},
	})
	buildInfo.Set(1)
	for _, c := range []prometheus.Collector{
		m.ttft, m.itl, m.tpot, m.duration, m.requests, m.streams,
		m.outputTokens, m.inputTokens, m.active, m.parseFailures,
		m.sloBreaches, m.sloObjective, m.stalls, buildInfo,
		m.itlByPosition, m.maxGap, m.gapSpread, m.ttftByTurn, m.medianGapByTurn,
		m.sessionRatio, m.sessionsDegraded, sessionsTracked, sessionEvictions,
		m.tokensPerEvent, m.itlPerToken,
	} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	for _, label := range m.models.static() {
		m.admitModel(label)
	}
	m.models.admit = m.admitModel
	return m, nil
}

// admitModel exports a new model label value's objectives, and starts its
// breach counters at zero so that breach ratios exist (as 0) before the
// first breach.
func (m *Metrics) admitModel(label string) {
	m.slos.For(label).each(func(slo string, d time.Duration) {
		if d > 0 {
			m.sloObjective.WithLabelValues(label, slo).Set(d.Seconds())
			m.sloBreaches.WithLabelValues(label, slo)
		}
	})
}

func counter(name, help string, labels ...string) *prometheus.CounterVec {
	return prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: namespace, Name: name, Help: help}, labels)
}

func gauge(name, help string, labels ...string) *prometheus.GaugeVec {
	return prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: namespace, Name: name, Help: help}, labels)
}

func histogram(name, help string, buckets []float64, labels ...string) *prometheus.HistogramVec {
	return prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Namespace:                       namespace,
		Name:                            name,
		Help:                            help,
		Buckets:                         buckets,
		NativeHistogramBucketFactor:     nativeFactor,
		NativeHistogramMaxBucketNumber:  nativeMaxBuckets,
		NativeHistogramMinResetDuration: time.Hour,
	}, labels)
}

// Labels are the bounded labels of one request.
type Labels struct {
	Model, Endpoint string
}

// Labels bounds a request's model name (see Options.Models and
// Options.MaxModels) and pairs it with its endpoint.
func (m *Metrics) Labels(model, endpoint string) Labels {
	return Labels{Model: m.models.label(model), Endpoint: endpoint}
}

// Request records a finished request: its status as sent to the client and
// its duration from t0.
func (m *Metrics) Request(l Labels, streaming bool, code int, d time.Duration) {
	s := strconv.FormatBool(streaming)
	m.requests.WithLabelValues(l.Model, l.Endpoint, s, strconv.Itoa(code)).Inc()
	m.duration.WithLabelValues(l.Model, l.Endpoint, s).Observe(d.Seconds())
}

// Tokens adds a finished response's token counts. Negative counts mean
// unknown and add nothing.
func (m *Metrics) Tokens(l Labels, input, output int64) {
	if input >= 0 {
		m.inputTokens.WithLabelValues(l.Model, l.Endpoint).Add(float64(input))
	}
	if output >= 0 {
		m.outputTokens.WithLabelValues(l.Model, l.Endpoint).Add(float64(output))
	}
}

// ParseFailure counts data the measurement could not read.
func (m *Metrics) ParseFailure(l Labels, reason string) {
	m.parseFailures.WithLabelValues(l.Model, l.Endpoint, reason).Inc()
}
