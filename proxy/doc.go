// Package proxy is itlproxy's data path: it forwards every request to the
// upstream LLM server and every response byte back to the client
// unchanged, and measures the responses of the APIs it knows as they pass.
// It owns the HTTP side: routing, reading request bodies, the reverse
// proxy, the readers that wrap response bodies, and how each exchange is
// recorded. What an event is and what it says is package events'; the
// Prometheus collectors are package metrics'.
//
// How a request flows through it, file by file, is docs/code.md's "How a
// request flows" (the one description of it). In short: route.go routes
// and inspects the request; exchange.go follows it to the end of its
// response; the response body's reader, eventmeter.go for an event stream
// or jsonbody.go for a JSON body, measures it into the response's sink
// (sink.go), which records the first token, each gap and the end on the
// metrics, the stream recorder and the span (trace.go); outcome.go decides
// how a stream ended. realtime.go and websocket.go measure the Realtime
// API's WebSocket, each response on a sink of its own.
//
// Every byte is forwarded as it arrives, whatever the measurement makes of
// it: an event that cannot be read is counted as a parse failure and still
// passes, an encoded body passes unmeasured, and an event stream is flushed
// to the client read by read. The one change to a response is usage
// injection's, when enabled: what asking for usage added is taken out
// again. Prompts and completions are never logged or recorded.
package proxy
