package telemetry

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/zap"
)

// Tracing is the tracer provider and what the proxy needs of it; a zero
// Tracing is off.
type Tracing struct {
	// Tracer starts the requests' spans; nil when tracing is off.
	Tracer   trace.Tracer
	provider *sdktrace.TracerProvider
}

// StartTracing sets up the export of spans when an endpoint is set: a
// batch processor whose queue is bounded, so that ending a span never
// waits for the collector, with every span it drops counted on reg.
// version is the service.version of the spans' resource.
func StartTracing(cfg Config, version string, reg prometheus.Registerer, log *zap.Logger) (Tracing, error) {
	endpoint, protocol := cfg.TracesEndpoint()
	if endpoint == "" {
		return Tracing{}, nil
	}
	var exp sdktrace.SpanExporter
	var err error
	if protocol == protocolGRPC {
		exp, err = otlptracegrpc.New(context.Background(), otlptracegrpc.WithEndpointURL(endpoint))
	} else {
		exp, err = otlptracehttp.New(context.Background(), otlptracehttp.WithEndpointURL(endpoint))
	}
	if err != nil {
		return Tracing{}, err
	}
	res, err := newResource(cfg, version)
	if err != nil {
		return Tracing{}, err
	}
	dropped := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "itlproxy_trace_spans_dropped_total",
		Help: "Spans not exported, counted when dropped, by reason (exported only with tracing on).",
	}, []string{"reason"})
	if err := reg.Register(dropped); err != nil {
		return Tracing{}, err
	}
	bound := &boundedQueue{max: int64(cfg.OTELBSPMaxQueueSize), queueFull: dropped.WithLabelValues("queue_full")}
	counted := &countedExporter{SpanExporter: exp, q: bound, failed: dropped.WithLabelValues("export_failed")}
	// The batch processor's own queue is as large as the bound, which it
	// therefore never reaches: every drop is the bound's, and counted.
	bound.SpanProcessor = sdktrace.NewBatchSpanProcessor(counted, sdktrace.WithMaxQueueSize(cfg.OTELBSPMaxQueueSize))
	handleErrors(log)
	tp := sdktrace.NewTracerProvider(
		sdktrace.WithSpanProcessor(bound),
		sdktrace.WithResource(res),
		sdktrace.WithSampler(sampler(cfg.OTELTracesSampler, cfg.OTELTracesSamplerArg)),
	)
	return Tracing{Tracer: tp.Tracer("github.com/itlproxy/itlproxy/proxy"), provider: tp}, nil
}

// SpanFlushTimeout bounds the export of the spans still queued at
// shutdown: it comes after the streams' own ITLPROXY_SHUTDOWN_TIMEOUT, and
// the pod's grace period must cover both.
const SpanFlushTimeout = 5 * time.Second

// Shutdown exports the spans still queued, waiting at most timeout.
func (t Tracing) Shutdown(timeout time.Duration, log *zap.Logger) {
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
