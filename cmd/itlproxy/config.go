package main

import (
	"crypto/tls"
	"reflect"
	"slices"
	"strings"
	"time"

	"github.com/itlproxy/itlproxy/cmd/internal/admin"
	"github.com/itlproxy/itlproxy/cmd/internal/envconfig"
	"github.com/itlproxy/itlproxy/cmd/internal/reload"
	"github.com/itlproxy/itlproxy/cmd/internal/telemetry"
	"github.com/itlproxy/itlproxy/metrics"
	"github.com/itlproxy/itlproxy/proxy"
)

// config is itlproxy's whole configuration, read from the environment.
// Each field's help tag is what `itlproxy -h` prints for it, and
// docs/configuration.md is generated from that output (go generate; a
// test fails when the two differ).
type config struct {
	UpstreamURL             string        `env:"ITLPROXY_UPSTREAM_URL" help:"URL of the LLM server: http or https, with an optional base path (http://127.0.0.1:8000, https://api.example.com/openai); or a comma-separated list of such URLs of one scheme and base path, balanced over by streams in flight, each stream counted on the one that served it. Required, except in demo mode."`
	UpstreamResolve         string        `env:"ITLPROXY_UPSTREAM_RESOLVE" help:"dns: resolve the host of ITLPROXY_UPSTREAM_URL again every ITLPROXY_UPSTREAM_RESOLVE_INTERVAL and balance over every address it returns of one family (ITLPROXY_UPSTREAM_DNS_LOOKUP_FAMILY: a Kubernetes headless Service's ready pods), each stream counted on the one that served it. Unset: the URL as it is."`
	UpstreamDNSLookupFamily string        `env:"ITLPROXY_UPSTREAM_DNS_LOOKUP_FAMILY" envDefault:"v4_preferred" help:"Which addresses of the name ITLPROXY_UPSTREAM_RESOLVE=dns balances over, as Envoy's DNS lookup family: v4_preferred (the A records, else the AAAA ones), auto (the AAAA records, else the A ones), v4_only, v6_only, or all (both: a dual-stack Service's pods counted twice)."`
	UpstreamResolveInterval time.Duration `env:"ITLPROXY_UPSTREAM_RESOLVE_INTERVAL" envDefault:"5s" help:"How often ITLPROXY_UPSTREAM_RESOLVE=dns resolves the name again; a resolution that fails keeps the addresses as they were."`
	UpstreamResolver        string        `env:"ITLPROXY_UPSTREAM_RESOLVER" help:"host:port of the DNS server that resolves the upstream's name with ITLPROXY_UPSTREAM_RESOLVE=dns, instead of the system's (/etc/resolv.conf)."`
	UpstreamMaxEndpoints    int           `env:"ITLPROXY_UPSTREAM_MAX_ENDPOINTS" envDefault:"64" help:"Most upstream label values at once, when balancing over several endpoints; past it, endpoints are labelled _other (they still take streams)."`
	ListenAddr              string        `env:"ITLPROXY_LISTEN_ADDR" envDefault:":8080" help:"Address of the proxy listener: proxied traffic only."`
	AdminAddr               string        `env:"ITLPROXY_ADMIN_ADDR" envDefault:":9090" help:"Address of the admin listener: /metrics, /healthz, /readyz, the live page at / and /debug/streams, POST /-/reload (with ITLPROXY_WEB_ENABLE_LIFECYCLE) and /debug/pprof/ (with ITLPROXY_PPROF)."`

	WebConfigFile      string `env:"ITLPROXY_WEB_CONFIG_FILE" help:"Web configuration file of the admin listener, the format Prometheus and its exporters take with --web.config.file (exporter-toolkit): tls_server_config (certificate and key files, optional client CA for mTLS), basic_auth_users (user: bcrypt hash), http_server_config. With users, every admin path but /healthz and /readyz (left open for probes) requires their credentials; with a certificate, the whole admin listener speaks HTTPS only. Re-read at every request and TLS handshake: a changed password or a rotated certificate takes effect without a restart (whether the listener speaks TLS is decided at start). Unset: plain HTTP, no credentials. See docs/admin-access.md."`
	WebEnableLifecycle bool   `env:"ITLPROXY_WEB_ENABLE_LIFECYCLE" envDefault:"false" help:"Serve POST /-/reload on the admin listener, as Prometheus' --web.enable-lifecycle. Off, it answers 403 and reloads nothing; SIGHUP and changes to the watched files reload them either way."`

	Models    []string `env:"ITLPROXY_MODELS" help:"Comma-separated allow-list of model label values; other models are labelled _other. Empty: any model, up to ITLPROXY_MAX_MODELS."`
	MaxModels int      `env:"ITLPROXY_MAX_MODELS" envDefault:"32" help:"Distinct model label values kept when there is no allow-list; later models are labelled _other."`

	MaxRequestBytes   envconfig.ByteSize `env:"ITLPROXY_MAX_REQUEST_BYTES" envDefault:"32MiB" help:"Largest request body read on the measured routes, and largest Content-Length announced on any route; larger ones get 413. Bytes, or with KiB/MiB/GiB."`
	MaxEventBytes     envconfig.ByteSize `env:"ITLPROXY_MAX_EVENT_BYTES" envDefault:"1MiB" help:"Largest SSE event, non-streamed JSON body or Realtime API message (once decompressed) the measurement buffers; larger ones are forwarded unmeasured and counted."`
	UpstreamTimeout   time.Duration      `env:"ITLPROXY_UPSTREAM_TIMEOUT" envDefault:"10m" help:"Longest wait for the upstream's response headers (a non-streamed request waits for its whole generation); 504 after it. 0: no limit."`
	StreamIdleTimeout time.Duration      `env:"ITLPROXY_STREAM_IDLE_TIMEOUT" envDefault:"0s" help:"End a stream whose upstream then sends nothing for this long (outcome idle_timeout; the client sees the stream cut). Counted only while the proxy waits for the upstream (not while a slow client reads) and not after the stream's end marker. 0: off."`

	UpstreamCAFile             string `env:"ITLPROXY_UPSTREAM_CA_FILE" help:"PEM file of the CA certificates that an https upstream's certificate must chain to, instead of the system's."`
	UpstreamInsecureSkipVerify bool   `env:"ITLPROXY_UPSTREAM_INSECURE_SKIP_VERIFY" envDefault:"false" help:"Do not verify the https upstream's certificate. Insecure, for tests only; logged at every start."`
	UpstreamClientCertFile     string `env:"ITLPROXY_UPSTREAM_CLIENT_CERT_FILE" help:"PEM certificate the proxy presents to an https upstream that requires one (mTLS); with ITLPROXY_UPSTREAM_CLIENT_KEY_FILE."`
	UpstreamClientKeyFile      string `env:"ITLPROXY_UPSTREAM_CLIENT_KEY_FILE" help:"PEM private key of ITLPROXY_UPSTREAM_CLIENT_CERT_FILE."`

	TLSCertFile string `env:"ITLPROXY_TLS_CERT_FILE" help:"PEM certificate (chain) of the proxy listener: with ITLPROXY_TLS_KEY_FILE it serves HTTPS, HTTP/2 and HTTP/1.1."`
	TLSKeyFile  string `env:"ITLPROXY_TLS_KEY_FILE" help:"PEM private key of ITLPROXY_TLS_CERT_FILE."`
	H2C         bool   `env:"ITLPROXY_H2C" envDefault:"false" help:"Also accept cleartext HTTP/2 (h2c, prior knowledge) on a listener without TLS, as service meshes send it."`

	InjectUsage bool `env:"ITLPROXY_INJECT_USAGE" envDefault:"false" help:"Ask for usage on streaming chat and completions requests that do not (stream_options.include_usage), and take it out of the response: tokens and TPOT for every stream; see docs/apis.md."`

	Routes       string `env:"ITLPROXY_ROUTES" help:"Comma-separated path=api pairs that measure an API on another path (a server mounted under a prefix), added to the built-in routes: e.g. /ollama/api/chat=ollama_chat,/generate=tgi_generate. APIs: see docs/apis.md."`
	DefaultModel string `env:"ITLPROXY_DEFAULT_MODEL" help:"Model label of a measured request whose body names no model (TGI's and llama.cpp's native APIs), or of a Realtime API connection without ?model=. Unset: _unknown."`

	ReadHeaderTimeout time.Duration      `env:"ITLPROXY_READ_HEADER_TIMEOUT" envDefault:"10s" help:"Longest a client may take to send its request headers (slowloris); the connection is closed after it."`
	ClientIdleTimeout time.Duration      `env:"ITLPROXY_CLIENT_IDLE_TIMEOUT" envDefault:"2m" help:"How long an idle keep-alive client connection is kept open."`
	MaxHeaderBytes    envconfig.ByteSize `env:"ITLPROXY_MAX_HEADER_BYTES" envDefault:"64KiB" help:"Largest request header block accepted; larger ones get 431."`
	ClientSendBuffer  envconfig.ByteSize `env:"ITLPROXY_CLIENT_SEND_BUFFER" envDefault:"0" help:"Kernel send buffer of each client connection (SO_SNDBUF); caps what a slow reader parks in the kernel, otherwise up to net.ipv4.tcp_wmem's maximum (4 MiB by default). 0: the kernel's autotuning."`
	Pprof             bool               `env:"ITLPROXY_PPROF" envDefault:"false" help:"Serve Go's profiler at /debug/pprof/ on the admin listener (never on the proxy port)."`

	ShutdownDelay   time.Duration `env:"ITLPROXY_SHUTDOWN_DELAY" envDefault:"0s" help:"On SIGTERM, how long to keep accepting requests after /readyz starts failing, so load balancers stop sending first: their reaction time (e.g. 5s in Kubernetes)."`
	ShutdownTimeout time.Duration `env:"ITLPROXY_SHUTDOWN_TIMEOUT" envDefault:"30s" help:"On SIGTERM, how long streams in flight, and WebSocket connections (the Realtime API), may take to finish before they are cut."`

	SLOTTFT        time.Duration `env:"ITLPROXY_SLO_TTFT" help:"Default time-to-first-token objective of every model (e.g. 800ms). Unset: none."`
	SLOITL         time.Duration `env:"ITLPROXY_SLO_ITL" help:"Default inter-token latency objective of every model, per gap (e.g. 50ms). Unset: none."`
	SLOTPOT        time.Duration `env:"ITLPROXY_SLO_TPOT" help:"Default time-per-output-token objective of every model (e.g. 40ms). Unset: none."`
	SLOMaxGap      time.Duration `env:"ITLPROXY_SLO_MAX_GAP" help:"Default longest-gap objective of every model, per stream (e.g. 2s): a stream whose longest gap exceeds it misses. Unset: none."`
	SLOFile        string        `env:"ITLPROXY_SLO_FILE" help:"YAML file of per-model and per-class objectives, over the defaults above (see docs/slos.md). Re-read when it changes, on SIGHUP and on POST /-/reload (with ITLPROXY_WEB_ENABLE_LIFECYCLE)."`
	StallThreshold time.Duration `env:"ITLPROXY_STALL_THRESHOLD" envDefault:"2s" help:"A gap between tokens longer than this counts as a stall (itlproxy_stalls_total, by its cause: a prefill on the same server, the client, or the upstream on its own). 0: none."`

	NativeBreakdowns bool `env:"ITLPROXY_NATIVE_BREAKDOWNS" envDefault:"false" help:"For a Prometheus that scrapes native histograms: the histograms that break ITL, TTFT and TPOT down (by load, position, context, turn), those of each stream's shape, the tokens per response and the engines' own carry native buckets only, one series each instead of one per classic bucket. ITL, TTFT, TPOT and request duration keep their classic buckets. See docs/series-budget.md."`

	ClassHeader  string   `env:"ITLPROXY_CLASS_HEADER" envDefault:"X-SLO-Class" help:"Request header that names the request's service class; classes not defined in ITLPROXY_SLO_FILE are labelled default."`
	TenantHeader string   `env:"ITLPROXY_TENANT_HEADER" help:"Request header whose value is the tenant label (team, application). Unset: every tenant label is _none. Authorization, cookies and headers named like keys, tokens or secrets are refused (exit 2)."`
	Tenants      []string `env:"ITLPROXY_TENANTS" help:"Comma-separated allow-list of tenant label values; other tenants are labelled _other. Empty: any tenant, up to ITLPROXY_MAX_TENANTS."`
	MaxTenants   int      `env:"ITLPROXY_MAX_TENANTS" envDefault:"64" help:"Distinct tenant label values kept when there is no allow-list; later tenants are labelled _other."`

	SessionHeader        string        `env:"ITLPROXY_SESSION_HEADER" envDefault:"X-Session-Id" help:"Request header that carries a session id (in exemplars and the session tracker, never in labels)."`
	SessionFromUser      bool          `env:"ITLPROXY_SESSION_FROM_USER" envDefault:"false" help:"Without the session header, use the request body's \"user\" field as the session id. It then appears in exemplars on /metrics: mind what clients put there."`
	SessionMax           int           `env:"ITLPROXY_SESSION_MAX" envDefault:"10000" help:"Most sessions the tracker remembers (about 200 bytes each); the least recently seen are forgotten first."`
	SessionTTL           time.Duration `env:"ITLPROXY_SESSION_TTL" envDefault:"30m" help:"A session idle this long is forgotten."`
	SessionDegradeFactor float64       `env:"ITLPROXY_SESSION_DEGRADE_FACTOR" envDefault:"2" help:"A session counts as degraded when a stream's median gap exceeds this many times its baseline."`

	RecorderStreams int           `env:"ITLPROXY_RECORDER_STREAMS" envDefault:"1000" help:"Stream recorder (/debug/streams and the page at / on the admin listener): how many of the streams that ended last it keeps. With ITLPROXY_RECORDER_SLOWEST=0, 0 turns it off."`
	RecorderSlowest int           `env:"ITLPROXY_RECORDER_SLOWEST" envDefault:"100" help:"Stream recorder: how many of the slowest streams that ended within ITLPROXY_RECORDER_WINDOW it keeps, by longest gap and by TTFT (each)."`
	RecorderWindow  time.Duration `env:"ITLPROXY_RECORDER_WINDOW" envDefault:"15m" help:"Stream recorder: the sliding window over which it ranks the slowest streams."`
	RecorderMaxGaps int           `env:"ITLPROXY_RECORDER_MAX_GAPS" envDefault:"256" help:"Stream recorder: how many gaps of each stream it keeps one by one (16 bytes each); the rest are summed up (count, total, longest)."`

	LogLevel  string `env:"ITLPROXY_LOG_LEVEL" envDefault:"info" help:"debug (one line per request), info, warn or error."`
	LogFormat string `env:"ITLPROXY_LOG_FORMAT" envDefault:"json" help:"json or console."`

	GenAIProvider string `env:"ITLPROXY_GENAI_PROVIDER" help:"gen_ai.provider.name of the GenAI metrics pushed over OTLP (e.g. azure.ai.openai, aws.bedrock). Unset: the provider whose API host the upstream is (api.openai.com: openai, ...), else the one whose API each route speaks: openai, anthropic on /v1/messages, a native server's name on its API. See docs/otlp.md."`

	// The OpenTelemetry SDK's own variables: OTEL_*.
	telemetry.Config

	DemoClients int `env:"ITLPROXY_DEMO_CLIENTS" envDefault:"6" help:"Demo mode only: concurrent simulated clients."`

	// slos are the objectives resolved from the SLO variables and file.
	slos metrics.SLOs
	// upstreamTLS is the TLS client configuration for an https upstream.
	upstreamTLS *tls.Config
	// listenerTLS is the proxy listener's TLS configuration, nil without.
	listenerTLS *tls.Config
	// routes are the built-in routes with ITLPROXY_ROUTES's.
	routes []proxy.Route
	// tlsFiles are the certificate files both take, re-read when they
	// change.
	tlsFiles []*reload.CertFile
	// web is what ITLPROXY_WEB_CONFIG_FILE said at start.
	web admin.WebConfig
}

