package main

import (
	"context"
	"errors"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/zap"
)

// OTLP transports, as OTEL_EXPORTER_OTLP_PROTOCOL names them.
const (
	protocolHTTP = "http/protobuf"
	protocolGRPC = "grpc"
)

// tracesEndpoint is where spans go ("" when tracing is off) and over
// which protocol: the traces endpoint as it is, else the base endpoint
// with the OTLP/HTTP path for spans appended (gRPC takes it as it is).
func (c config) tracesEndpoint() (endpoint, protocol string) {
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

// validateTracing checks the OpenTelemetry variables.
func (c config) validateTracing(add func(key, value, why string)) {
	for _, p := range []struct{ key, value string }{
		{"OTEL_EXPORTER_OTLP_PROTOCOL", c.OTLPProtocol},
		{"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", c.OTLPTracesProtocol},
	} {
		if p.value != "" && p.value != protocolHTTP && p.value != protocolGRPC {
			add(p.key, p.value, "must be http/protobuf or grpc")
		}
	}
	for _, e := range []struct{ key, value string }{
		{"OTEL_EXPORTER_OTLP_ENDPOINT", c.OTLPEndpoint},
		{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", c.OTLPTracesEndpoint},
	} {
		if u, err := url.Parse(e.value); e.value != "" && (err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "") {
			add(e.key, redactURL(e.value), "not an http or https URL (e.g. http://otel-collector:4318)")
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

// tracing is the tracer provider and what the proxy needs of it; a zero
// tracing is off.
type tracing struct {
	tracer   trace.Tracer // nil when off
	provider *sdktrace.TracerProvider
}

// startTracing sets up the export of spans when an endpoint is set: a
// batch processor whose queue is bounded, so that ending a span never
// waits for the collector, with every span it drops counted on reg.
func startTracing(cfg config, reg prometheus.Registerer, log *zap.Logger) (tracing, error) {
	endpoint, protocol := cfg.tracesEndpoint()
	if endpoint == "" {
		return tracing{}, nil
	}
	var exp sdktrace.SpanExporter
	var err error
	if protocol == protocolGRPC {
		exp, err = otlptracegrpc.New(context.Background(), otlptracegrpc.WithEndpointURL(endpoint))
	} else {
		exp, err = otlptracehttp.New(context.Background(), otlptracehttp.WithEndpointURL(endpoint))
	}
	if err != nil {
		return tracing{}, err
	}
	attrs, _ := resourceAttributes(cfg.OTELResourceAttrs) // validated
	attrs = append(attrs,
		attribute.String("service.name", cfg.OTELServiceName),
		attribute.String("service.version", version))
	res, err := resource.Merge(resource.Default(), resource.NewSchemaless(attrs...))
	if err != nil {
		return tracing{}, err
	}
	dropped := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "itlproxy_trace_spans_dropped_total",
		Help: "Spans not exported, counted when dropped, by reason (exported only with tracing on).",
	}, []string{"reason"})
	if err := reg.Register(dropped); err != nil {
		return tracing{}, err
	}
	bound := &boundedQueue{max: int64(cfg.OTELBSPMaxQueueSize), queueFull: dropped.WithLabelValues("queue_full")}
	counted := &countedExporter{SpanExporter: exp, q: bound, failed: dropped.WithLabelValues("export_failed")}
	// The batch processor's own queue is as large as the bound, which it
	// therefore never reaches: every drop is the bound's, and counted.
	bound.SpanProcessor = sdktrace.NewBatchSpanProcessor(counted, sdktrace.WithMaxQueueSize(cfg.OTELBSPMaxQueueSize))
	otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) {
		log.Warn("span export failed", zap.Error(err))
	}))
	tp := sdktrace.NewTracerProvider(
		sdktrace.WithSpanProcessor(bound),
		sdktrace.WithResource(res),
		sdktrace.WithSampler(sampler(cfg.OTELTracesSampler, cfg.OTELTracesSamplerArg)),
	)
	log.Info("exporting spans", zap.String("protocol", protocol), zap.String("endpoint", redactURL(endpoint)))
	return tracing{tracer: tp.Tracer("github.com/itlproxy/itlproxy/proxy"), provider: tp}, nil
}

// spanFlushTimeout bounds the export of the spans still queued at
// shutdown: it comes after the streams' own ITLPROXY_SHUTDOWN_TIMEOUT, and
// the pod's grace period must cover both.
const spanFlushTimeout = 5 * time.Second

// shutdown exports the spans still queued, waiting at most timeout.
func (t tracing) shutdown(timeout time.Duration, log *zap.Logger) {
	if t.provider == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	if err := t.provider.Shutdown(ctx); err != nil {
		log.Warn("spans still queued at shutdown were not exported", zap.Error(err))
	}
}

// boundedQueue passes sampled spans to the batch processor while fewer
// than max are waiting for export, and drops and counts the others.
type boundedQueue struct {
	sdktrace.SpanProcessor
	max       int64
	waiting   atomic.Int64 // ended, sampled spans not yet handed to the exporter
	queueFull prometheus.Counter
}

func (q *boundedQueue) OnEnd(s sdktrace.ReadOnlySpan) {
	if !s.SpanContext().IsSampled() {
		return
	}
	if q.waiting.Add(1) > q.max {
		q.waiting.Add(-1)
		q.queueFull.Inc()
		return
	}
	q.SpanProcessor.OnEnd(s)
}

// countedExporter is the exporter as the batch processor sees it: each
// batch leaves the queue's count as it is handed over, and a batch that
// fails is counted as dropped.
type countedExporter struct {
	sdktrace.SpanExporter
	q      *boundedQueue
	failed prometheus.Counter
}

func (e *countedExporter) ExportSpans(ctx context.Context, spans []sdktrace.ReadOnlySpan) error {
	e.q.waiting.Add(-int64(len(spans)))
	err := e.SpanExporter.ExportSpans(ctx, spans)
	if err != nil {
		e.failed.Add(float64(len(spans)))
	}
	return err
}
