package main

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/itlproxy/itlproxy/cmd/internal/telemetry"
	"github.com/itlproxy/itlproxy/metrics"
	"github.com/itlproxy/itlproxy/proxy"
)

const upstreamOK = "http://127.0.0.1:8000"

func TestConfigDefaults(t *testing.T) {
	cfg, err := loadConfig(map[string]string{"ITLPROXY_UPSTREAM_URL": upstreamOK}, false)
	if err != nil {
		t.Fatal(err)
	}
	want := config{
		UpstreamURL:             upstreamOK,
		ListenAddr:              ":8080",
		AdminAddr:               ":9090",
		MaxModels:               32,
		MaxRequestBytes:         32 << 20,
		MaxEventBytes:           1 << 20,
		UpstreamTimeout:         10 * time.Minute,
		ReadHeaderTimeout:       10 * time.Second,
		ClientIdleTimeout:       2 * time.Minute,
		MaxHeaderBytes:          64 << 10,
		ShutdownTimeout:         30 * time.Second,
		StallThreshold:          2 * time.Second,
		ClassHeader:             "X-SLO-Class",
		MaxTenants:              64,
		SessionHeader:           "X-Session-Id",
		SessionMax:              10000,
		SessionTTL:              30 * time.Minute,
		SessionDegradeFactor:    2,
		UpstreamResolveInterval: 5 * time.Second,
		UpstreamDNSLookupFamily: "v4_preferred",
		UpstreamMaxEndpoints:    64,
		RecorderStreams:         1000,
		RecorderSlowest:         100,
		RecorderWindow:          15 * time.Minute,
		RecorderMaxGaps:         256,
		LogLevel:                "info",
		LogFormat:               "json",
		DemoClients:             6,
		Config: telemetry.Config{
			OTLPProtocol:         "http/protobuf",
			OTELServiceName:      "itlproxy",
			OTELTracesSampler:    "parentbased_always_on",
			OTELTracesSamplerArg: 1,
			OTELBSPMaxQueueSize:  2048,

			OTELMetricsExporter:      "prometheus",
			OTELMetricExportInterval: 60000,
			OTELMetricExportTimeout:  30000,
			OTLPMetricsTemporality:   "cumulative",
		},
		routes: proxy.DefaultRoutes,
	}
	if tc := cfg.upstreamTLS; tc == nil || tc.InsecureSkipVerify || tc.RootCAs != nil {
		t.Errorf("upstream TLS by default: %+v, want verification against the system's roots", tc)
	}
	cfg.upstreamTLS = nil
	if !reflect.DeepEqual(cfg, want) {
		t.Errorf("defaults:\n got %+v\nwant %+v", cfg, want)
	}
}

func TestConfigValues(t *testing.T) {
	cfg, err := loadConfig(map[string]string{
		"ITLPROXY_UPSTREAM_URL":      "https://api.example.com/openai",
		"ITLPROXY_MODELS":            " llama , meta-llama/Llama-3.1-8B-Instruct,,qwen2.5:7b ",
		"ITLPROXY_MAX_REQUEST_BYTES": "512KiB",
		"ITLPROXY_MAX_EVENT_BYTES":   "4096",
		"ITLPROXY_SHUTDOWN_DELAY":    "5s",
		"ITLPROXY_LISTEN_ADDR":       "127.0.0.1:9090",
		"ITLPROXY_ADMIN_ADDR":        "127.0.0.2:9090",
	}, false)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"llama", "meta-llama/Llama-3.1-8B-Instruct", "qwen2.5:7b"}; !slices.Equal(cfg.Models, want) {
		t.Errorf("models %q, want %q", cfg.Models, want)
	}
	if cfg.MaxRequestBytes != 512<<10 || cfg.MaxEventBytes != 4096 || cfg.ShutdownDelay != 5*time.Second {
		t.Errorf("parsed %+v", cfg)
	}
}

