package proxy

import (
	"context"
	"io"
	"net/http"
	"strings"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/itlproxy/itlproxy/metrics"
	"github.com/itlproxy/itlproxy/proxy/events"
	"github.com/itlproxy/itlproxy/proxy/realtime"
	"github.com/itlproxy/itlproxy/proxy/recorder"
)

// The Realtime API: GET /v1/realtime?model=..., upgraded to a WebSocket
// that carries a conversation's events both ways. The connection is
// forwarded as httputil.ReverseProxy forwards any upgrade, and counted as
// one request (code 101 once switched) whose duration is the connection's
// life; each response on it, from response.created to response.done, is
// measured as a stream of its own (package realtime says how), and the
// connection is its responses' session.

// realtimePath is where the Realtime API's WebSocket is served.
const realtimePath = "/v1/realtime"

type realtimeKey struct{}

// realtime serves the Realtime API's WebSocket. Its model label comes
// from the model query parameter.
func (p *Proxy) realtime(w http.ResponseWriter, r *http.Request) {
	t0 := time.Now()
	model := r.URL.Query().Get("model")
	if model == "" {
		model = p.cfg.DefaultModel
	}
	ex := p.newExchange(r, request{t0: t0, labels: p.labels(r, model, events.Realtime), endpoint: events.Realtime,
		route: realtimePath, model: model})
	c := &realtimeConn{p: p, ex: ex}
	defer c.close()
	p.forward(w, r.WithContext(context.WithValue(r.Context(), realtimeKey{}, c)), ex)
}

// realtimeConn is one Realtime connection: the measurement of its
// responses, reported on the metrics, the recorder and the span as every
// stream is. It is the realtime.Observer, which the measurement calls
// under its own lock.
type realtimeConn struct {
	p  *Proxy
	ex *exchange // the connection's: labels, ids, span, recorder
	// conn measures the connection, once the upstream has switched
	// protocols; nil before.
	conn *realtime.Conn
	// session is the session id of the connection's responses: the
	// request's, else the connection's own request id.
	session string
}

// upgraded wraps the body of the upstream's 101 response, the upstream
// connection, so that both directions are measured as they are copied.
func (c *realtimeConn) upgraded(resp *http.Response) {
	upstream, ok := resp.Body.(io.ReadWriteCloser)
	if resp.StatusCode != http.StatusSwitchingProtocols || !ok {
		return
	}
	c.session = c.ex.ids.Session
	if c.session == "" {
		c.session = c.ex.ids.Request
	}
	c.conn = realtime.New(realtime.Config{
		MaxMessageBytes: c.p.cfg.MaxEventBytes,
		Extensions:      strings.Join(resp.Header.Values("Sec-Websocket-Extensions"), ", "),
	}, c)
	resp.Body = &wsTee{upstream: upstream, conn: c.conn, ctx: resp.Request.Context()}
}

// close ends the responses still in flight when the handler returns: the
// connection is over.
func (c *realtimeConn) close() {
	if c.conn != nil {
		c.conn.Close(time.Now())
	}
}

// realtimeFailures are the parse-failure reasons of what the measurement
// could not read.
var realtimeFailures = [...]string{
	realtime.TooLarge:           metrics.ParseEventTooLarge,
	realtime.InvalidJSON:        metrics.ParseInvalidJSON,
	realtime.InvalidFrame:       metrics.ParseInvalidFrame,
	realtime.InvalidCompression: metrics.ParseInvalidFrame,
	realtime.UnknownExtension:   metrics.ParseEncoded,
	realtime.Truncated:          metrics.ParseTruncated,
}

// Unreadable counts what the measurement could not read.
func (c *realtimeConn) Unreadable(f realtime.Failure) {
	c.ex.metrics.ParseFailure(c.ex.req.labels, realtimeFailures[f])
}

// realtimeOutcomes are the stream outcomes of the ways a response ends.
var realtimeOutcomes = [...]string{
	realtime.Completed:  metrics.OutcomeCompleted,
	realtime.Cancelled:  metrics.OutcomeClientCanceled,
	realtime.Incomplete: metrics.OutcomeIncomplete,
	realtime.Failed:     metrics.OutcomeUpstreamError,
	realtime.ClientGone: metrics.OutcomeClientCanceled,
	realtime.ServerGone: metrics.OutcomeUpstreamError,
}

