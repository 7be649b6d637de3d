// Package telemetry exports what itlproxy measures over OpenTelemetry's
// protocol (OTLP), configured by the SDK's standard OTEL_* variables
// (Config): one span per request, through a batch queue that is bounded
// and counts what it drops; and, when OTEL_METRICS_EXPORTER asks for it,
// every family of the Prometheus registry /metrics serves, read at each
// push, with the GenAI semantic conventions' metrics derived from them.
// Neither ever delays the data path: a slow or absent collector costs
// dropped, counted exports.
package telemetry