// configErrorCases are bad configurations and the exact problems each
// must be refused with.
var configErrorCases = []struct {
	name string
	env  map[string]string
	demo bool
	want []string
}{
	{
		name: "no upstream",
		env:  map[string]string{},
		want: []string{"ITLPROXY_UPSTREAM_URL: required: the URL of the OpenAI-compatible server, e.g. http://127.0.0.1:8000"},
	},
	{
		name: "bad upstreams hide their user information and query",
		env:  map[string]string{"ITLPROXY_UPSTREAM_URL": "ftp://user:hunter2@host?key=hunter3"},
		want: []string{`ITLPROXY_UPSTREAM_URL="ftp://host": scheme must be http or https`},
	},
	{
		name: "a bad resolver hides what looks like credentials",
		env:  map[string]string{"ITLPROXY_UPSTREAM_URL": upstreamOK, "ITLPROXY_UPSTREAM_RESOLVER": "user:hunter2@10.96.0.10"},
		want: []string{`ITLPROXY_UPSTREAM_RESOLVER="10.96.0.10": not a host:port address (e.g. 10.96.0.10:53)`},
	},
	{
		name: "upstream without host",
		env:  map[string]string{"ITLPROXY_UPSTREAM_URL": "http:///v1"},
		want: []string{`ITLPROXY_UPSTREAM_URL="http:///v1": no host`},
	},
	{
		name: "upstream not a URL",
		env:  map[string]string{"ITLPROXY_UPSTREAM_URL": "http://[::1"},
		want: []string{`ITLPROXY_UPSTREAM_URL="(unparsable URL)": not a URL`},
	},
	{
		name: "a name's addresses of an unknown family",
		env: map[string]string{"ITLPROXY_UPSTREAM_URL": "http://llm.test:8000", "ITLPROXY_UPSTREAM_RESOLVE": "dns",
			"ITLPROXY_UPSTREAM_DNS_LOOKUP_FAMILY": "v4"},
		want: []string{`ITLPROXY_UPSTREAM_DNS_LOOKUP_FAMILY="v4": must be v4_preferred, auto, v4_only, v6_only or all`},
	},
	{
		name: "tracing",
		env: map[string]string{
			"ITLPROXY_UPSTREAM_URL":              upstreamOK,
			"OTEL_EXPORTER_OTLP_ENDPOINT":        "collector:4318",
			"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://user:secret@/v1/traces",
			"OTEL_EXPORTER_OTLP_PROTOCOL":        "http/json",
			"OTEL_RESOURCE_ATTRIBUTES":           "team",
			"OTEL_TRACES_SAMPLER":                "jaeger_remote",
			"OTEL_TRACES_SAMPLER_ARG":            "2",
			"OTEL_BSP_MAX_QUEUE_SIZE":            "0",
		},
		want: []string{
			`OTEL_EXPORTER_OTLP_PROTOCOL="http/json": must be http/protobuf or grpc`,
			`OTEL_EXPORTER_OTLP_ENDPOINT="collector:4318": not an http or https URL (e.g. http://otel-collector:4318)`,
			`OTEL_EXPORTER_OTLP_TRACES_ENDPOINT="http:///v1/traces": not an http or https URL (e.g. http://otel-collector:4318)`,
			`OTEL_RESOURCE_ATTRIBUTES="team": not key=value pairs separated by commas, values percent-encoded`,
			`OTEL_TRACES_SAMPLER="jaeger_remote": not a sampler itlproxy knows (always_on, always_off, traceidratio, parentbased_always_on, parentbased_always_off, parentbased_traceidratio)`,
			`OTEL_TRACES_SAMPLER_ARG="2": must be between 0 and 1`,
			`OTEL_BSP_MAX_QUEUE_SIZE="0": must be at least 1`,
		},
	},
	{
		name: "metrics push without an endpoint",
		env:  map[string]string{"ITLPROXY_UPSTREAM_URL": upstreamOK, "OTEL_METRICS_EXPORTER": "prometheus,otlp"},
		want: []string{`OTEL_METRICS_EXPORTER="prometheus,otlp": pushing metrics over OTLP needs OTEL_EXPORTER_OTLP_METRICS_ENDPOINT or OTEL_EXPORTER_OTLP_ENDPOINT (e.g. http://otel-collector:4318)`},
	},
	{
		name: "metrics push",
		env: map[string]string{
			"ITLPROXY_UPSTREAM_URL":                             upstreamOK,
			"OTEL_METRICS_EXPORTER":                             "otlp,console",
			"OTEL_EXPORTER_OTLP_METRICS_ENDPOINT":               "otel-collector:4318/v1/metrics",
			"OTEL_EXPORTER_OTLP_METRICS_PROTOCOL":               "http/json",
			"OTEL_METRIC_EXPORT_INTERVAL":                       "60s",
			"OTEL_METRIC_EXPORT_TIMEOUT":                        "0",
			"OTEL_EXPORTER_OTLP_METRICS_TEMPORALITY_PREFERENCE": "monotonic",
		},
		want: []string{
			`OTEL_METRIC_EXPORT_INTERVAL="60s": not a whole number`,
			`OTEL_EXPORTER_OTLP_METRICS_PROTOCOL="http/json": must be http/protobuf or grpc`,
			`OTEL_EXPORTER_OTLP_METRICS_ENDPOINT="otel-collector:4318/v1/metrics": not an http or https URL (e.g. http://otel-collector:4318)`,
			`OTEL_METRICS_EXPORTER="otlp,console": must be prometheus, otlp, both (prometheus,otlp) or none`,
			`OTEL_METRIC_EXPORT_TIMEOUT="0": must be at least 1 (milliseconds)`,
			`OTEL_EXPORTER_OTLP_METRICS_TEMPORALITY_PREFERENCE="monotonic": must be cumulative, delta or lowmemory`,
		},
	},
	{
		name: "none pushes nothing and takes nothing else",
		env:  map[string]string{"ITLPROXY_UPSTREAM_URL": upstreamOK, "OTEL_METRICS_EXPORTER": "none,otlp", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"},
		want: []string{`OTEL_METRICS_EXPORTER="none,otlp": must be prometheus, otlp, both (prometheus,otlp) or none`},
	},
	{
		name: "every problem at once, in field order",
		env: map[string]string{
			"ITLPROXY_UPSTREAM_URL":           "localhost:8000",
			"ITLPROXY_LISTEN_ADDR":            "8080",
			"ITLPROXY_ADMIN_ADDR":             "admin",
			"ITLPROXY_MAX_MODELS":             "many",
			"ITLPROXY_MAX_REQUEST_BYTES":      "0",
			"ITLPROXY_MAX_EVENT_BYTES":        "1MB",
			"ITLPROXY_UPSTREAM_TIMEOUT":       "10",
			"ITLPROXY_SHUTDOWN_DELAY":         "-1s",
			"ITLPROXY_SHUTDOWN_TIMEOUT":       "soon",
			"ITLPROXY_LOG_LEVEL":              "verbose",
			"ITLPROXY_LOG_FORMAT":             "xml",
			"ITLPROXY_DEMO_CLIENTS":           "-3",
			"ITLPROXY_SESSION_HEADER":         "X Session",
			"ITLPROXY_SESSION_FROM_USER":      "yes",
			"ITLPROXY_NATIVE_BREAKDOWNS":      "on",
			"ITLPROXY_SESSION_MAX":            "0",
			"ITLPROXY_SESSION_TTL":            "0s",
			"ITLPROXY_SESSION_DEGRADE_FACTOR": "1",
		},
		want: []string{
			`ITLPROXY_MAX_MODELS="many": not a whole number`,
			`ITLPROXY_MAX_EVENT_BYTES="1MB": not a size (e.g. 1048576, 512KiB, 32MiB)`,
			`ITLPROXY_UPSTREAM_TIMEOUT="10": not a duration (e.g. 500ms, 30s, 10m)`,
			`ITLPROXY_SHUTDOWN_TIMEOUT="soon": not a duration (e.g. 500ms, 30s, 10m)`,
			`ITLPROXY_NATIVE_BREAKDOWNS="on": not true or false`,
			`ITLPROXY_SESSION_FROM_USER="yes": not true or false`,
			`ITLPROXY_UPSTREAM_URL="localhost:8000": scheme must be http or https`,
			`ITLPROXY_LISTEN_ADDR="8080": not a host:port address (e.g. :8080, 127.0.0.1:8080)`,
			`ITLPROXY_ADMIN_ADDR="admin": not a host:port address (e.g. :9090, 127.0.0.1:9090)`,
			`ITLPROXY_MAX_REQUEST_BYTES="0": must be at least 1`,
			`ITLPROXY_SHUTDOWN_DELAY="-1s": must not be negative`,
			`ITLPROXY_SESSION_HEADER="X Session": not a header name`,
			`ITLPROXY_SESSION_MAX="0": must be at least 1`,
			`ITLPROXY_SESSION_TTL="0s": must be positive`,
			`ITLPROXY_SESSION_DEGRADE_FACTOR="1": must be greater than 1`,
			`ITLPROXY_LOG_LEVEL="verbose": must be debug, info, warn or error`,
			`ITLPROXY_LOG_FORMAT="xml": must be json or console`,
			`ITLPROXY_DEMO_CLIENTS="-3": must not be negative`,
		},
	},
	{
		name: "credential headers are never the tenant",
		env:  map[string]string{"ITLPROXY_UPSTREAM_URL": upstreamOK, "ITLPROXY_TENANT_HEADER": "Authorization", "ITLPROXY_MAX_TENANTS": "0"},
		want: []string{
			`ITLPROXY_TENANT_HEADER="Authorization": carries credentials, which never become label values: name a header that says who the tenant is (e.g. X-Tenant)`,
			`ITLPROXY_MAX_TENANTS="0": must be at least 1`,
		},
	},
	{
		name: "an API-key header is not a tenant",
		env:  map[string]string{"ITLPROXY_UPSTREAM_URL": upstreamOK, "ITLPROXY_TENANT_HEADER": "x-api-key", "ITLPROXY_CLASS_HEADER": "X Class"},
		want: []string{
			`ITLPROXY_CLASS_HEADER="X Class": not a header name`,
			`ITLPROXY_TENANT_HEADER="x-api-key": carries credentials, which never become label values: name a header that says who the tenant is (e.g. X-Tenant)`,
		},
	},
	{
		name: "NaN is no number in range",
		env:  map[string]string{"ITLPROXY_UPSTREAM_URL": upstreamOK, "ITLPROXY_SESSION_DEGRADE_FACTOR": "NaN", "OTEL_TRACES_SAMPLER_ARG": "NaN"},
		want: []string{
			`ITLPROXY_SESSION_DEGRADE_FACTOR="NaN": must be greater than 1`,
			`OTEL_TRACES_SAMPLER_ARG="NaN": must be between 0 and 1`,
		},
	},
	{
		name: "admin on the proxy port",
		env:  map[string]string{"ITLPROXY_UPSTREAM_URL": upstreamOK, "ITLPROXY_LISTEN_ADDR": "127.0.0.1:8080", "ITLPROXY_ADMIN_ADDR": ":8080"},
		want: []string{`ITLPROXY_ADMIN_ADDR=":8080": must differ from ITLPROXY_LISTEN_ADDR: the proxy port serves only proxied traffic`},
	},
	{
		name: "recorder bounds",
		env: map[string]string{"ITLPROXY_UPSTREAM_URL": upstreamOK, "ITLPROXY_RECORDER_STREAMS": "-1", "ITLPROXY_RECORDER_SLOWEST": "20000",
			"ITLPROXY_RECORDER_WINDOW": "0s", "ITLPROXY_RECORDER_MAX_GAPS": "100000"},
		want: []string{
			`ITLPROXY_RECORDER_STREAMS="-1": must be between 0 and 100000`,
			`ITLPROXY_RECORDER_SLOWEST="20000": must be between 0 and 10000`,
			`ITLPROXY_RECORDER_MAX_GAPS="100000": must be between 0 and 65536`,
			`ITLPROXY_RECORDER_WINDOW="0s": must be positive`,
		},
	},
	{
		name: "routes name a path and a known API",
		env:  map[string]string{"ITLPROXY_UPSTREAM_URL": upstreamOK, "ITLPROXY_ROUTES": "/ollama/api/chat=ollama,tgi=tgi_generate"},
		want: []string{
			`ITLPROXY_ROUTES: "/ollama/api/chat=ollama": unknown API "ollama" (one of chat_completions, completions, generate, ` +
				`llamacpp_completion, messages, ollama_chat, ollama_generate, responses, sglang_generate, tgi_generate, tgi_generate_stream)`,
			`ITLPROXY_ROUTES: "tgi=tgi_generate": the path must start with / and hold no pattern`,
		},
	},
	{
		name: "event bound too small",
		env:  map[string]string{"ITLPROXY_UPSTREAM_URL": upstreamOK, "ITLPROXY_MAX_EVENT_BYTES": "100"},
		want: []string{`ITLPROXY_MAX_EVENT_BYTES="100": must be between 1KiB and 1GiB`},
	},
	{
		name: "demo needs no upstream but checks the rest",
		env:  map[string]string{"ITLPROXY_MAX_MODELS": "0"},
		demo: true,
		want: []string{`ITLPROXY_MAX_MODELS="0": must be at least 1`},
	},
}

func TestConfigErrors(t *testing.T) {
	for _, tc := range configErrorCases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := loadConfig(tc.env, tc.demo)
			var ce *configError
			if !errors.As(err, &ce) {
				t.Fatalf("got %v, want a configError", err)
			}
			want := "invalid configuration:\n  " + strings.Join(tc.want, "\n  ") + "\nrun 'itlproxy -h' for every variable"
			if err.Error() != want {
				t.Errorf("got:\n%s\nwant:\n%s", err, want)
			}
		})
	}
}

