// Package proxy is itlproxy's data path: it forwards every request to the
// upstream LLM server and every response byte back to the client
// unchanged, and measures the responses of the APIs it knows as they pass.
// It owns the HTTP side: routing, reading request bodies, the reverse
// proxy, the readers that wrap response bodies, and how each exchange is
// recorded. What an event is and what it says is package events'; the
// Prometheus collectors are package metrics'.
//
// # How a request flows
//
//   - route: chi sends the measured routes (DefaultRoutes: the OpenAI and
//     Anthropic APIs and the servers' native ones, with Config.Routes) to
//     the measured handler, each with its events.Endpoint; everything else
//     is forwarded and counted under the endpoint "other", not measured.
//     OPTIONS * is answered here, and a request that arrived with a
//     Transfer-Encoding closes its connection after the response
//     (smuggling.go).
//     GET /v1/realtime, the Realtime API's WebSocket, has its own handler
//     (realtime.go).
//   - inspect: the measured handler reads the request body, up to
//     Config.MaxRequestBytes, for its model, stream flag and user
//     (events.InspectRequest), and replays the same bytes to the upstream
//     (or, with Config.InjectUsage, the body asking for usage).
//   - exchange (exchange.go): built in one place from one request value,
//     it follows the request to the end of its response, on the handler's
//     goroutine; a request that asks for a stream counts as a stream from
//     the start (metrics.Stream).
//   - reverse proxy: httputil.ReverseProxy sends the request (Rewrite) and,
//     through ModifyResponse, hands the response headers to the exchange.
//   - response body reader (stream.go): for an event stream, the exchange
//     wraps the body in a reader that returns every byte as read and, per
//     read, stamps it and holds a copy; a non-streamed JSON body is copied,
//     up to the event bound, to read its usage at the end.
//   - meter (stream.go): when the reverse proxy asks for the next read,
//     once the last one's bytes have been written to the client, the meter
//     splits and classifies its events (events.StreamScanner) and records
//     TTFT, each ITL gap and the tokens per event on the stream's
//     metrics.Stream, each read at its own stamp.
//   - finish: when the handler returns (a clean end, an upstream failure or
//     a client that went away), the meter measures the read it still
//     holds, then its end record (outcome, usage, TPOT, ...) is recorded on the
//     metrics.Stream, with the request's count, duration and tokens.
//   - a WebSocket (realtime.go, websocket.go): ReverseProxy forwards the
//     upgrade; after the upstream's 101, the body ModifyResponse wraps is
//     the upstream connection, and each direction is copied through it:
//     every read stamped, forwarded, then measured by package realtime.
//     Each Realtime response is a metrics.Stream of its own, recorded and
//     traced as a stream is; the connection is one request.
//   - span (trace.go), when Config.Tracer is set: the request's server
//     span starts with the exchange, a child of the client's traceparent;
//     Rewrite makes it the upstream request's parent; the meter keeps only
//     the notable gaps (stalls, ITL objective breaches), and finish sets
//     its attributes from the end record and the stream's gap summary, and
//     ends it.
//
// # Clocks
//
// t0 is when the request's headers have been received, before the body is
// read. Each event is stamped with the time the read that completed it
// returned (events completed by one read share a stamp), before any JSON
// is decoded. TTFT is the first token-bearing event's stamp less t0; an
// ITL sample is the gap between the stamps of consecutive token-bearing
// events; a request's duration runs from t0 to the end of its response.
//
// # Measured and forwarded
//
// Every byte is forwarded as it arrives, whatever the measurement makes of
// it: an event that cannot be read is counted as a parse failure and still
// passes, an encoded body passes unmeasured, and an event stream is flushed
// to the client read by read. The one change to a response is usage
// injection's, when enabled: what asking for usage added is taken out
// again. Prompts and completions are never logged or recorded.
package proxy
