package metrics

import (
	"strconv"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

const namespace = "itlproxy"

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
	// not decode (or a WebSocket message an extension it does not know
	// encoded).
	ParseEncoded = "content_encoding"
	// ParseInvalidFrame: WebSocket frames the measurement could not follow
	// (RFC 6455), after which it reads nothing more of that direction, or
	// a compressed message that did not inflate (RFC 7692).
	ParseInvalidFrame = "invalid_frame"
)

// Options configures New.
type Options struct {
	// Models is the allow-list of model label values; empty means any
	// model, up to MaxModels distinct ones.
	Models []string
	// MaxModels caps distinct model label values when Models is empty.
	MaxModels int
	// SLOs are the latency objectives per model and service class. Models
	// with objectives of their own always keep their label; classes the
	// SLOs do not define are ClassDefault.
	SLOs SLOs
	// Tenants is the allow-list of tenant label values; empty means any
	// tenant, up to MaxTenants distinct ones.
	Tenants    []string
	MaxTenants int
	// StallThreshold: a gap longer than this is a stall. Zero means no
	// stall counting.
	StallThreshold time.Duration
	// SessionMax bounds the sessions tracked; SessionTTL forgets a session
	// idle that long; a session whose stream's median gap exceeds
	// DegradeFactor times its baseline counts as degraded.
	SessionMax    int
	SessionTTL    time.Duration
	DegradeFactor float64
	// NativeBreakdowns gives the histograms that break the main clocks
	// down (by load, position, context and turn), those of each stream's
	// shape, the tokens per response and the engines' own native buckets
	// only: for a scraper that takes native histograms, one series each
	// instead of one per classic bucket. The four main histograms (TTFT,
	// ITL, TPOT, request duration) keep their classic buckets beside their
	// native ones either way.
	NativeBreakdowns bool
	// Version and Revision are exported by itlproxy_build_info.
	Version, Revision, GoVersion string
	// GenAI keeps the families the OTLP push derives the GenAI
	// conventions' metrics from (genai.go), on GenAIGatherer.
	GenAI bool
}

// Metrics is itlproxy's set of collectors and the recorder the proxy
// reports to.
type Metrics struct {
	engine        engineHistograms
	ttft          *prometheus.HistogramVec
	itl           *prometheus.HistogramVec
	tpot          *prometheus.HistogramVec
	tpotByContext *prometheus.HistogramVec
	duration      *prometheus.HistogramVec
	requests      *prometheus.CounterVec
	streams       *prometheus.CounterVec
	outputTokens  *prometheus.CounterVec
	inputTokens   *prometheus.CounterVec
	active        *prometheus.GaugeVec
	parseFailures *prometheus.CounterVec
	sloBreaches   *prometheus.CounterVec
	sloObserved   *prometheus.CounterVec
	sloObjective  *prometheus.GaugeVec
	judged        *prometheus.CounterVec
	goodTokens    *prometheus.CounterVec
	stalls        *prometheus.CounterVec

	// How streams and sessions degrade (stream.go).
	itlByPosition    *prometheus.HistogramVec
	maxGap           *prometheus.HistogramVec
	gapSpread        *prometheus.HistogramVec
	ttftByTurn       *prometheus.HistogramVec
	medianGapByTurn  *prometheus.HistogramVec
	sessionRatio     *prometheus.HistogramVec
	sessionUnjudged  *prometheus.CounterVec
	sessionsDegraded *prometheus.CounterVec

	// Several tokens per event.
	tokensPerEvent *prometheus.HistogramVec
	itlPerToken    *prometheus.HistogramVec

	// genAI is what the GenAI metrics are derived from, nil without
	// Options.GenAI.
	genAI *genAISource
	// tokensPerResponse observes the counts inputTokens and outputTokens
	// add, one per response and type, for the OTLP export's
	// gen_ai.client.token.usage.
	tokensPerResponse *prometheus.HistogramVec

	// ITL and TTFT by load (load.go).
	itlByLoad  *prometheus.HistogramVec
	ttftByLoad *prometheus.HistogramVec
	loadUpper  *prometheus.GaugeVec
	load       loadState

	// The upstream endpoints the proxy balances over (upstream.go).
	up upstreams

	// What the proxy adds (forwarding.go).
	eventDelay     *prometheus.HistogramVec
	clientWrite    *prometheus.HistogramVec
	requestForward *prometheus.HistogramVec

	models         *boundedLabels
	tenants        *boundedLabels
	judging        judging
	slos           atomic.Pointer[SLOs] // swapped whole by ReloadSLOs
	stallThreshold time.Duration
	sessions       *sessionTracker
	degradeFactor  float64
}