// configError lists every problem found in the configuration.
type configError struct {
	problems []string
}

func (e *configError) Error() string {
	return "invalid configuration:\n  " + strings.Join(e.problems, "\n  ") +
		"\nrun 'itlproxy -h' for every variable"
}

// loadConfig reads the configuration from environ and checks it. The
// upstream is optional in demo mode, which brings its own.
func loadConfig(environ map[string]string, demo bool) (config, error) {
	var cfg config
	problems, bad := envconfig.Parse(environ, &cfg)
	for _, p := range cfg.validate(demo) {
		if bad[p.key] {
			continue // already reported as unparsable
		}
		// Quote what the operator wrote (a size as "512KiB", not 524288);
		// URLs without their secrets.
		if raw, set := environ[p.key]; set && raw != "" {
			p.value = raw
		}
		if urlKey(p.key) {
			p.value = envconfig.ShowURL(p.value)
		}
		problems = append(problems, p.String())
	}
	if tlsConfig, files, errs := upstreamTLS(cfg); len(errs) > 0 {
		problems = append(problems, errs...)
	} else {
		cfg.upstreamTLS, cfg.tlsFiles = tlsConfig, files
	}
	if listenerTLS, pair, err := listenerTLS(cfg); err != "" {
		problems = append(problems, err)
	} else if pair != nil {
		cfg.listenerTLS, cfg.tlsFiles = listenerTLS, append(cfg.tlsFiles, pair)
	}
	if web, problem := admin.LoadWebConfig(cfg.WebConfigFile); problem != "" {
		problems = append(problems, problem)
	} else {
		cfg.web = web
	}
	if routes, err := proxy.ParseRoutes(cfg.Routes); err != nil {
		for line := range strings.SplitSeq(err.Error(), "\n") {
			problems = append(problems, "ITLPROXY_ROUTES: "+line)
		}
	} else {
		cfg.routes = routes
	}
	cfg.slos = metrics.SLOs{Default: cfg.envObjectives()}
	if cfg.SLOFile != "" && len(problems) == 0 {
		slos, err := metrics.LoadSLOFile(cfg.SLOFile, cfg.slos.Default)
		if err != nil {
			for line := range strings.SplitSeq(err.Error(), "\n") {
				problems = append(problems, "ITLPROXY_SLO_FILE: "+line)
			}
		}
		cfg.slos = slos
	}
	if len(problems) > 0 {
		return cfg, &configError{problems: problems}
	}
	cfg.Models = envconfig.List(cfg.Models)
	cfg.Tenants = envconfig.List(cfg.Tenants)
	return cfg, nil
}

