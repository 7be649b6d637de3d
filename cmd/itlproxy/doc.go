// Command itlproxy is a reverse proxy for LLM servers (vLLM, SGLang, TGI,
// llama.cpp, Ollama, hosted OpenAI-compatible APIs) that measures what
// users feel as responses stream through — time to first token, every gap
// between tokens, time per output token — and exports it for Prometheus.
// `itlproxy -h` lists the commands and every configuration variable.
//
// This package is the command only: it owns the configuration, the two
// listeners and their lifecycle. What a request goes through and what is
// measured belong to package proxy; the metric contract to package
// metrics.
//
// How it runs:
//
//   - main adds signals (SIGINT, SIGTERM; a second one kills) and the exit
//     status, and calls run: exit 2 for a bad command line or bad
//     configuration, 1 for any other failure.
//   - run reads the configuration from the environment (config.go: every
//     variable with its help text; validate.go: every problem reported at
//     once, naming the variable), builds one Prometheus registry with the
//     Go and process collectors, and metrics.New on it; with an OTLP
//     endpoint set, it starts the span exporter (tracing.go: a bounded
//     batch queue whose drops are counted), shut down last.
//   - server.run builds the proxy (proxy.New) and serves two listeners:
//     the proxy listener (ITLPROXY_LISTEN_ADDR), which serves only proxied
//     traffic — HTTPS with HTTP/2 by ALPN when a certificate is set
//     (tls.go), else cleartext HTTP/1.1, plus
//     cleartext HTTP/2 with ITLPROXY_H2C — and the admin listener
//     (ITLPROXY_ADMIN_ADDR): /metrics (OpenMetrics when asked, for
//     exemplars), /healthz, /readyz and, with ITLPROXY_PPROF, pprof.
//   - On the signal, readiness fails first, then after
//     ITLPROXY_SHUTDOWN_DELAY the proxy listener closes and streams in
//     flight get ITLPROXY_SHUTDOWN_TIMEOUT to finish; the admin listener
//     closes last, so /metrics is scraped to the end.
//   - `itlproxy demo` (demo.go, demotable.go) runs the same server in front
//     of a simulated upstream (package cmd/internal/llmsim) with simulated
//     clients and objectives of its own, and prints a table of the proxy's
//     own /metrics every few seconds.
package main

// The generated sections of docs/configuration.md and docs/metrics.md
// are written by this package's reference tests.
//
//go:generate go test -count=1 -run Reference -update
