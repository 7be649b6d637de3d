package proxy

import (
	"context"
	"mime"
	"net/http"
	"net/http/httptrace"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/trace"
	"go.uber.org/zap"

	"github.com/itlproxy/itlproxy/metrics"
	"github.com/itlproxy/itlproxy/proxy/events"
	"github.com/itlproxy/itlproxy/proxy/upstream"
)

// request is what the proxy knows of a request when its exchange starts:
// the one value an exchange is built from.
type request struct {
	// t0 is when its first bytes reached the proxy, as closely as the
	// proxy knows it (arrival.go).
	t0     time.Time
	labels metrics.Labels
	// endpoint is the API whose reader measures the response; Other for a
	// request that is forwarded and not measured.
	endpoint events.Endpoint
	// route is the route pattern that matched, "" for a request no route
	// measures.
	route string
	// model and user are what the body named, "" for none.
	model, user string
	// wantStream: the request asked for a stream.
	wantStream bool
	// turn is the request's place in its conversation, read from the
	// history it carries (events.Request.Turn); 0 when it carries none.
	turn int
	// usageInjected: the proxy asked for usage on the client's behalf, and
	// takes it out of the stream (events.UsageStripper).
	usageInjected bool
	// body is the request body, read whole to find the model and released
	// when the response arrives; nil for a body forwarded as it comes.
	body *heldBody
}

// exchange follows one proxied request from its t0 to the end of
// its response and records it: the response's reader (an eventMeter or a
// jsonBody) measures the response into the sink, and at the end the
// exchange decides how it ended and has the sink record it. All its
// methods run on the request's handler goroutine: httputil.ReverseProxy
// calls ModifyResponse, ErrorHandler and the response body's Read there.
type exchange struct {
	metrics *metrics.Metrics
	req     request
	// sink records the response; its ids are the request's.
	sink sink
	// clientID: the request id came from the client, so the upstream's is
	// not adopted.
	clientID bool

	// code is the status sent to the client, 0 until known.
	code int
	// failure is why the upstream gave no response, if it did not.
	failure failure
	// engine is the upstream's timing its response headers reported.
	engine engineTimes
	// events reads an event-stream response, json a JSON one; nil when
	// the response is not one (or not yet).
	events *eventMeter
	json   *jsonBody
	// cancelUpstream cancels the outbound request; set when streams have
	// an idle timeout.
	cancelUpstream context.CancelFunc
	// span is the request's span, nil unless tracing is on (trace.go).
	span trace.Span
	// writer is the client's writer as the reverse proxy writes to it.
	writer clientWriter
	// upstream is the server the request was sent to, nil unless the
	// proxy balances over several (balance.go): the exchange holds one of
	// its requests in flight until it ends. servers are the records of
	// the servers, the stream's stalls judged against its server's.
	upstream *upstream.Server
	servers  *servers
	// trace hears from the transport when the request has been written
	// to the upstream (wroteRequest), which observes the request leg and
	// tells the server's record that the stream the request started
	// (waits) waits for its first token there; written: it has been.
	trace   httptrace.ClientTrace
	written atomic.Bool
	waits   *metrics.Stream
}

type exchangeKey struct{}

// exchangeFrom returns the exchange forward put in ctx. The reverse proxy
// is reachable only through forward, so there always is one.
func exchangeFrom(ctx context.Context) *exchange {
	return ctx.Value(exchangeKey{}).(*exchange)
}

// newExchange starts the exchange of r: its ids and, when tracing is on,
// its span, and its stream when it asked for one. A sampled span's trace
// id replaces the client's in the ids, so that the exemplars lead to the
// span.
func (p *Proxy) newExchange(r *http.Request, req request) *exchange {
	ex := &exchange{metrics: p.metrics, req: req, servers: p.servers}
	ids, clientID := p.requestIDs(r, req.user)
	ex.clientID = clientID
	if p.cfg.Tracer != nil {
		ex.span = p.startSpan(r, req)
		if sc := ex.span.SpanContext(); sc.IsSampled() {
			ids.Trace = sc.TraceID().String()
		}
	}
	ex.sink = newSink(p.metrics, req.labels, ids, req.t0, req.turn, p.cfg.Recorder, ex.span)
	if p.cfg.Servers == nil {
		ex.sink.setUpstream("", p.servers.of(nil))
	}
	if req.wantStream {
		ex.sink.startStream()
		ex.waits = ex.sink.stream
	}
	return ex
}