// envObjectives are the objectives the environment sets, under the SLO
// file's.
func (c config) envObjectives() metrics.Objectives {
	return metrics.Objectives{TTFT: c.SLOTTFT, ITL: c.SLOITL, TPOT: c.SLOTPOT, MaxGap: c.SLOMaxGap}
}

// urlKey reports whether key's value is a URL (or an address), which may
// hold credentials: problems show it as envconfig.ShowURL does.
func urlKey(key string) bool {
	return key == "ITLPROXY_UPSTREAM_URL" || key == "ITLPROXY_UPSTREAM_RESOLVER" || slices.Contains(telemetry.URLVariables, key)
}

// usage prints what `itlproxy -h` shows: the commands and every variable.
func usage() string {
	var b strings.Builder
	b.WriteString(`itlproxy: a reverse proxy for LLM servers that measures what users feel (time
to first token, every gap between tokens, time per output token) and
exports it on /metrics.

Usage:
  itlproxy           proxy to ITLPROXY_UPSTREAM_URL
  itlproxy demo      run a simulated upstream, the proxy and a small load, and
                     print a live table (no LLM server needed)
  itlproxy demo -h   print the demo's help: its models, objectives and settings
  itlproxy version   print the version
  itlproxy -h        print this help

Configuration, from the environment:
`)
	envconfig.Usage(&b, reflect.TypeFor[config]())
	return b.String()
}