func TestConfigSLOs(t *testing.T) {
	file := filepath.Join(t.TempDir(), "slo.yaml")
	if err := os.WriteFile(file, []byte(`
default: {ttft: 2s}
models:
  meta-llama/Llama-3.1-8B-Instruct: {ttft: 500ms, itl: 40ms}
  qwen2.5:7b: {itl: 0}
`), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := loadConfig(map[string]string{
		"ITLPROXY_UPSTREAM_URL": upstreamOK,
		"ITLPROXY_SLO_ITL":      "100ms",
		"ITLPROXY_SLO_TPOT":     "80ms",
		"ITLPROXY_SLO_FILE":     file,
	}, false)
	if err != nil {
		t.Fatal(err)
	}
	for model, want := range map[string]metrics.Objectives{
		"meta-llama/Llama-3.1-8B-Instruct": {TTFT: 500 * time.Millisecond, ITL: 40 * time.Millisecond, TPOT: 80 * time.Millisecond},
		"qwen2.5:7b":                       {TTFT: 2 * time.Second, TPOT: 80 * time.Millisecond},
		"any-other-model":                  {TTFT: 2 * time.Second, ITL: 100 * time.Millisecond, TPOT: 80 * time.Millisecond},
	} {
		if got := cfg.slos.For(model, metrics.ClassDefault); got != want {
			t.Errorf("%s: %+v, want %+v", model, got, want)
		}
	}

	bad := filepath.Join(t.TempDir(), "bad.yaml")
	if err := os.WriteFile(bad, []byte("default: {ttft: fast}\nmodel: {}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err = loadConfig(map[string]string{"ITLPROXY_UPSTREAM_URL": upstreamOK, "ITLPROXY_SLO_FILE": bad, "ITLPROXY_SLO_ITL": "-5ms"}, false)
	want := "invalid configuration:\n" +
		"  ITLPROXY_SLO_ITL=\"-5ms\": must not be negative\n" +
		"run 'itlproxy -h' for every variable"
	if err == nil || err.Error() != want {
		t.Errorf("got:\n%v\nwant:\n%s", err, want)
	}
	_, err = loadConfig(map[string]string{"ITLPROXY_UPSTREAM_URL": upstreamOK, "ITLPROXY_SLO_FILE": bad}, false)
	want = "invalid configuration:\n" +
		"  ITLPROXY_SLO_FILE: " + bad + ":1:17: default.ttft: \"fast\" is not a duration (e.g. 40ms, 1.5s)\n" +
		"  ITLPROXY_SLO_FILE: " + bad + ":2:1: unknown key \"model\" (want default, models or classes)\n" +
		"run 'itlproxy -h' for every variable"
	if err == nil || err.Error() != want {
		t.Errorf("got:\n%v\nwant:\n%s", err, want)
	}
	_, err = loadConfig(map[string]string{"ITLPROXY_UPSTREAM_URL": upstreamOK, "ITLPROXY_SLO_FILE": "/nonexistent/slo.yaml"}, false)
	if err == nil || !strings.Contains(err.Error(), "ITLPROXY_SLO_FILE: open /nonexistent/slo.yaml: no such file or directory") {
		t.Errorf("missing file: %v", err)
	}
}
