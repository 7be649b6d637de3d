package proxy

import (
	"context"
	"net/http"
	"net/http/httputil"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/itlproxy/itlproxy/metrics"
	"github.com/itlproxy/itlproxy/proxy/events"
)

// Tracing, when Config.Tracer is set: one server span per request, from
// t0 to the end of its response. A W3C traceparent from the client is its
// parent, and the upstream request carries the span as its own parent, so
// that the server's spans join the trace. The span's attributes are set
// once, at the end, from the end record; per event, the meter only keeps
// the longest gap and the few gaps worth an event (spanGaps).

// traceContext reads and writes W3C traceparent and tracestate.
var traceContext propagation.TraceContext

// maxGapEvents caps the span events of one stream; the gaps past it are
// counted in the attribute itlproxy.gap.events_dropped.
const maxGapEvents = 32

// maxModelAttr bounds the model name and the ids a span carries: they are
// the client's (or the upstream's).
const maxModelAttr = 128

// begin starts the exchange of request r, whose body named model and
// user: its ids and, when tracing is on, its span. A sampled span's trace
// id replaces the client's in ids, so that the exemplars lead to the span.
func (p *Proxy) begin(r *http.Request, labels metrics.Labels, t0 time.Time, endpoint events.Endpoint, model, user string, wantStream bool) *exchange {
	ids, clientID := p.requestIDs(r, user)
	var span trace.Span
	if p.cfg.Tracer != nil {
		span = p.startSpan(r, t0, endpoint, model)
		if sc := span.SpanContext(); sc.IsSampled() {
			ids.Trace = sc.TraceID().String()
		}
	}
	ex := newExchange(p.rec, labels, t0, ids, clientID, wantStream)
	ex.endpoint = endpoint
	if span != nil {
		ex.span = span
		ex.m.gaps = &spanGaps{}
	}
	return ex
}

func (p *Proxy) startSpan(r *http.Request, t0 time.Time, endpoint events.Endpoint, model string) trace.Span {
	parent := traceContext.Extract(r.Context(), propagation.HeaderCarrier(r.Header))
	name := r.Method
	attrs := []attribute.KeyValue{
		attribute.String("http.request.method", r.Method),
		attribute.String("server.address", p.cfg.Upstream.Hostname()),
	}
	if port := upstreamPort(p.cfg.Upstream.Scheme, p.cfg.Upstream.Port()); port > 0 {
		attrs = append(attrs, attribute.Int("server.port", port))
	}
	if route, op := spanRoute(endpoint); route != "" {
		name += " " + route
		attrs = append(attrs, attribute.String("http.route", route), attribute.String("gen_ai.operation.name", op))
		if model != "" {
			attrs = append(attrs, attribute.String("gen_ai.request.model", attrText(model, maxModelAttr)))
		}
	}
	_, span := p.cfg.Tracer.Start(parent, name, trace.WithSpanKind(trace.SpanKindServer),
		trace.WithTimestamp(t0), trace.WithAttributes(attrs...))
	return span
}

// spanRoute is the route of a measured endpoint and its GenAI operation
// name; "" for other requests.
func spanRoute(endpoint events.Endpoint) (route, operation string) {
	switch endpoint {
	case events.ChatCompletions:
		return "/v1/chat/completions", "chat"
	case events.Completions:
		return "/v1/completions", "text_completion"
	case events.Responses:
		return "/v1/responses", "chat"
	case events.Messages:
		return "/v1/messages", "chat"
	case events.Realtime:
		return realtimePath, "chat"
	}
	return "", ""
}

// upstreamPort is the port requests to the upstream go to.
func upstreamPort(scheme, port string) int {
	if n, err := strconv.Atoi(port); err == nil {
		return n
	}
	switch scheme {
	case "https":
		return 443
	case "http":
		return 80
	}
	return 0
}

