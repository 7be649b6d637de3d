package main

import (
	"context"
	"net/http/httptest"
	"testing"

	"go.opentelemetry.io/otel/exporters/otlp/otlpmetric/otlpmetrichttp"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
)

// The sink takes what OpenTelemetry's own OTLP/HTTP exporters send, and
// answers so that the exporter counts the export a success; a path it
// does not serve fails the export.
func TestOTLPSinkTakesRealExports(t *testing.T) {
	sink := &otlpSink{}
	srv := httptest.NewServer(sink)
	defer srv.Close()
	ctx := context.Background()
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	for range 3 {
		_, span := tp.Tracer("test").Start(ctx, "span")
		span.End()
	}
	export := func(path string) error {
		exp, err := otlptracehttp.New(ctx, otlptracehttp.WithEndpointURL(srv.URL+path),
			otlptracehttp.WithRetry(otlptracehttp.RetryConfig{Enabled: false}))
		if err != nil {
			t.Fatal(err)
		}
		defer exp.Shutdown(ctx)
		return exp.ExportSpans(ctx, rec.Ended())
	}
	if err := export("/v1/traces"); err != nil {
		t.Fatalf("export to the sink: %v", err)
	}
	if err := export("/v1/logs"); err == nil {
		t.Fatal("export to a path the sink does not serve succeeded")
	}
	if got := sink.exports.Load(); got != 1 {
		t.Errorf("exports = %d, want 1", got)
	}
	before := sink.bytes.Load()

	// Metrics, as itlproxy pushes them.
	reader := sdkmetric.NewManualReader()
	counter, err := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)).Meter("test").Int64Counter("events")
	if err != nil {
		t.Fatal(err)
	}
	counter.Add(ctx, 3)
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(ctx, &rm); err != nil {
		t.Fatal(err)
	}
	mexp, err := otlpmetrichttp.New(ctx, otlpmetrichttp.WithEndpointURL(srv.URL+"/v1/metrics"),
		otlpmetrichttp.WithRetry(otlpmetrichttp.RetryConfig{Enabled: false}))
	if err != nil {
		t.Fatal(err)
	}
	defer mexp.Shutdown(ctx)
	if err := mexp.Export(ctx, &rm); err != nil {
		t.Fatalf("metrics export to the sink: %v", err)
	}
	if got := sink.exports.Load(); got != 2 || sink.bytes.Load() == before {
		t.Errorf("exports = %d, bytes %d then %d: want the metrics export counted", got, before, sink.bytes.Load())
	}
	if sink.bytes.Load() < 3*8 {
		t.Errorf("bytes = %d: too few for three spans", sink.bytes.Load())
	}
}
