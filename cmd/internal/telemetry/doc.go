// Package telemetry exports what itlproxy measures over OpenTelemetry's
// protocol (OTLP), configured by the SDK's standard OTEL_* variables
// (Config): one span per request, through a batch queue that is bounded
// and counts what it drops, so that a slow or absent collector never
// delays the data path.
package telemetry