// attrText is s as a span attribute may carry it: valid UTF-8 (protobuf
// refuses anything else, and one bad string would lose the whole batch
// the exporter sends) and at most n bytes, cut at a character boundary.
func attrText(s string, n int) string {
	s = strings.ToValidUTF8(s, "")
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

// propagate makes the exchange's span the parent of the upstream request,
// in place of the client's traceparent. Without a span the client's
// headers pass as they came.
func propagate(pr *httputil.ProxyRequest) {
	ex := exchangeFrom(pr.Out.Context())
	if ex == nil || ex.span == nil {
		return
	}
	pr.Out.Header.Del("Traceparent")
	pr.Out.Header.Del("Tracestate")
	traceContext.Inject(trace.ContextWithSpan(context.Background(), ex.span), propagation.HeaderCarrier(pr.Out.Header))
}

// spanGaps is what a traced stream's meter keeps for its span, per gap a
// few comparisons: the gap count, the longest gap and its index, and the
// gaps an operator looks for (stalls, and gaps over the ITL objective), up
// to maxGapEvents of them. Gaps are numbered from 1: gap i ends the
// (i+1)th token-bearing event.
type spanGaps struct {
	count     int
	longest   time.Duration
	longestAt int
	notable   []notableGap
	past      int // notable gaps past maxGapEvents
}

type notableGap struct {
	index         int
	d             time.Duration
	at            time.Time // the stamp of the event that ends it
	stall, breach bool
}

func (g *spanGaps) add(s *metrics.Stream, d time.Duration, at time.Time) {
	g.count++
	if d > g.longest {
		g.longest, g.longestAt = d, g.count
	}
	stall, breach := s.Notable(d)
	switch {
	case !stall && !breach:
	case len(g.notable) == maxGapEvents:
		g.past++
	default:
		g.notable = append(g.notable, notableGap{index: g.count, d: d, at: at, stall: stall, breach: breach})
	}
}

// endSpan sets the span's attributes from the end record and ends it.
func (ex *exchange) endSpan(e responseEnd, end time.Time) {
	span := ex.span
	attrs := make([]attribute.KeyValue, 0, 16)
	attrs = append(attrs,
		attribute.Int("http.response.status_code", ex.code),
		attribute.String("itlproxy.request_id", attrText(ex.ids.Request, maxModelAttr)))
	if ex.ids.Session != "" {
		attrs = append(attrs, attribute.String("itlproxy.session_id", attrText(ex.ids.Session, maxModelAttr)))
	}
	if ex.labels.Model != "" {
		attrs = append(attrs, attribute.String("itlproxy.model", ex.labels.Model))
	}
	if e.model != "" {
		attrs = append(attrs, attribute.String("gen_ai.response.model", attrText(e.model, maxModelAttr)))
	}
	if e.usage.input >= 0 {
		attrs = append(attrs, attribute.Int64("gen_ai.usage.input_tokens", e.usage.input))
	}
	if e.usage.output >= 0 {
		attrs = append(attrs, attribute.Int64("gen_ai.usage.output_tokens", e.usage.output))
	}
	if ex.m.stream != nil {
		attrs = append(attrs, attribute.String("itlproxy.outcome", e.stream.Outcome))
		attrs = ex.m.gaps.attributes(attrs, e)
		ex.m.gaps.events(span)
	}
	span.SetAttributes(attrs...)
	if ex.code >= 500 || ex.failure == upstreamFailed {
		span.SetStatus(codes.Error, "")
	}
	span.End(trace.WithTimestamp(end))
}

// attributes appends the stream's timing: TTFT and TPOT in seconds, as
// the metrics have them, and its gaps.
func (g *spanGaps) attributes(attrs []attribute.KeyValue, e responseEnd) []attribute.KeyValue {
	if e.ttft >= 0 {
		attrs = append(attrs, attribute.Float64("itlproxy.ttft", e.ttft.Seconds()))
	}
	if e.stream.TPOT >= 0 {
		attrs = append(attrs, attribute.Float64("itlproxy.tpot", e.stream.TPOT.Seconds()))
	}
	attrs = append(attrs, attribute.Int("itlproxy.gap.count", g.count))
	if g.count > 0 {
		attrs = append(attrs,
			attribute.Float64("itlproxy.gap.longest", g.longest.Seconds()),
			attribute.Int("itlproxy.gap.longest_index", g.longestAt))
	}
	if g.past > 0 {
		attrs = append(attrs, attribute.Int("itlproxy.gap.events_dropped", g.past))
	}
	return attrs
}

// events adds an event per notable gap, at the time the gap ended: named
// itlproxy.stall for a stall, itlproxy.itl_objective_exceeded for a gap
// over the objective that is not one.
func (g *spanGaps) events(span trace.Span) {
	for _, n := range g.notable {
		name := "itlproxy.itl_objective_exceeded"
		if n.stall {
			name = "itlproxy.stall"
		}
		span.AddEvent(name, trace.WithTimestamp(n.at), trace.WithAttributes(
			attribute.Int("itlproxy.gap.index", n.index),
			attribute.Float64("itlproxy.gap.seconds", n.d.Seconds()),
			attribute.Bool("itlproxy.gap.stall", n.stall),
			attribute.Bool("itlproxy.gap.itl_objective_exceeded", n.breach)))
	}
}
