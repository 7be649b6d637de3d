package validate

import (
	"maps"
	"net/url"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

// checkOTLP wants the OTEL_* variables of a container's environment to be
// ones itlproxy starts with (its own checks are in cmd/internal/telemetry,
// which this module cannot import): when OTEL_METRICS_EXPORTER pushes
// (otlp), an endpoint for the metrics; every endpoint an http or https URL
// with a host, every protocol http/protobuf or grpc, the interval and
// timeout whole milliseconds of at least 1, a temporality itlproxy knows.
func checkOTLP(t *testing.T, env map[string]string) {
	t.Helper()
	exporters := strings.Split(strings.ToLower(env["OTEL_METRICS_EXPORTER"]), ",")
	for i, e := range exporters {
		exporters[i] = strings.TrimSpace(e)
	}
	switch {
	case env["OTEL_METRICS_EXPORTER"] == "", slices.Equal(exporters, []string{"none"}):
	case slices.ContainsFunc(exporters, func(e string) bool { return e != "prometheus" && e != "otlp" }):
		t.Errorf("OTEL_METRICS_EXPORTER=%q: want prometheus, otlp, both or none", env["OTEL_METRICS_EXPORTER"])
	case slices.Contains(exporters, "otlp") && env["OTEL_EXPORTER_OTLP_METRICS_ENDPOINT"] == "" && env["OTEL_EXPORTER_OTLP_ENDPOINT"] == "":
		t.Errorf("OTEL_METRICS_EXPORTER=%q pushes, to no endpoint", env["OTEL_METRICS_EXPORTER"])
	}
	for _, k := range []string{"OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"} {
		if u, err := url.Parse(env[k]); env[k] != "" && (err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "") {
			t.Errorf("%s=%q: want an http or https URL", k, env[k])
		}
	}
	for _, k := range []string{"OTEL_EXPORTER_OTLP_PROTOCOL", "OTEL_EXPORTER_OTLP_METRICS_PROTOCOL", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"} {
		if v := env[k]; v != "" && v != "http/protobuf" && v != "grpc" {
			t.Errorf("%s=%q: want http/protobuf or grpc", k, v)
		}
	}
	for _, k := range []string{"OTEL_METRIC_EXPORT_INTERVAL", "OTEL_METRIC_EXPORT_TIMEOUT"} {
		if n, err := strconv.Atoi(env[k]); env[k] != "" && (err != nil || n < 1) {
			t.Errorf("%s=%q: want whole milliseconds, at least 1", k, env[k])
		}
	}
	switch v := strings.ToLower(env["OTEL_EXPORTER_OTLP_METRICS_TEMPORALITY_PREFERENCE"]); v {
	case "", "cumulative", "delta", "lowmemory":
	default:
		t.Errorf("OTEL_EXPORTER_OTLP_METRICS_TEMPORALITY_PREFERENCE=%q: want cumulative, delta or lowmemory", v)
	}
}

// otelEnv is the OTEL_* part of env.
func otelEnv(env map[string]string) map[string]string {
	out := map[string]string{}
	for k, v := range env {
		if strings.HasPrefix(k, "OTEL_") {
			out[k] = v
		}
	}
	return out
}

// TestOTLPExample: the kustomize example that pushes sets the variables
// in the sidecar's environment, and the example it builds on pushes
// nothing.
func TestOTLPExample(t *testing.T) {
	for _, tc := range []struct {
		dir  string
		want map[string]string
	}{
		{"vllm", map[string]string{}},
		{"otlp", map[string]string{
			"OTEL_METRICS_EXPORTER":                             "prometheus,otlp",
			"OTEL_EXPORTER_OTLP_METRICS_ENDPOINT":               "http://otel-collector.monitoring:4318/v1/metrics",
			"OTEL_EXPORTER_OTLP_METRICS_PROTOCOL":               "http/protobuf",
			"OTEL_METRIC_EXPORT_INTERVAL":                       "15000",
			"OTEL_METRIC_EXPORT_TIMEOUT":                        "10000",
			"OTEL_EXPORTER_OTLP_METRICS_TEMPORALITY_PREFERENCE": "cumulative",
		}},
	} {
		t.Run(tc.dir, func(t *testing.T) {
			r := render(t, filepath.Join(kubernetesDir, "examples", tc.dir))
			if len(r.deployments) != 1 {
				t.Fatalf("%d Deployments, want 1", len(r.deployments))
			}
			pod := r.deployments[0].Spec.Template.Spec
			env := effectiveEnv(t, r, sidecarOf(t, pod))
			checkOTLP(t, env)
			if got := otelEnv(env); !maps.Equal(got, tc.want) {
				t.Errorf("OTEL_* variables %v, want %v", got, tc.want)
			}
		})
	}
}

// TestChartOTLP renders the otlp values into the env ConfigMap, in both
// modes, and checks the container that reads it as every itlproxy
// container is checked: the variables each choice makes, env winning over
// them, nothing without an endpoint; the notes say when metrics are
// pushed.
func TestChartOTLP(t *testing.T) {
	push := func(o map[string]any) map[string]any { return map[string]any{"otlp": o} }
	for _, tc := range []struct {
		name string
		vals map[string]any
		want map[string]string
	}{
		{"off by default", nil, map[string]string{}},
		{"metrics to a collector", push(map[string]any{"endpoint": "http://otel-collector.monitoring:4318/"}), map[string]string{
			"OTEL_METRICS_EXPORTER":                             "prometheus,otlp",
			"OTEL_EXPORTER_OTLP_METRICS_ENDPOINT":               "http://otel-collector.monitoring:4318/v1/metrics",
			"OTEL_EXPORTER_OTLP_METRICS_PROTOCOL":               "http/protobuf",
			"OTEL_METRIC_EXPORT_INTERVAL":                       "60000",
			"OTEL_METRIC_EXPORT_TIMEOUT":                        "30000",
			"OTEL_EXPORTER_OTLP_METRICS_TEMPORALITY_PREFERENCE": "cumulative",
		}},
		{"metrics over gRPC, every 15 s, deltas", push(map[string]any{"endpoint": "http://otel-collector.monitoring:4317", "protocol": "grpc",
			"interval": 15000, "timeout": 2000000, "temporality": "delta"}), map[string]string{
			"OTEL_METRICS_EXPORTER":                             "prometheus,otlp",
			"OTEL_EXPORTER_OTLP_METRICS_ENDPOINT":               "http://otel-collector.monitoring:4317",
			"OTEL_EXPORTER_OTLP_METRICS_PROTOCOL":               "grpc",
			"OTEL_METRIC_EXPORT_INTERVAL":                       "15000",
			"OTEL_METRIC_EXPORT_TIMEOUT":                        "2000000",
			"OTEL_EXPORTER_OTLP_METRICS_TEMPORALITY_PREFERENCE": "delta",
		}},
		{"metrics and spans", push(map[string]any{"endpoint": "http://otel-collector.monitoring:4318", "traces": true}), map[string]string{
			"OTEL_METRICS_EXPORTER":                             "prometheus,otlp",
			"OTEL_EXPORTER_OTLP_ENDPOINT":                       "http://otel-collector.monitoring:4318",
			"OTEL_EXPORTER_OTLP_PROTOCOL":                       "http/protobuf",
			"OTEL_METRIC_EXPORT_INTERVAL":                       "60000",
			"OTEL_METRIC_EXPORT_TIMEOUT":                        "30000",
			"OTEL_EXPORTER_OTLP_METRICS_TEMPORALITY_PREFERENCE": "cumulative",
		}},
		{"spans only", push(map[string]any{"endpoint": "http://tempo.monitoring:4318", "traces": true, "metrics": false}), map[string]string{
			"OTEL_EXPORTER_OTLP_ENDPOINT": "http://tempo.monitoring:4318",
			"OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf",
		}},
		{"env wins", map[string]any{
			"otlp": map[string]any{"endpoint": "http://prometheus.monitoring:9090/api/v1/otlp"},
			"env":  map[string]any{"ITLPROXY_SESSION_HEADER": "X-Session-Id", "OTEL_METRIC_EXPORT_INTERVAL": 10000, "OTEL_SERVICE_NAME": "llm-proxy"},
		}, map[string]string{
			"OTEL_METRICS_EXPORTER":                             "prometheus,otlp",
			"OTEL_EXPORTER_OTLP_METRICS_ENDPOINT":               "http://prometheus.monitoring:9090/api/v1/otlp/v1/metrics",
			"OTEL_EXPORTER_OTLP_METRICS_PROTOCOL":               "http/protobuf",
			"OTEL_METRIC_EXPORT_INTERVAL":                       "10000",
			"OTEL_METRIC_EXPORT_TIMEOUT":                        "30000",
			"OTEL_EXPORTER_OTLP_METRICS_TEMPORALITY_PREFERENCE": "cumulative",
			"OTEL_SERVICE_NAME":                                 "llm-proxy",
		}},
	} {
		for _, mode := range []map[string]any{nil, gatewayValues()} {
			vals := maps.Clone(tc.vals)
			if vals == nil {
				vals = map[string]any{}
			}
			maps.Copy(vals, mode)
			t.Run(tc.name+" "+cmpOr(mode["mode"], "sidecar"), func(t *testing.T) {
				r, files := mustRenderChart(t, vals, map[string]string{"model-server.yaml": modelServer})
				_, pushes := tc.want["OTEL_METRICS_EXPORTER"]
				if said := strings.Contains(files["NOTES.txt"], "pushes every metric over OTLP"); said != pushes {
					t.Errorf("the notes say the metrics are pushed: %v, want %v:\n%s", said, pushes, files["NOTES.txt"])
				}
				var c *corev1.Container
				for _, d := range r.deployments {
					for i := range d.Spec.Template.Spec.InitContainers {
						if d.Spec.Template.Spec.InitContainers[i].Name == "itlproxy" {
							c = &d.Spec.Template.Spec.InitContainers[i]
						}
					}
					for i := range d.Spec.Template.Spec.Containers {
						if d.Spec.Template.Spec.Containers[i].Name == "itlproxy" {
							c = &d.Spec.Template.Spec.Containers[i]
						}
					}
				}
				if c == nil {
					t.Fatal("no itlproxy container")
				}
				env := effectiveEnv(t, r, *c)
				checkOTLP(t, env)
				if got := otelEnv(env); !maps.Equal(got, tc.want) {
					t.Errorf("OTEL_* variables %v, want %v", got, tc.want)
				}
			})
		}
	}
}

// cmpOr is v as a string, or def when v is nil.
func cmpOr(v any, def string) string {
	if s, ok := v.(string); ok {
		return s
	}
	return def
}

// TestChartRejectsOTLP: a bad otlp value fails the install, naming it.
func TestChartRejectsOTLP(t *testing.T) {
	for _, tc := range []struct {
		name string
		otlp map[string]any
		want string
	}{
		{"no scheme", map[string]any{"endpoint": "otel-collector:4318"}, "at '/otlp/endpoint': 'otel-collector:4318' does not match pattern"},
		{"unknown protocol", map[string]any{"protocol": "http/json"}, "at '/otlp/protocol': value must be one of 'http/protobuf', 'grpc'"},
		{"unknown temporality", map[string]any{"temporality": "monotonic"}, "at '/otlp/temporality': value must be one of 'cumulative', 'delta', 'lowmemory'"},
		{"an interval in seconds", map[string]any{"interval": "60s"}, "at '/otlp/interval': got string, want integer"},
		{"no interval", map[string]any{"interval": 0}, "at '/otlp/interval': minimum: got 0, want 1"},
		{"nothing to push", map[string]any{"endpoint": "http://c:4318", "metrics": false}, "otlp.endpoint is set, and otlp.metrics and otlp.traces are both false"},
		{"misspelt key", map[string]any{"temporalty": "delta"}, "at '/otlp': additional properties 'temporalty' not allowed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := renderChart(map[string]any{"otlp": tc.otlp}, nil)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("otlp %v: error %v, want one containing %q", tc.otlp, err, tc.want)
			}
		})
	}
}
