package telemetry

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/exporters/otlp/otlpmetric/otlpmetricgrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlpmetric/otlpmetrichttp"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.uber.org/zap"

	"github.com/itlproxy/itlproxy/cmd/internal/envconfig"
)

// Metrics is the push of the registry's metrics over OTLP; a zero Metrics
// is off.
type Metrics struct {
	provider *sdkmetric.MeterProvider
	timeout  time.Duration // OTEL_METRIC_EXPORT_TIMEOUT
}

// MetricsOptions is what StartMetrics needs besides the configuration.
type MetricsOptions struct {
	// Gatherer is the registry /metrics serves, read at each push.
	Gatherer prometheus.Gatherer
	// GenAISource gathers the families the GenAI metrics are derived from
	// (metrics.Metrics.GenAIGatherer); nil: none are.
	GenAISource prometheus.Gatherer
	// Registerer takes the count of failed pushes.
	Registerer prometheus.Registerer
	// Version is service.version of the resource, and the GenAI scope's.
	Version string
	// GenAI is what the GenAI metrics say of the upstream.
	GenAI GenAI
	Log   *zap.Logger
}

// StartMetrics starts pushing every family of the registry, and the GenAI
// conventions' metrics derived from them, over OTLP every
// OTEL_METRIC_EXPORT_INTERVAL, when OTEL_METRICS_EXPORTER asks for it. A
// push reads the registry on a goroutine of its own and is bounded by
// OTEL_METRIC_EXPORT_TIMEOUT; one that fails is dropped and counted
// (itlproxy_otlp_metric_exports_failed_total), and logged once per outage.
func StartMetrics(cfg Config, opts MetricsOptions) (Metrics, error) {
	endpoint, protocol := cfg.MetricsEndpoint()
	if endpoint == "" {
		return Metrics{}, nil
	}
	failed := prometheus.NewCounter(prometheus.CounterOpts{
		Name: "itlproxy_otlp_metric_exports_failed_total",
		Help: "OTLP metric exports that failed: refused in whole or in part, past OTEL_METRIC_EXPORT_TIMEOUT, or without the families the registry failed to gather (exported only when pushing over OTLP).",
	})
	if err := opts.Registerer.Register(failed); err != nil {
		return Metrics{}, err
	}
	res, err := newResource(cfg, opts.Version)
	if err != nil {
		return Metrics{}, err
	}
	// The exporter's own timeout per attempt is the push's bound: the
	// reader's deadline cuts retries there too.
	timeout := cfg.MetricExportTimeout()
	var exp sdkmetric.Exporter
	if protocol == protocolGRPC {
		exp, err = otlpmetricgrpc.New(context.Background(), otlpmetricgrpc.WithEndpointURL(endpoint), otlpmetricgrpc.WithTimeout(timeout))
	} else {
		exp, err = otlpmetrichttp.New(context.Background(), otlpmetrichttp.WithEndpointURL(endpoint), otlpmetrichttp.WithTimeout(timeout))
	}
	if err != nil {
		return Metrics{}, err
	}
	handleErrors(opts.Log)
	producer := newRegistryProducer(opts.Gatherer, opts.GenAISource, cfg.Temporality(), opts.GenAI, opts.Version)
	reader := sdkmetric.NewPeriodicReader(
		&countedMetricExporter{Exporter: exp, failed: failed, log: opts.Log, endpoint: envconfig.ShowURL(endpoint), gathered: producer.failed},
		sdkmetric.WithInterval(cfg.MetricExportInterval()),
		sdkmetric.WithTimeout(timeout),
		sdkmetric.WithProducer(producer))
	return Metrics{provider: sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader), sdkmetric.WithResource(res)), timeout: timeout}, nil
}

// MetricFlushTimeout bounds the last push at shutdown (as does
// OTEL_METRIC_EXPORT_TIMEOUT, when shorter), after the streams'
// ITLPROXY_SHUTDOWN_TIMEOUT, beside SpanFlushTimeout: the pod's grace
// period must cover it.
const MetricFlushTimeout = 5 * time.Second

// Shutdown pushes the metrics a last time, waiting at most timeout or the
// export timeout, whichever is shorter (the exporter retries a refused
// push until its deadline), and stops the push.
func (m Metrics) Shutdown(timeout time.Duration) {
	if m.provider == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), min(timeout, m.timeout))
	defer cancel()
	// A failed last push is counted and logged by countedMetricExporter.
	_ = m.provider.Shutdown(ctx)
}
