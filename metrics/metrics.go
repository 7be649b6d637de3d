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
	// before its headers, cut the stream, or sent an error event.
	OutcomeUpstreamError = "upstream_error"
	// OutcomeRejected: the upstream answered a stream request with an
	// error status (429, 400, 503, ...) instead of a stream.
	OutcomeRejected = "rejected"
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

	models *modelLabels
}

// New creates itlproxy's collectors and registers them on reg.
func New(reg prometheus.Registerer, opts Options) (*Metrics, error) {
	m := &Metrics{
		models: newModelLabels(opts.Models, opts.MaxModels),
		ttft: histogram("time_to_first_token_seconds",
			"Time to first token: from the proxy receiving the request headers (t0) to the first "+
				"token-bearing SSE event fully read from the upstream. One observation per stream that "+
				"produced a token.",
			ttftBuckets, "model", "endpoint"),
		itl: histogram("inter_token_latency_seconds",
			"Inter-token latency: the gap between two consecutive token-bearing SSE events of a stream, "+
				"each stamped when fully read from the upstream. One observation per gap; events that "+
				"arrive in the same read are 0 s apart.",
			gapBuckets, "model", "endpoint"),
		tpot: histogram("time_per_output_token_seconds",
			"Time per output token: the time from a stream's first token-bearing event to its last, "+
				"divided by N - 1, where N = usage.completion_tokens when the upstream reported usage, else "+
				"the number of token-bearing events. One observation per stream with N >= 2, when it ends.",
			gapBuckets, "model", "endpoint"),
		duration: histogram("request_duration_seconds",
			"Request duration: from the proxy receiving the request headers (t0) to the last byte of the "+
				"response handed to the client, or to the request failing. Every request, streamed or not.",
			durationBuckets, "model", "endpoint", "streaming"),
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Name: "requests_total",
			Help: "Requests proxied, counted when the response ends, by the status returned to the client " +
				"(499: the client went away before any response). streaming is true when the request asked " +
				"for a stream or the response was an event stream.",
		}, []string{"model", "endpoint", "streaming", "code"}),
		streams: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Name: "streams_total",
			Help: "Streams ended, by outcome: completed (the upstream ended the stream cleanly), " +
				"client_canceled (the client went away first; the upstream request was canceled), " +
				"upstream_error (unreachable, timed out, cut mid-stream, or an error event), rejected " +
				"(the upstream answered with an error status instead of a stream).",
		}, []string{"model", "endpoint", "outcome"}),
		outputTokens: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Name: "output_tokens_total",
			Help: "Output tokens, counted when a response ends: usage.completion_tokens when the upstream " +
				"reported usage, else, for streams, the number of token-bearing events.",
		}, []string{"model", "endpoint"}),
		inputTokens: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Name: "input_tokens_total",
			Help: "Input (prompt) tokens from usage.prompt_tokens, when the upstream reported usage.",
		}, []string{"model", "endpoint"}),
		active: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: namespace, Name: "active_streams",
			Help: "Streams in flight: from the proxy receiving a stream request's headers (or, if the " +
				"request did not say, the upstream's event-stream headers) to the end of the response.",
		}, []string{"model", "endpoint"}),
		parseFailures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Name: "parse_failures_total",
			Help: "Upstream response data the measurement could not read, by reason (invalid_json, " +
				"event_too_large, truncated, body_too_large, content_encoding). The bytes were forwarded " +
				"unchanged; only the measurement is missing.",
		}, []string{"model", "endpoint", "reason"}),
	}
	buildInfo := prometheus.NewGauge(prometheus.GaugeOpts{
		Namespace: namespace, Name: "build_info",
		Help:        "Always 1; the labels name the running build.",
		ConstLabels: prometheus.Labels{"version": opts.Version, "revision": opts.Revision, "goversion": opts.GoVersion},
	})
	buildInfo.Set(1)
	for _, c := range []prometheus.Collector{
		m.ttft, m.itl, m.tpot, m.duration, m.requests, m.streams,
		m.outputTokens, m.inputTokens, m.active, m.parseFailures, buildInfo,
	} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
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

// Stream records one stream. Its observers are resolved once, when the
// stream starts, so that the per-event calls do no label lookups.
type Stream struct {
	m      *Metrics
	labels Labels
	ttft   prometheus.Observer
	itl    prometheus.Observer
	active prometheus.Gauge
}

// StartStream counts a stream in flight until End.
func (m *Metrics) StartStream(l Labels) *Stream {
	s := &Stream{
		m:      m,
		labels: l,
		ttft:   m.ttft.WithLabelValues(l.Model, l.Endpoint),
		itl:    m.itl.WithLabelValues(l.Model, l.Endpoint),
		active: m.active.WithLabelValues(l.Model, l.Endpoint),
	}
	s.active.Inc()
	return s
}

// FirstToken records the stream's time to first token.
func (s *Stream) FirstToken(d time.Duration) { s.ttft.Observe(d.Seconds()) }

// Gap records one gap between consecutive token-bearing events.
func (s *Stream) Gap(d time.Duration) { s.itl.Observe(d.Seconds()) }

// End records how the stream ended and, when known (tpot >= 0), its time
// per output token.
func (s *Stream) End(outcome string, tpot time.Duration) {
	s.active.Dec()
	s.m.streams.WithLabelValues(s.labels.Model, s.labels.Endpoint, outcome).Inc()
	if tpot >= 0 {
		s.m.tpot.WithLabelValues(s.labels.Model, s.labels.Endpoint).Observe(tpot.Seconds())
	}
}
