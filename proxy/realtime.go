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
	"github.com/itlproxy/itlproxy/proxy/upstream"
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
	t0 := startOf(r)
	model := r.URL.Query().Get("model")
	if model == "" {
		model = p.cfg.DefaultModel
	}
	ex := p.newExchange(r, request{t0: t0, labels: p.labels(r, model, events.Realtime), endpoint: events.Realtime,
		route: realtimePath, model: model})
	c := &realtimeConn{p: p, ex: ex, writes: p.metrics.WriteObserver(ex.req.labels.Endpoint)}
	defer c.close()
	p.forward(w, r.WithContext(context.WithValue(r.Context(), realtimeKey{}, c)), ex)
}

// realtimeConn is one Realtime connection: the measurement of its
// responses, each recorded on a sink of its own as every stream is. It is the realtime.Observer, which the measurement calls
// under its own lock.
type realtimeConn struct {
	p  *Proxy
	ex *exchange // the connection's: labels, ids, span
	// conn measures the connection, once the upstream has switched
	// protocols; nil before.
	conn *realtime.Conn
	// session is the session id of the connection's responses: the
	// request's, else the connection's own request id.
	session string
	// writes observes the connection's writes to the client that carried
	// its responses' events, each once.
	writes metrics.WriteObserver
}

// upgraded wraps the body of the upstream's 101 response, the upstream
// connection, so that both directions are measured as they are copied.
func (c *realtimeConn) upgraded(resp *http.Response) {
	upstream, ok := resp.Body.(io.ReadWriteCloser)
	if resp.StatusCode != http.StatusSwitchingProtocols || !ok {
		return
	}
	c.session = c.ex.sink.ids.Session
	if c.session == "" {
		c.session = c.ex.sink.ids.Request
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
	c.ex.sink.parseFailure(realtimeFailures[f])
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

// realtimeResponse is one response, recorded as a stream on its own
// sink, as an exchange's stream is.
type realtimeResponse struct {
	sink sink
	span trace.Span // nil unless traced
	// upstream is the server of the connection, nil unless the proxy
	// balances over several.
	upstream *upstream.Server
}

// Start starts a response's stream. Its exemplars carry the response's
// id (the one the upstream's logs know), else the connection's request id.
func (c *realtimeConn) Start(s realtime.Start) realtime.ResponseObserver {
	ex := c.ex
	ids := metrics.IDs{Request: ex.sink.ids.Request, Session: c.session, Trace: ex.sink.ids.Trace}
	if validID(s.ResponseID) {
		ids.Request = s.ResponseID
	}
	r := &realtimeResponse{upstream: ex.upstream}
	if ex.span != nil {
		_, r.span = c.p.cfg.Tracer.Start(trace.ContextWithSpan(context.Background(), ex.span), "realtime response",
			trace.WithSpanKind(trace.SpanKindInternal), trace.WithTimestamp(s.At), trace.WithAttributes(
				attribute.String("gen_ai.response.id", metrics.KeepID(s.ResponseID)),
				attribute.Bool("itlproxy.realtime.server_initiated", s.ByServer)))
	}
	r.sink = newSink(ex.metrics, ex.req.labels, ids, s.At, 0, c.p.cfg.Recorder, r.span)
	label := ""
	if ex.upstream != nil {
		label = ex.upstream.Label()
	}
	r.sink.setUpstream(label, ex.sink.server)
	r.sink.readEvents()
	// Its request reached the server as it began: a prefill of the
	// server from then on may be its.
	sent(r.sink.stream, s.At)
	return r
}

func (r *realtimeResponse) FirstDelta(ttft time.Duration, at time.Time) { r.sink.firstToken(ttft, at) }

// ClientWrite notes a write to the client while the response was in
// flight, for its stalls' causes (observed once by realtimeConn.Wrote).
func (r *realtimeResponse) ClientWrite(began, ended time.Time) {
	r.sink.stream.NoteClientWrite(began, ended)
}

// Gap records a gap between deltas, measured as the read that ended it
// was forwarded: in the load band of the model's streams in flight then.
func (r *realtimeResponse) Gap(d time.Duration, at time.Time) {
	r.sink.gap(d, 0, at, r.sink.stream.InFlight())
}

// OwnDelay records the time a delta spent inside the proxy.
func (r *realtimeResponse) OwnDelay(d time.Duration) { r.sink.ownDelay(d) }

// Wrote observes a write to the client that carried responses' events;
// each response sums its own (realtime.End.ClientWriteWait).
func (c *realtimeConn) Wrote(d time.Duration) { c.writes.Wrote(d) }

// End records how the response ended, on its sink, and ends its span.
func (r *realtimeResponse) End(e realtime.End) {
	end := newResponseEnd()
	end.stream = metrics.StreamEnd{Outcome: realtimeOutcomes[e.Outcome], TPOT: e.TPOT, AverageTokens: e.AverageTokens,
		Events: e.Deltas, OutputTokens: e.OutputTokens, InputTokens: e.InputTokens}
	end.usage = usage{input: e.InputTokens, output: e.OutputTokens}
	end.reported = usage{input: e.InputTokens, output: -1}
	if e.UsageReported {
		end.reported.output = e.OutputTokens
	}
	r.sink.addWriteWait(e.ClientWriteWait)
	r.sink.end(end, e.At)
	if r.span == nil {
		return
	}
	r.span.SetAttributes(peerAttributes([]attribute.KeyValue{attribute.Bool("itlproxy.realtime.cancel_requested", e.CancelRequested)},
		r.upstream)...)
	if end.stream.Outcome == metrics.OutcomeUpstreamError {
		r.span.SetStatus(codes.Error, "")
	}
	r.span.End(trace.WithTimestamp(e.At))
}
