package proxy

import (
	"context"
	"io"
	"mime"
	"net/http"
	"time"

	"go.uber.org/zap"

	"github.com/itlproxy/itlproxy/metrics"
	"github.com/itlproxy/itlproxy/proxy/events"
)

// exchange follows one proxied request from its headers (t0) to the end of
// its response and records it. All its methods run on the request's handler
// goroutine: httputil.ReverseProxy calls ModifyResponse, ErrorHandler and
// the response body's Read there, so it needs no locks.
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
	// stream is non-nil once the exchange counts as a stream.
	stream *metrics.Stream
	// outcome is set when the end of a stream is decided before finish.
	outcome string
	// sse measures the response when it is an event stream.
	sse *streamMeter
	// usage is a non-streamed response's usage, when it reported one.
	usage usage
	// cancelUpstream cancels the outbound request; set when streams have
	// an idle timeout.
	cancelUpstream context.CancelFunc
	// usageInjected: the proxy asked for usage on the client's behalf, and
	// takes it out of the stream (events.UsageStripper).
	usageInjected bool
	// requestBody is the request body read to find the model, released
	// when the response arrives.
	requestBody *heldBody
}

type exchangeKey struct{}

// exchangeFrom returns the exchange forward put in ctx. The reverse proxy
// is reachable only through forward, so there always is one.
func exchangeFrom(ctx context.Context) *exchange {
	ex, _ := ctx.Value(exchangeKey{}).(*exchange)
	return ex
}

func newExchange(rec *metrics.Metrics, labels metrics.Labels, t0 time.Time, ids metrics.IDs, clientID, wantStream bool) *exchange {
	ex := &exchange{rec: rec, labels: labels, endpoint: events.Other, t0: t0, ids: ids, clientID: clientID, usage: noUsage}
	if wantStream {
		ex.startStream()
	}
	return ex
}

func (ex *exchange) startStream() {
	ex.streaming = true
	ex.stream = ex.rec.StartStream(ex.labels, ex.ids)
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
		if ex.stream != nil {
			ex.stream.SetRequestID(upstreamID)
		}
	}
	resp.Header.Set(RequestIDHeader, ex.ids.Request)
	mediaType, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	encoded := !identityEncoding(resp.Header.Get("Content-Encoding"))
	switch {
	case mediaType == "text/event-stream":
		if ex.stream == nil {
			ex.startStream()
		}
		ex.sse = newStreamMeter(ex, maxEvent, !encoded)
		if idle > 0 && ex.cancelUpstream != nil {
			ex.sse.idle = startIdleTimer(idle, ex.cancelUpstream)
		}
		resp.Body = &sseBody{rc: resp.Body, m: ex.sse}
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
		resp.Body = &jsonBody{rc: resp.Body, ex: ex, max: maxEvent}
	}
}

// identityEncoding reports whether a Content-Encoding leaves the body as it is.
func identityEncoding(ce string) bool {
	return ce == "" || ce == "identity"
}

// fail records that the upstream could not give a response: the client
// gets code (or nothing, when it has gone).
func (ex *exchange) fail(code int, outcome string) {
	ex.code = code
	ex.outcome = outcome
}

// finish records the exchange. clientGone reports whether the client went
// away (its request context was canceled) before the end.
func (ex *exchange) finish(clientGone bool, log *zap.Logger) {
	end := time.Now()
	if ex.code == 0 {
		// No response and no recorded failure: the handler was cut short.
		ex.code = http.StatusInternalServerError
		if clientGone {
			ex.code = statusClientClosed
		}
	}
	u := ex.usage
	tpot := time.Duration(-1)
	var events int64
	if ex.sse != nil {
		if ex.sse.idle != nil {
			ex.sse.idle.stop()
		}
		u = ex.sse.usage
		u.output = ex.sse.outputTokens()
		events = ex.sse.events
		tpot = ex.sse.tpot()
	}
	if ex.stream != nil {
		outcome := ex.outcome
		switch {
		case outcome != "":
		case ex.sse != nil:
			outcome = ex.sse.outcome(clientGone)
		case clientGone:
			outcome = metrics.OutcomeClientCanceled
		case ex.code/100 == 2:
			outcome = metrics.OutcomeCompleted
		case ex.code/100 == 5:
			outcome = metrics.OutcomeUpstreamError
		default:
			outcome = metrics.OutcomeRejected
		}
		var avg float64
		if ex.sse != nil {
			avg = ex.sse.averageTokens()
		}
		ex.stream.End(metrics.StreamEnd{Outcome: outcome, TPOT: tpot, AverageTokens: avg, Events: events})
		ex.outcome = outcome
	}
	ex.rec.Tokens(ex.labels, u.input, u.output)
	duration := end.Sub(ex.t0)
	ex.rec.Request(ex.labels, ex.streaming, ex.code, duration)

	if ce := log.Check(zap.DebugLevel, "request"); ce != nil {
		fields := []zap.Field{
			zap.String("request_id", ex.ids.Request),
			zap.String("model", ex.labels.Model),
			zap.String("endpoint", ex.labels.Endpoint),
			zap.Int("code", ex.code),
			zap.Bool("streaming", ex.streaming),
			zap.Duration("duration", duration),
			zap.Int64("input_tokens", u.input),
			zap.Int64("output_tokens", u.output),
		}
		if ex.stream != nil {
			fields = append(fields, zap.String("outcome", ex.outcome), zap.Int64("token_events", events))
		}
		if ex.sse != nil && events > 0 {
			fields = append(fields, zap.Duration("ttft", ex.sse.first.Sub(ex.t0)))
		}
		if ex.ids.Trace != "" {
			fields = append(fields, zap.String("trace_id", ex.ids.Trace))
		}
		ce.Write(fields...)
	}
}

// statusClientClosed is recorded when the client went away before any
// response; nginx made 499 the usual code for it.
const statusClientClosed = 499

// jsonBody passes a non-streamed response body through and keeps a copy,
// up to max bytes, to read its usage at the end.
type jsonBody struct {
	rc   io.ReadCloser
	ex   *exchange
	max  int
	buf  []byte
	over bool
	done bool
}

func (b *jsonBody) Read(p []byte) (int, error) {
	n, err := b.rc.Read(p)
	if n > 0 && !b.over {
		if len(b.buf)+n > b.max {
			b.over, b.buf = true, nil
		} else {
			b.buf = append(b.buf, p[:n]...)
		}
	}
	if err == io.EOF && !b.done {
		b.done = true
		b.read()
	}
	return n, err
}

func (b *jsonBody) read() {
	if b.over {
		b.ex.rec.ParseFailure(b.ex.labels, metrics.ParseBodyTooLarge)
		return
	}
	e := events.ParseJSON(b.ex.endpoint, b.buf)
	b.buf = nil
	if e.Invalid {
		b.ex.rec.ParseFailure(b.ex.labels, metrics.ParseInvalidJSON)
		return
	}
	if e.HasUsage {
		b.ex.usage = usage{input: e.InputTokens, output: e.OutputTokens}
	}
}

func (b *jsonBody) Close() error { return b.rc.Close() }
