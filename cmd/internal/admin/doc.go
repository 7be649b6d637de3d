// Package admin is itlproxy's admin listener: /metrics (OpenMetrics when
// the scraper asks, for exemplars), the probes /healthz and /readyz, the
// live page at / (livepage.go, its rolling windows in history.go, its
// table of upstream endpoints in upstreams.go), the
// stream recorder's /debug/streams (debugstreams.go), POST /-/reload and,
// when asked, Go's profiler at /debug/pprof/. A web configuration file,
// the format Prometheus takes with --web.config.file, guards it with TLS
// and basic auth, the probes left open (webconfig.go).
//
// Nothing here is on the proxy port: these paths name requests, sessions
// and tenants, and the proxy port serves only proxied traffic. The
// command mounts it (New, Serve); what it shows comes from the registry
// and the recorder the proxy records to.
package admin