// forward sends r through the reverse proxy as ex, and records ex when it
// is over.
func (p *Proxy) forward(w http.ResponseWriter, r *http.Request, ex *exchange) {
	// finish runs even when ReverseProxy aborts the response with
	// http.ErrAbortHandler: a stream cut mid-way is recorded too.
	defer func() { ex.finish(r.Context().Err() != nil, p.log) }()
	ctx := r.Context()
	// A measured route's body was read whole and is held; any other is
	// still on its way from the client (duplex.go).
	body := p.fullDuplex(w, r, ex.req.body != nil)
	if body != nil {
		ctx = context.WithValue(ctx, clientBodyKey{}, body)
		defer body.abandon(w)
	}
	if p.cfg.StreamIdleTimeout > 0 {
		// The outbound request's context, which the idle timer cancels.
		var cancel context.CancelFunc
		ctx, cancel = context.WithCancel(ctx)
		defer cancel()
		ex.cancelUpstream = cancel
	}
	ex.trace.WroteRequest = ex.wroteRequest
	ctx = httptrace.WithClientTrace(ctx, &ex.trace)
	out := r.WithContext(context.WithValue(ctx, exchangeKey{}, ex))
	if body != nil {
		out.Body = body
	}
	ex.writer = clientWriter{ResponseWriter: w, ex: ex}
	p.rp.ServeHTTP(&ex.writer, out)
}

// respond sees the upstream's response headers and wraps its body in the
// reader that measures it (and, for a stream with an idle timeout, watches
// for silence). The response carries the request id.
func (ex *exchange) respond(resp *http.Response, maxEvent int, idle time.Duration) {
	ex.code = resp.StatusCode
	if ex.req.body != nil {
		ex.req.body.release()
	}
	if upstreamID := resp.Header.Get(RequestIDHeader); !ex.clientID && validID(upstreamID) {
		ex.sink.setRequestID(metrics.KeepID(upstreamID))
	}
	resp.Header.Set(RequestIDHeader, ex.sink.ids.Request)
	mediaType, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	encoded := !identityEncoding(resp.Header.Get("Content-Encoding"))
	endpoint := ex.req.endpoint
	ex.engine = engineHeaders(endpoint, resp)
	switch {
	case mediaType == "text/event-stream" || endpoint.NDJSON() && mediaType == ndjsonType:
		var it *idleTimer
		if idle > 0 && ex.cancelUpstream != nil {
			it = startIdleTimer(idle, ex.cancelUpstream)
		}
		ex.events = newEventMeter(resp.Body, &ex.sink, endpoint, maxEvent, !encoded, it)
		resp.Body = ex.events
		if ex.req.usageInjected {
			// The measurement reads the upstream's events; the client gets
			// them without what the injection added, so a length no longer
			// holds.
			resp.Body = events.NewUsageStripper(resp.Body, maxEvent, copyBufferSize)
			resp.Header.Del("Content-Length")
			resp.ContentLength = -1
		}
		if encoded {
			ex.metrics.ParseFailure(ex.req.labels, metrics.ParseEncoded)
		}
	case endpoint == events.Other || resp.StatusCode/100 != 2:
		// Nothing to read: other endpoints are counted, not measured, and
		// error bodies carry no usage.
	case encoded:
		ex.metrics.ParseFailure(ex.req.labels, metrics.ParseEncoded)
	default:
		ex.json = newJSONBody(resp.Body, &ex.sink, endpoint, maxEvent)
		resp.Body = ex.json
	}
}

// identityEncoding reports whether a Content-Encoding leaves the body as it is.
func identityEncoding(ce string) bool {
	return ce == "" || ce == "identity"
}

