// Command itlproxy is a reverse proxy for LLM servers (vLLM, SGLang, TGI,
// llama.cpp, Ollama, hosted OpenAI-compatible APIs) that measures what
// users feel as responses stream through — time to first token, every gap
// between tokens, time per output token — and exports it for Prometheus.
// `itlproxy -h` lists the commands and every configuration variable.
//
// This package is the command: its configuration (config.go, every
// variable with its help text; validate.go, every problem reported at
// once, naming the variable), the wiring and the run (run.go): main adds
// signals and the exit status (2 for a bad command line or configuration,
// 1 for any other failure) and calls run, which builds one Prometheus
// registry, the metrics, the tracer and the metrics' push over OTLP
// (cmd/internal/telemetry), the stream recorder, the reloader
// (cmd/internal/reload) and the proxy (package proxy), and serves the
// proxy listener and the admin listener (cmd/internal/admin) until the
// shutdown; `itlproxy demo` (demo.go) runs the same in front of a
// simulated upstream (cmd/internal/demo). How a request flows through the
// packages is docs/code.md's.
package main

// The generated sections of docs/configuration.md and docs/metrics.md
// are written by this package's reference tests.
//
//go:generate go test -count=1 -run Reference -update
