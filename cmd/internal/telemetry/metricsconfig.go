package telemetry

import (
	"slices"
	"strconv"
	"strings"
	"time"
)

// The values of OTEL_METRICS_EXPORTER itlproxy knows.
const (
	exporterPrometheus = "prometheus"
	exporterOTLP       = "otlp"
	exporterNone       = "none"
)

// Temporality is how pushed counters and histograms count, as
// OTEL_EXPORTER_OTLP_METRICS_TEMPORALITY_PREFERENCE names it.
type Temporality string

// The temporalities of the OpenTelemetry specification. Gauges are
// gauges, and summaries totals, in each.
const (
	// Cumulative: every counter and histogram as its total since its
	// start, which Prometheus' OTLP receiver takes.
	Cumulative Temporality = "cumulative"
	// Delta: every counter and histogram as what it counted since the
	// previous push.
	Delta Temporality = "delta"
	// LowMemory: histograms as deltas, counters as totals. The
	// specification keeps asynchronous counters cumulative under it, and
	// every counter itlproxy pushes is read as an asynchronous counter
	// is: its total, at push time, from the registry.
	LowMemory Temporality = "lowmemory"
)

// MetricsEndpoint is where metrics are pushed over OTLP ("" when they
// are not) and over which protocol: the metrics endpoint as it is, else
// the base endpoint with the OTLP/HTTP path for metrics appended (gRPC
// takes it as it is).
func (c Config) MetricsEndpoint() (endpoint, protocol string) {
	protocol = c.OTLPProtocol
	if c.OTLPMetricsProtocol != "" {
		protocol = c.OTLPMetricsProtocol
	}
	exporters, _ := metricsExporters(c.OTELMetricsExporter)
	switch {
	case !slices.Contains(exporters, exporterOTLP):
		return "", protocol
	case c.OTLPMetricsEndpoint != "":
		return c.OTLPMetricsEndpoint, protocol
	case c.OTLPEndpoint == "":
		return "", protocol
	case protocol == protocolHTTP:
		return strings.TrimSuffix(c.OTLPEndpoint, "/") + "/v1/metrics", protocol
	}
	return c.OTLPEndpoint, protocol
}

// Temporality is the temporality the pushed metrics take.
func (c Config) Temporality() Temporality {
	return Temporality(strings.ToLower(strings.TrimSpace(c.OTLPMetricsTemporality)))
}

// MetricExportInterval is the time from one push to the next.
func (c Config) MetricExportInterval() time.Duration {
	return time.Duration(c.OTELMetricExportInterval) * time.Millisecond
}

// MetricExportTimeout bounds each push.
func (c Config) MetricExportTimeout() time.Duration {
	return time.Duration(c.OTELMetricExportTimeout) * time.Millisecond
}

// metricsExporters reads OTEL_METRICS_EXPORTER: its values, and whether
// they are ones itlproxy knows, none alone. Values are case-insensitive,
// as the specification asks of enumerations, and an empty value is the
// default.
func metricsExporters(s string) ([]string, bool) {
	if strings.TrimSpace(s) == "" {
		return []string{exporterPrometheus}, true
	}
	var out []string
	for v := range strings.SplitSeq(s, ",") {
		v = strings.ToLower(strings.TrimSpace(v))
		switch v {
		case exporterPrometheus, exporterOTLP:
		case exporterNone:
			if strings.Contains(s, ",") {
				return nil, false
			}
		default:
			return nil, false
		}
		out = append(out, v)
	}
	return out, true
}

// validateMetrics checks the variables of the metrics' push.
func (c Config) validateMetrics(add func(key, value, why string)) {
	exporters, ok := metricsExporters(c.OTELMetricsExporter)
	switch {
	case !ok:
		add("OTEL_METRICS_EXPORTER", c.OTELMetricsExporter, "must be prometheus, otlp, both (prometheus,otlp) or none")
	case slices.Contains(exporters, exporterOTLP) && c.OTLPMetricsEndpoint == "" && c.OTLPEndpoint == "":
		add("OTEL_METRICS_EXPORTER", c.OTELMetricsExporter,
			"pushing metrics over OTLP needs OTEL_EXPORTER_OTLP_METRICS_ENDPOINT or OTEL_EXPORTER_OTLP_ENDPOINT (e.g. http://otel-collector:4318)")
	}
	for _, ms := range []struct {
		key string
		n   int
	}{
		{"OTEL_METRIC_EXPORT_INTERVAL", c.OTELMetricExportInterval},
		{"OTEL_METRIC_EXPORT_TIMEOUT", c.OTELMetricExportTimeout},
	} {
		if ms.n < 1 {
			add(ms.key, strconv.Itoa(ms.n), "must be at least 1 (milliseconds)")
		}
	}
	switch c.Temporality() {
	case Cumulative, Delta, LowMemory:
	default:
		add("OTEL_EXPORTER_OTLP_METRICS_TEMPORALITY_PREFERENCE", c.OTLPMetricsTemporality, "must be cumulative, delta or lowmemory")
	}
}
