package proxy

import (
	"context"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"slices"
	"strconv"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/itlproxy/itlproxy/metrics"
	"github.com/itlproxy/itlproxy/proxy/upstream"
)

// Tracing, when Config.Tracer is set: one server span per request, from
// t0 to the end of its response. A W3C traceparent from the client is its
// parent, and the upstream request carries the span as its own parent, so
// that the server's spans join the trace. The span's attributes are set
// once, at the end, from the end record (sink.endSpan and
// exchange.endSpan); per event, the sink only keeps the few gaps worth an
// event (notableGaps).

// traceContext reads and writes W3C traceparent and tracestate.
var traceContext propagation.TraceContext

// maxGapEvents caps the span events of one stream; the gaps past it are
// counted in the attribute itlproxy.gap.events_dropped.
const maxGapEvents = 32

// startSpan starts the span of request r from its t0, named by its
// method and the route that matched.
func (p *Proxy) startSpan(r *http.Request, req request) trace.Span {
	parent := traceContext.Extract(r.Context(), propagation.HeaderCarrier(r.Header))
	name := r.Method
	attrs := []attribute.KeyValue{
		attribute.String("http.request.method", r.Method),
		attribute.String("server.address", p.cfg.Upstream.Hostname()),
	}
	if port := UpstreamPort(p.cfg.Upstream); port > 0 {
		attrs = append(attrs, attribute.Int("server.port", port))
	}
	if req.route != "" {
		name += " " + req.route
		attrs = append(attrs, attribute.String("http.route", req.route), attribute.String("gen_ai.operation.name", req.endpoint.GenAIOperation()))
		if req.model != "" {
			attrs = append(attrs, attribute.String("gen_ai.request.model", metrics.KeepID(req.model)))
		}
	}
	_, span := p.cfg.Tracer.Start(parent, name, trace.WithSpanKind(trace.SpanKindServer),
		trace.WithTimestamp(req.t0), trace.WithAttributes(attrs...))
	return span
}

// UpstreamPort is the port requests to the upstream u go to (its
// server.port): the URL's, else its scheme's; 0 for neither.
func UpstreamPort(u *url.URL) int {
	if n, err := strconv.Atoi(u.Port()); err == nil {
		return n
	}
	switch u.Scheme {
	case "https":
		return 443
	case "http":
		return 80
	}
	return 0
}

// peerAttributes appends the upstream server a request was sent to, as
// OpenTelemetry's network.peer.address and network.peer.port (server.address
// stays the upstream's name); nothing for no server.
func peerAttributes(attrs []attribute.KeyValue, sv *upstream.Server) []attribute.KeyValue {
	if sv == nil {
		return attrs
	}
	host, port, err := net.SplitHostPort(sv.Addr)
	if err != nil {
		return attrs
	}
	attrs = append(attrs, attribute.String("network.peer.address", host))
	if n, err := strconv.Atoi(port); err == nil {
		attrs = append(attrs, attribute.Int("network.peer.port", n))
	}
	return attrs
}

// propagate makes the exchange's span the parent of the upstream request,
// in place of the client's traceparent. Without a span the client's
// headers pass as they came.
func propagate(pr *httputil.ProxyRequest) {
	ex := exchangeFrom(pr.Out.Context())
	if ex.span == nil {
		return
	}
	pr.Out.Header.Del("Traceparent")
	pr.Out.Header.Del("Tracestate")
	traceContext.Inject(trace.ContextWithSpan(context.Background(), ex.span), propagation.HeaderCarrier(pr.Out.Header))
}

// notableGaps are the gaps of a traced stream that its span shows as
// events: stalls, and gaps over the ITL objective, up to maxGapEvents of
// them. The gap count and the longest gap come from the stream's own
// summary (metrics.Stream.Gaps).
type notableGaps struct {
	gaps []notableGap
	past int // notable gaps past maxGapEvents
}

type notableGap struct {
	index int // from 1: gap i ends the (i+1)th token-bearing event
	d     time.Duration
	at    time.Time // the stamp of the event that ends it
	metrics.Notable
}

// add keeps gap index, of d, ended at at, when it is notable. A nil
// notableGaps keeps nothing.
func (g *notableGaps) add(index int, d time.Duration, at time.Time, n metrics.Notable) {
	switch {
	case g == nil || !n.Stall && !n.OverObjective:
	case len(g.gaps) == maxGapEvents:
		g.past++
	default:
		g.gaps = append(g.gaps, notableGap{index: index, d: d, at: at, Notable: n})
	}
}

// endSpan sets the request span's own attributes and ends it; the sink
// has set the response's.
func (ex *exchange) endSpan(end time.Time) {
	span := ex.span
	attrs := make([]attribute.KeyValue, 0, 4)
	attrs = append(attrs,
		attribute.Int("http.response.status_code", ex.code),
		attribute.String("itlproxy.request_id", ex.sink.ids.Request))
	if ex.sink.ids.Session != "" {
		attrs = append(attrs, attribute.String("itlproxy.session_id", ex.sink.ids.Session))
	}
	if ex.req.labels.Model != "" {
		attrs = append(attrs, attribute.String("itlproxy.model", ex.req.labels.Model))
	}
	attrs = peerAttributes(attrs, ex.upstream)
	span.SetAttributes(attrs...)
	if ex.code >= 500 || ex.failure == upstreamFailed {
		span.SetStatus(codes.Error, "")
	}
	span.End(trace.WithTimestamp(end))
}

// events adds an event per notable gap, at the time the gap ended: named
// itlproxy.stall for a stall, with its cause (and, for a prefill, the
// request that caused it) from the stream's stalls,
// itlproxy.itl_objective_exceeded for a gap over the objective that is
// not one.
func (g *notableGaps) events(span trace.Span, stalls []metrics.Stall) {
	for _, n := range g.gaps {
		name := "itlproxy.itl_objective_exceeded"
		attrs := []attribute.KeyValue{
			attribute.Int("itlproxy.gap.index", n.index),
			attribute.Float64("itlproxy.gap.seconds", n.d.Seconds()),
			attribute.Bool("itlproxy.gap.stall", n.Stall),
			attribute.Bool("itlproxy.gap.itl_objective_exceeded", n.OverObjective),
		}
		if n.Stall {
			name = "itlproxy.stall"
			if i := slices.IndexFunc(stalls, func(st metrics.Stall) bool { return st.Gap == n.index }); i >= 0 {
				attrs = append(attrs, attribute.String("itlproxy.stall.cause", stalls[i].Cause))
				if p := stalls[i].Prefill; p != "" {
					attrs = append(attrs, attribute.String("itlproxy.stall.prefill_request_id", p))
				}
			}
		}
		span.AddEvent(name, trace.WithTimestamp(n.at), trace.WithAttributes(attrs...))
	}
}