// realtimeResponse is one response, recorded as a stream.
type realtimeResponse struct {
	c        *realtimeConn
	ids      metrics.IDs
	start    time.Time
	ttft     time.Duration // -1 before the first delta
	stream   *metrics.Stream
	timeline *recorder.Timeline // nil without a recorder
	span     trace.Span         // nil unless traced
	notable  *notableGaps       // nil unless traced
}

// Start starts a response's stream. Its exemplars carry the response's
// id (the one the upstream's logs know), else the connection's request id.
func (c *realtimeConn) Start(s realtime.Start) realtime.ResponseObserver {
	ex := c.ex
	ids := metrics.IDs{Request: ex.ids.Request, Session: c.session, Trace: ex.ids.Trace}
	if validID(s.ResponseID) {
		ids.Request = s.ResponseID
	}
	r := &realtimeResponse{c: c, ids: ids, start: s.At, ttft: -1, stream: ex.metrics.StartStream(ex.req.labels, ids), timeline: ex.recorder.Start()}
	if ex.span != nil {
		_, r.span = c.p.cfg.Tracer.Start(trace.ContextWithSpan(context.Background(), ex.span), "realtime response",
			trace.WithSpanKind(trace.SpanKindInternal), trace.WithTimestamp(s.At), trace.WithAttributes(
				attribute.String("gen_ai.response.id", attrText(s.ResponseID, maxModelAttr)),
				attribute.Bool("itlproxy.realtime.server_initiated", s.ByServer)))
		r.notable = &notableGaps{}
	}
	return r
}

func (r *realtimeResponse) FirstDelta(ttft time.Duration, _ time.Time) {
	r.ttft = ttft
	r.stream.FirstToken(ttft)
}

// Gap records a gap between deltas, measured as the read that ended it
// was forwarded: in the load band of the model's streams in flight then.
func (r *realtimeResponse) Gap(d time.Duration, at time.Time) {
	recordGap(r.stream, r.timeline, r.notable, d, 0, at, r.stream.InFlight())
}

// End records how the response ended, as exchange.finish records a
// stream: its stream, its tokens, the recorder and its span.
func (r *realtimeResponse) End(e realtime.End) {
	ex := r.c.ex
	end := responseEnd{
		stream: metrics.StreamEnd{Outcome: realtimeOutcomes[e.Outcome], TPOT: e.TPOT, AverageTokens: e.AverageTokens,
			Events: e.Deltas, OutputTokens: e.OutputTokens},
		usage: usage{input: e.InputTokens, output: e.OutputTokens},
		ttft:  r.ttft,
	}
	r.stream.End(end.stream)
	l := ex.req.labels
	ex.metrics.Tokens(l, end.usage.input, end.usage.output)
	recordStream(ex.recorder, r.timeline, r.ids, l, r.stream, end, r.start, e.At)
	if r.span != nil {
		r.endSpan(end, e)
	}
}

// endSpan sets the response span's attributes, as a stream's span has
// them, and ends it.
func (r *realtimeResponse) endSpan(end responseEnd, e realtime.End) {
	attrs := make([]attribute.KeyValue, 0, 12)
	attrs = append(attrs, attribute.String("itlproxy.outcome", end.stream.Outcome),
		attribute.Bool("itlproxy.realtime.cancel_requested", e.CancelRequested))
	if e.InputTokens >= 0 {
		attrs = append(attrs, attribute.Int64("gen_ai.usage.input_tokens", e.InputTokens))
	}
	attrs = append(attrs, attribute.Int64("gen_ai.usage.output_tokens", e.OutputTokens))
	r.span.SetAttributes(spanTiming(attrs, end, r.stream.Gaps(), r.notable.past)...)
	r.notable.events(r.span)
	if end.stream.Outcome == metrics.OutcomeUpstreamError {
		r.span.SetStatus(codes.Error, "")
	}
	r.span.End(trace.WithTimestamp(e.At))
}
