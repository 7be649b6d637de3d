// Command itlbench is a load generator for LLM servers that measures, on
// the client's clock, what wrk, hey or vegeta cannot: time to first token,
// every gap between streamed tokens, and time per output token. It counts
// token-bearing events with the same parsers as itlproxy (package
// proxy/events), so that the two ends of a comparison count the same
// events. `itlbench -h` documents it.
//
// Five commands:
//
//   - A load run (run.go, flags.go): workers (request.go), one goroutine
//     each, send requests at a fixed concurrency or rate, read each stream
//     through the shared parsers, stamp every event when the read that
//     completed it returned, and record into lock-free log-linear
//     histograms (hist.go, stats.go). At the end it prints a text or JSON
//     report (report.go); with -compare it scrapes itlproxy's /metrics
//     before and after the run and compares the proxy's histograms with its
//     own (compare.go), with what the proxy measured of itself over the run
//     (own.go); with -watch-pid it reports the CPU time and memory
//     of the named processes over the measured run (watch.go). -api drives
//     a server's native API instead of the OpenAI-compatible one (native.go).
//   - `itlbench sweep` (sweep.go, sweepflags.go) runs the load at each of
//     a list of concurrency levels in turn (sweeplevel.go: each settles,
//     measures the requests started within its window at its load, and
//     drains), judges each against objectives on p99 TTFT and ITL and
//     finds the capacity (capacity.go), and reports it as text
//     (sweeptext.go), JSON, and an HTML page with SVG charts drawn on the
//     server (sweephtml.go, sweepchart.go); with -compare-metrics, each
//     level beside itlproxy's view of it and itlproxy's capacity rule
//     computed over the sweep (proxycapacity.go).
//   - `itlbench upstream` (upstream.go) serves a simulated upstream with
//     fixed timing (OpenAI-compatible, and the native APIs) (package cmd/internal/llmsim), over HTTP or
//     HTTPS with HTTP/2. With -stamp, each event carries its send time, from
//     which a load run on the same machine measures each token event's
//     transit (transit.go); with -itl-per-stream, its gaps lengthen with
//     the requests in flight by a known law.
//   - `itlbench plainproxy` (plainproxy.go) serves Go's plain
//     httputil.ReverseProxy, measuring nothing: the baseline that itlproxy's
//     cost is compared with in BENCHMARKS.md.
//   - `itlbench otlpsink` (otlpsink.go) takes OTLP/HTTP trace exports and
//     throws them away: the collector of a benchmark with tracing on.
package main
