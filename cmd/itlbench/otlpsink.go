package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync/atomic"
	"time"
)

const otlpSinkUsageHead = `itlbench otlpsink accepts OpenTelemetry traces and metrics over OTLP/HTTP
(POST /v1/traces and /v1/metrics, protobuf or JSON) and throws them away,
answering each export as a collector that took it whole: the end of the
line for a benchmark of itlproxy with tracing or the metrics' push on, so
that what is measured is the proxy's cost of making and exporting them,
not a collector's. When interrupted it prints
how many exports and bytes it took. It serves until interrupted.

usage:
  itlbench otlpsink [flags]

`

const otlpSinkUsageTail = `
Example:
  itlbench otlpsink -addr 127.0.0.1:4318 &
  OTEL_EXPORTER_OTLP_ENDPOINT=http://127.0.0.1:4318 itlproxy
`

// otlpSink counts what it is sent.
type otlpSink struct {
	exports, bytes atomic.Int64
}

func (s *otlpSink) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost || r.URL.Path != "/v1/traces" && r.URL.Path != "/v1/metrics" {
		http.Error(w, "itlbench otlpsink takes POST /v1/traces and /v1/metrics only", http.StatusNotFound)
		return
	}
	n, err := io.Copy(io.Discard, r.Body)
	if err != nil {
		http.Error(w, "itlbench otlpsink: reading the export: "+err.Error(), http.StatusBadRequest)
		return
	}
	s.exports.Add(1)
	s.bytes.Add(n)
	// An empty ExportTraceServiceResponse or ExportMetricsServiceResponse:
	// everything accepted (no partial_success), the same in protobuf and
	// JSON.
	ct := r.Header.Get("Content-Type")
	if ct != "application/json" {
		ct = "application/x-protobuf"
	}
	w.Header().Set("Content-Type", ct)
	if ct == "application/json" {
		io.WriteString(w, "{}")
	}
}

// runOTLPSink serves the sink until ctx is canceled.
func runOTLPSink(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("itlbench otlpsink", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	addr := fs.String("addr", "127.0.0.1:4318", "listen `address`")
	if help, err := parseFlags(fs, args, stdout, otlpSinkUsageHead, otlpSinkUsageTail); help || err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return &usageError{fmt.Errorf("unexpected argument %q", fs.Arg(0))}
	}
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		return err
	}
	sink := &otlpSink{}
	fmt.Fprintf(stderr, "itlbench otlpsink: serving http://%s/v1/traces and /v1/metrics\n", ln.Addr())
	err = serveUntil(ctx, &http.Server{Handler: sink, ReadHeaderTimeout: 10 * time.Second}, ln)
	fmt.Fprintf(stdout, "itlbench otlpsink: %d exports, %d bytes\n", sink.exports.Load(), sink.bytes.Load())
	return err
}