// fail records that the upstream gave no response, and why: the client
// gets code (or nothing, when it has gone).
func (ex *exchange) fail(code int, why failure) {
	ex.code = code
	ex.failure = why
}

// finish records the exchange as it ended, once its reader has measured
// every read. clientGone reports whether the client went away (its request
// context was canceled) before the end.
func (ex *exchange) finish(clientGone bool, log *zap.Logger) {
	end := time.Now()
	if ex.code == 0 {
		// No response and no recorded failure: the handler was cut short.
		ex.code = http.StatusInternalServerError
		if clientGone {
			ex.code = statusClientClosed
		}
	}
	e := ex.responseEnd(clientGone, end)
	ex.sink.end(e, end)
	streaming := ex.sink.stream != nil
	duration := end.Sub(ex.req.t0)
	ex.metrics.Request(ex.req.labels, streaming, ex.code, duration)
	if ex.upstream != nil {
		ex.upstream.Release()
	}
	if ex.span != nil {
		ex.endSpan(end)
	}
	if ce := log.Check(zap.DebugLevel, "request"); ce != nil {
		ce.Write(ex.logFields(e, duration)...)
	}
}

// wroteRequest notes that the request has been written to the upstream,
// on the transport's goroutine (requestWritten).
func (ex *exchange) wroteRequest(info httptrace.WroteRequestInfo) {
	if info.Err == nil {
		ex.requestWritten(time.Now())
	}
}

// requestWritten notes that the request was written to the upstream at
// at: the request leg ends, and is observed at once, while the response
// is still to come; and the stream the request started waits for its
// first token on its server from then on. A request the transport sends
// again, after a write that failed (nothing of it reached the upstream),
// ends it at the write that succeeded; one whose connection closed
// before any response (only a request that can be replayed is sent again
// then) at its first.
func (ex *exchange) requestWritten(at time.Time) {
	if ex.written.CompareAndSwap(false, true) {
		ex.metrics.RequestForwarded(ex.req.labels.Endpoint, max(at.Sub(ex.req.t0), 1))
		sent(ex.waits, at)
	}
}

// responseEnd is how the response ended, at end, from what its reader
// read: the event stream's (once the read it still holds is measured) or
// the JSON body's, with the outcome of a stream.
func (ex *exchange) responseEnd(clientGone bool, end time.Time) responseEnd {
	e := newResponseEnd()
	e.engine = ex.engine
	switch {
	case ex.events != nil:
		ex.events.drain(end)
		ex.events.end(&e)
	case ex.json != nil:
		ex.json.end(&e)
	}
	if ex.sink.stream != nil {
		e.stream.Outcome = ex.outcome(clientGone)
		e.stream.OutputTokens = e.usage.output
		e.stream.InputTokens = e.usage.input
	}
	return e
}

// logFields describes the exchange in the debug log: never its prompt or
// completion.
func (ex *exchange) logFields(e responseEnd, duration time.Duration) []zap.Field {
	fields := []zap.Field{
		zap.String("request_id", ex.sink.ids.Request),
		zap.String("model", ex.req.labels.Model),
		zap.String("endpoint", ex.req.labels.Endpoint),
		zap.Int("code", ex.code),
		zap.Bool("streaming", ex.sink.stream != nil),
		zap.Duration("duration", duration),
		zap.Int64("input_tokens", e.usage.input),
		zap.Int64("output_tokens", e.usage.output),
	}
	if ex.sink.stream != nil {
		fields = append(fields, zap.String("outcome", e.stream.Outcome), zap.Int64("token_events", e.stream.Events))
	}
	if ex.sink.ttft >= 0 {
		fields = append(fields, zap.Duration("ttft", ex.sink.ttft))
	}
	if ex.sink.ids.Trace != "" {
		fields = append(fields, zap.String("trace_id", ex.sink.ids.Trace))
	}
	return fields
}

// statusClientClosed is recorded when the client went away before any
// response; nginx made 499 the usual code for it.
const statusClientClosed = 499