// New creates itlproxy's collectors and registers them on reg, each as it
// is built.
func New(reg prometheus.Registerer, opts Options) (*Metrics, error) {
	m := &Metrics{
		models:         newBoundedLabels(opts.Models, opts.SLOs.modelNames(), opts.MaxModels),
		tenants:        newTenantLabels(opts.Tenants, max(opts.MaxTenants, 1)),
		stallThreshold: opts.StallThreshold,
		sessions:       newSessionTracker(max(opts.SessionMax, 1), opts.SessionTTL),
		degradeFactor:  opts.DegradeFactor,
	}
	m.slos.Store(&opts.SLOs)
	r := &registrar{reg: reg, nativeBreakdowns: opts.NativeBreakdowns}
	m.latencyCollectors(r, opts.SLOs, opts.StallThreshold)
	m.trafficCollectors(r)
	m.sloCollectors(r)
	m.shapeCollectors(r, opts.SLOs)
	m.loadCollectors(r, opts.SLOs)
	m.goodputCollectors(r)
	m.sessionCollectors(r, opts.SLOs)
	m.engineCollectors(r)
	m.forwardingCollectors(r)
	m.upstreamCollectors(r, opts.SLOs)
	buildInfo(r, opts)
	if r.err != nil {
		return nil, r.err
	}
	if opts.GenAI {
		g, err := newGenAISource(opts.SLOs, itlBounds(opts.SLOs, opts.StallThreshold))
		if err != nil {
			return nil, err
		}
		m.genAI = g
	}
	for _, label := range m.models.static() {
		m.admitModel(label)
	}
	m.models.admit = m.admitModel
	return m, nil
}

// admitModel exports a new model label value's objectives in every class,
// and starts a model's breach and observation counters (tenant _none) at
// zero so that breach ratios exist (as 0) before the first breach. The
// catch-alls (_other, _unknown) get their objectives, which alerts compare
// with, but counters only with their first stream: a proxy that never sees
// an unlisted model exports no ratio of 0 over 0 for it.
func (m *Metrics) admitModel(label string) {
	slos := m.slos.Load()
	catchAll := label == ModelOther || label == ModelUnknown
	for _, class := range slos.ClassNames() {
		slos.For(label, class).each(func(slo string, d time.Duration) {
			if d > 0 {
				m.sloObjective.WithLabelValues(label, class, slo).Set(d.Seconds())
				if !catchAll {
					m.sloBreaches.WithLabelValues(label, class, TenantNone, slo)
					m.sloObserved.WithLabelValues(label, class, TenantNone, slo)
				}
			}
		})
	}
}

// Labels are the bounded labels of one request.
type Labels struct {
	Model, Endpoint string
	// Class is the request's service class, Tenant its tenant: ClassDefault
	// and TenantNone when it names none.
	Class, Tenant string
}

// RequestLabels bounds a request's model, service class and tenant: a
// class the SLOs do not define is ClassDefault; a tenant outside the
// allow-list, past the cap or that looks like a credential is TenantOther,
// an empty one TenantNone.
func (m *Metrics) RequestLabels(model, endpoint, class, tenant string) Labels {
	if _, ok := m.slos.Load().Classes[class]; !ok {
		class = ClassDefault
	}
	return Labels{Model: m.models.label(model), Endpoint: endpoint, Class: class, Tenant: m.tenants.label(tenant)}
}

// Request records a finished request: its status as sent to the client and
// its duration from t0.
func (m *Metrics) Request(l Labels, streaming bool, code int, d time.Duration) {
	s := strconv.FormatBool(streaming)
	m.requests.WithLabelValues(l.Model, l.Endpoint, s, strconv.Itoa(code), l.Tenant).Inc()
	m.duration.WithLabelValues(l.Model, l.Endpoint, s).Observe(d.Seconds())
}

// Token types, the type label of itlproxy_tokens_per_response: the
// values of the GenAI conventions' gen_ai.token.type.
const (
	TokenInput  = "input"
	TokenOutput = "output"
)

// Tokens adds a finished response's token counts, and observes each in
// the tokens per response. Negative counts mean unknown and add nothing.
func (m *Metrics) Tokens(l Labels, input, output int64) {
	if input >= 0 {
		m.inputTokens.WithLabelValues(l.Model, l.Endpoint, l.Tenant).Add(float64(input))
		m.tokensPerResponse.WithLabelValues(l.Model, l.Endpoint, TokenInput).Observe(float64(input))
	}
	if output >= 0 {
		m.outputTokens.WithLabelValues(l.Model, l.Endpoint, l.Tenant).Add(float64(output))
		m.tokensPerResponse.WithLabelValues(l.Model, l.Endpoint, TokenOutput).Observe(float64(output))
	}
}

// ParseFailure counts data the measurement could not read.
func (m *Metrics) ParseFailure(l Labels, reason string) {
	m.parseFailures.WithLabelValues(l.Model, l.Endpoint, reason).Inc()
}
