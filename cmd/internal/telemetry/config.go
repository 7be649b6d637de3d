package telemetry

import (
	"errors"
	"net/url"
	"strconv"
	"strings"

	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

// Config is the OpenTelemetry SDK's standard variables that itlproxy
// reads. Each field's help tag is what `itlproxy -h` prints for it.
type Config struct {
	OTLPEndpoint         string  `env:"OTEL_EXPORTER_OTLP_ENDPOINT" help:"OpenTelemetry collector's base URL (e.g. http://otel-collector:4318, or :4317 over grpc): one span per request is exported there with OTLP, and the metrics when OTEL_METRICS_EXPORTER says otlp. Unset (with OTEL_EXPORTER_OTLP_TRACES_ENDPOINT): no tracing."`
	OTLPTracesEndpoint   string  `env:"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT" help:"Full URL spans are exported to (e.g. http://tempo:4318/v1/traces), over OTEL_EXPORTER_OTLP_ENDPOINT."`
	OTLPProtocol         string  `env:"OTEL_EXPORTER_OTLP_PROTOCOL" envDefault:"http/protobuf" help:"OTLP transport: http/protobuf or grpc."`
	OTLPTracesProtocol   string  `env:"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL" help:"OTLP transport of spans, over OTEL_EXPORTER_OTLP_PROTOCOL."`
	OTELServiceName      string  `env:"OTEL_SERVICE_NAME" envDefault:"itlproxy" help:"service.name of the resource of the spans and the pushed metrics."`
	OTELResourceAttrs    string  `env:"OTEL_RESOURCE_ATTRIBUTES" help:"More resource attributes of the spans and the pushed metrics, key=value pairs separated by commas (values percent-encoded), e.g. deployment.environment.name=prod,service.instance.id=pod-1 (unset, service.instance.id is a random UUID made at start)."`
	OTELTracesSampler    string  `env:"OTEL_TRACES_SAMPLER" envDefault:"parentbased_always_on" help:"always_on, always_off, traceidratio, parentbased_always_on, parentbased_always_off or parentbased_traceidratio."`
	OTELTracesSamplerArg float64 `env:"OTEL_TRACES_SAMPLER_ARG" envDefault:"1" help:"The ratio of traces the traceidratio samplers keep, 0 to 1."`
	OTELBSPMaxQueueSize  int     `env:"OTEL_BSP_MAX_QUEUE_SIZE" envDefault:"2048" help:"Ended spans waiting for export; past it spans are dropped (itlproxy_trace_spans_dropped_total), never waited for."`

	OTELMetricsExporter      string `env:"OTEL_METRICS_EXPORTER" envDefault:"prometheus" help:"prometheus: metrics on /metrics only; otlp (or prometheus,otlp): also pushed over OTLP, every family and the GenAI conventions' names, see docs/otlp.md; none: nothing pushed. /metrics is served whatever this says."`
	OTLPMetricsEndpoint      string `env:"OTEL_EXPORTER_OTLP_METRICS_ENDPOINT" help:"Full URL metrics are pushed to (e.g. http://otel-collector:4318/v1/metrics, or Prometheus' http://prometheus:9090/api/v1/otlp/v1/metrics), over OTEL_EXPORTER_OTLP_ENDPOINT, to which http/protobuf appends /v1/metrics."`
	OTLPMetricsProtocol      string `env:"OTEL_EXPORTER_OTLP_METRICS_PROTOCOL" help:"OTLP transport of metrics, over OTEL_EXPORTER_OTLP_PROTOCOL."`
	OTELMetricExportInterval int    `env:"OTEL_METRIC_EXPORT_INTERVAL" envDefault:"60000" help:"Milliseconds from one push of the metrics over OTLP to the next."`
	OTELMetricExportTimeout  int    `env:"OTEL_METRIC_EXPORT_TIMEOUT" envDefault:"30000" help:"Milliseconds a push may take; past it, or refused, it is dropped and counted (itlproxy_otlp_metric_exports_failed_total), never waited for by the proxy."`
	OTLPMetricsTemporality   string `env:"OTEL_EXPORTER_OTLP_METRICS_TEMPORALITY_PREFERENCE" envDefault:"cumulative" help:"cumulative (totals since start: what Prometheus takes), delta (counters and histograms as what changed since the last push) or lowmemory (histograms as changes, counters as totals)."`
}

// URLVariables are the variables whose values are URLs, which may hold
// credentials: a problem shows them redacted.
var URLVariables = []string{"OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT"}

// OTLP transports, as OTEL_EXPORTER_OTLP_PROTOCOL names them.
const (
	protocolHTTP = "http/protobuf"
	protocolGRPC = "grpc"
)

// TracesEndpoint is where spans go ("" when tracing is off) and over
// which protocol: the traces endpoint as it is, else the base endpoint
// with the OTLP/HTTP path for spans appended (gRPC takes it as it is).
func (c Config) TracesEndpoint() (endpoint, protocol string) {
	protocol = c.OTLPProtocol
	if c.OTLPTracesProtocol != "" {
		protocol = c.OTLPTracesProtocol
	}
	switch {
	case c.OTLPTracesEndpoint != "":
		return c.OTLPTracesEndpoint, protocol
	case c.OTLPEndpoint == "":
		return "", protocol
	case protocol == protocolHTTP:
		return strings.TrimSuffix(c.OTLPEndpoint, "/") + "/v1/traces", protocol
	}
	return c.OTLPEndpoint, protocol
}

// Validate checks the OpenTelemetry variables, and calls add with each
// problem: the variable, its value (the caller redacts URLs) and why.
func (c Config) Validate(add func(key, value, why string)) {
	for _, p := range []struct{ key, value string }{
		{"OTEL_EXPORTER_OTLP_PROTOCOL", c.OTLPProtocol},
		{"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", c.OTLPTracesProtocol},
		{"OTEL_EXPORTER_OTLP_METRICS_PROTOCOL", c.OTLPMetricsProtocol},
	} {
		if p.value != "" && p.value != protocolHTTP && p.value != protocolGRPC {
			add(p.key, p.value, "must be http/protobuf or grpc")
		}
	}
	for _, e := range []struct{ key, value string }{
		{"OTEL_EXPORTER_OTLP_ENDPOINT", c.OTLPEndpoint},
		{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", c.OTLPTracesEndpoint},
		{"OTEL_EXPORTER_OTLP_METRICS_ENDPOINT", c.OTLPMetricsEndpoint},
	} {
		if u, err := url.Parse(e.value); e.value != "" && (err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "") {
			add(e.key, e.value, "not an http or https URL (e.g. http://otel-collector:4318)")
		}
	}
	if _, err := resourceAttributes(c.OTELResourceAttrs); err != nil {
		add("OTEL_RESOURCE_ATTRIBUTES", c.OTELResourceAttrs, err.Error())
	}
	if sampler(c.OTELTracesSampler, c.OTELTracesSamplerArg) == nil {
		add("OTEL_TRACES_SAMPLER", c.OTELTracesSampler, "not a sampler itlproxy knows (always_on, always_off, traceidratio, parentbased_always_on, parentbased_always_off, parentbased_traceidratio)")
	}
	if !(c.OTELTracesSamplerArg >= 0 && c.OTELTracesSamplerArg <= 1) { // NaN too
		add("OTEL_TRACES_SAMPLER_ARG", strconv.FormatFloat(c.OTELTracesSamplerArg, 'g', -1, 64), "must be between 0 and 1")
	}
	if c.OTELBSPMaxQueueSize < 1 {
		add("OTEL_BSP_MAX_QUEUE_SIZE", strconv.Itoa(c.OTELBSPMaxQueueSize), "must be at least 1")
	}
	c.validateMetrics(add)
}

// sampler returns the sampler OTEL_TRACES_SAMPLER names, nil for one
// itlproxy does not know.
func sampler(name string, ratio float64) sdktrace.Sampler {
	switch name {
	case "always_on":
		return sdktrace.AlwaysSample()
	case "always_off":
		return sdktrace.NeverSample()
	case "traceidratio":
		return sdktrace.TraceIDRatioBased(ratio)
	case "parentbased_always_on":
		return sdktrace.ParentBased(sdktrace.AlwaysSample())
	case "parentbased_always_off":
		return sdktrace.ParentBased(sdktrace.NeverSample())
	case "parentbased_traceidratio":
		return sdktrace.ParentBased(sdktrace.TraceIDRatioBased(ratio))
	}
	return nil
}

var errResourceAttrs = errors.New("not key=value pairs separated by commas, values percent-encoded")

// resourceAttributes reads OTEL_RESOURCE_ATTRIBUTES.
func resourceAttributes(s string) ([]attribute.KeyValue, error) {
	var attrs []attribute.KeyValue
	for pair := range strings.SplitSeq(s, ",") {
		if strings.TrimSpace(pair) == "" {
			continue
		}
		k, v, ok := strings.Cut(pair, "=")
		k = strings.TrimSpace(k)
		v, err := url.PathUnescape(strings.TrimSpace(v))
		if !ok || k == "" || err != nil {
			return nil, errResourceAttrs
		}
		attrs = append(attrs, attribute.String(k, v))
	}
	return attrs, nil
}
