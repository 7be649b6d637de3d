package proxy

import (
	"context"
	"mime"
	"net/http"
	"time"

	"go.opentelemetry.io/otel/trace"
	"go.uber.org/zap"

	"github.com/itlproxy/itlproxy/metrics"
	"github.com/itlproxy/itlproxy/proxy/events"
	"github.com/itlproxy/itlproxy/proxy/recorder"
)

// exchange follows one proxied request from its headers (t0) to the end of
// its response and records it: its meter measures the response and, at
// the end, says how it ended; the exchange records that. All its methods
// run on the request's handler goroutine: httputil.ReverseProxy calls
// ModifyResponse, ErrorHandler and the response body's Read there, so it
// needs no locks.
type exchange struct {
	rec    *metrics.Metrics
	labels metrics.Labels
	// endpoint is the API the request is for: Other until the route says.
	endpoint events.Endpoint
	t0       time.Time
	ids      metrics.IDs
	// clientID: the request id came from the client, so the upstream's is
	// not adopted.
	clientID bool

	// streaming: the request asked for a stream or the response is one.
	streaming bool
	// code is the status sent to the client, 0 until known.
	code int
	// failure is why the upstream gave no response, if it did not.
	failure failure
	// m measures the response.
	m meter
	// cancelUpstream cancels the outbound request; set when streams have
	// an idle timeout.
	cancelUpstream context.CancelFunc
	// usageInjected: the proxy asked for usage on the client's behalf, and
	// takes it out of the stream (events.UsageStripper).
	usageInjected bool
	// requestBody is the request body read to find the model, released
	// when the response arrives.
	requestBody *heldBody
	// recorder records the stream when it ends (record.go); nil for none.
	recorder *recorder.Recorder
	// span is the request's span, nil unless tracing is on (trace.go).
	span trace.Span
}

type exchangeKey struct{}

// exchangeFrom returns the exchange forward put in ctx. The reverse proxy
// is reachable only through forward, so there always is one.
func exchangeFrom(ctx context.Context) *exchange {
	ex, _ := ctx.Value(exchangeKey{}).(*exchange)
	return ex
}

func newExchange(rec *metrics.Metrics, labels metrics.Labels, t0 time.Time, ids metrics.IDs, clientID, wantStream bool) *exchange {
	ex := &exchange{rec: rec, labels: labels, endpoint: events.Other, t0: t0, ids: ids, clientID: clientID, m: newMeter(rec, labels, t0)}
	if wantStream {
		ex.startStream()
	}
	return ex
}

func (ex *exchange) startStream() {
	ex.streaming = true
	ex.m.stream = ex.rec.StartStream(ex.labels, ex.ids)
}

// respond sees the upstream's response headers and wraps its body in the
// reader that measures it (and, for a stream with an idle timeout, watches
// for silence). The response carries the request id.
func (ex *exchange) respond(resp *http.Response, maxEvent int, idle time.Duration) {
	ex.code = resp.StatusCode
	if ex.requestBody != nil {
		ex.requestBody.release()
	}
	if upstreamID := resp.Header.Get(RequestIDHeader); !ex.clientID && validID(upstreamID) {
		ex.ids.Request = upstreamID
		if ex.m.stream != nil {
			ex.m.stream.SetRequestID(upstreamID)
		}
	}
	resp.Header.Set(RequestIDHeader, ex.ids.Request)
	mediaType, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	encoded := !identityEncoding(resp.Header.Get("Content-Encoding"))
	ex.m.readEngineHeaders(ex.endpoint, resp)
	switch {
	case mediaType == "text/event-stream" || ex.endpoint.NDJSON() && mediaType == ndjsonType:
		if ex.m.stream == nil {
			ex.startStream()
		}
		ex.m.readEvents(ex.endpoint, maxEvent, !encoded)
		ex.m.timeline = ex.recorder.Start()
		if idle > 0 && ex.cancelUpstream != nil {
			ex.m.idle = startIdleTimer(idle, ex.cancelUpstream)
		}
		resp.Body = &sseBody{rc: resp.Body, m: &ex.m}
		if ex.usageInjected {
			// The measurement reads the upstream's events; the client gets
			// them without what the injection added, so a length no longer
			// holds.
			resp.Body = events.NewUsageStripper(resp.Body, maxEvent, copyBufferSize)
			resp.Header.Del("Content-Length")
			resp.ContentLength = -1
		}
		if encoded {
			ex.rec.ParseFailure(ex.labels, metrics.ParseEncoded)
		}
	case ex.endpoint == events.Other || resp.StatusCode/100 != 2:
		// Nothing to read: other endpoints are counted, not measured, and
		// error bodies carry no usage.
	case encoded:
		ex.rec.ParseFailure(ex.labels, metrics.ParseEncoded)
	default:
		resp.Body = &jsonBody{rc: resp.Body, m: &ex.m, endpoint: ex.endpoint, max: maxEvent}
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

// finish records the exchange as its meter says it ended. clientGone
// reports whether the client went away (its request context was canceled)
// before the end.
func (ex *exchange) finish(clientGone bool, log *zap.Logger) {
	end := time.Now()
	if ex.code == 0 {
		// No response and no recorded failure: the handler was cut short.
		ex.code = http.StatusInternalServerError
		if clientGone {
			ex.code = statusClientClosed
		}
	}
	e := ex.m.end(ex.code, ex.failure, clientGone)
	if ex.m.stream != nil {
		ex.m.stream.End(e.stream)
		ex.record(e, end)
	}
	ex.rec.Tokens(ex.labels, e.usage.input, e.usage.output)
	ex.rec.Engine(ex.labels, e.engine.tpot, e.engine.ttft, e.stream.TPOT)
	duration := end.Sub(ex.t0)
	ex.rec.Request(ex.labels, ex.streaming, ex.code, duration)
	if ex.span != nil {
		ex.endSpan(e, end)
	}
	if ce := log.Check(zap.DebugLevel, "request"); ce != nil {
		ce.Write(ex.logFields(e, duration)...)
	}
}

// logFields describes the exchange in the debug log: never its prompt or
// completion.
func (ex *exchange) logFields(e responseEnd, duration time.Duration) []zap.Field {
	fields := []zap.Field{
		zap.String("request_id", ex.ids.Request),
		zap.String("model", ex.labels.Model),
		zap.String("endpoint", ex.labels.Endpoint),
		zap.Int("code", ex.code),
		zap.Bool("streaming", ex.streaming),
		zap.Duration("duration", duration),
		zap.Int64("input_tokens", e.usage.input),
		zap.Int64("output_tokens", e.usage.output),
	}
	if ex.m.stream != nil {
		fields = append(fields, zap.String("outcome", e.stream.Outcome), zap.Int64("token_events", e.stream.Events))
	}
	if e.ttft >= 0 {
		fields = append(fields, zap.Duration("ttft", e.ttft))
	}
	if ex.ids.Trace != "" {
		fields = append(fields, zap.String("trace_id", ex.ids.Trace))
	}
	return fields
}

// statusClientClosed is recorded when the client went away before any
// response; nginx made 499 the usual code for it.
const statusClientClosed = 499
