package telemetry

import "testing"

// TestMetricsEndpoint: where metrics go, and how, from the standard
// variables.
func TestMetricsEndpoint(t *testing.T) {
	for _, tc := range []struct {
		name               string
		cfg                Config
		endpoint, protocol string
	}{
		{"off by default", Config{OTELMetricsExporter: "prometheus", OTLPEndpoint: "http://c:4318", OTLPProtocol: "http/protobuf"}, "", "http/protobuf"},
		{"none", Config{OTELMetricsExporter: "none", OTLPEndpoint: "http://c:4318", OTLPProtocol: "http/protobuf"}, "", "http/protobuf"},
		{"base URL, HTTP", Config{OTELMetricsExporter: "otlp", OTLPEndpoint: "http://c:4318/", OTLPProtocol: "http/protobuf"}, "http://c:4318/v1/metrics", "http/protobuf"},
		{"Prometheus' receiver", Config{OTELMetricsExporter: "Prometheus, OTLP", OTLPEndpoint: "http://p:9090/api/v1/otlp", OTLPProtocol: "http/protobuf"}, "http://p:9090/api/v1/otlp/v1/metrics", "http/protobuf"},
		{"base URL, gRPC", Config{OTELMetricsExporter: "otlp", OTLPEndpoint: "http://c:4317", OTLPProtocol: "grpc"}, "http://c:4317", "grpc"},
		{"metrics URL as it is", Config{OTELMetricsExporter: "otlp", OTLPEndpoint: "http://c:4318", OTLPMetricsEndpoint: "http://m:4318/x", OTLPProtocol: "http/protobuf"}, "http://m:4318/x", "http/protobuf"},
		{"metrics protocol first", Config{OTELMetricsExporter: "otlp", OTLPEndpoint: "http://c:4317", OTLPProtocol: "http/protobuf", OTLPMetricsProtocol: "grpc"}, "http://c:4317", "grpc"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if endpoint, protocol := tc.cfg.MetricsEndpoint(); endpoint != tc.endpoint || protocol != tc.protocol {
				t.Errorf("got %q over %q, want %q over %q", endpoint, protocol, tc.endpoint, tc.protocol)
			}
		})
	}
}
