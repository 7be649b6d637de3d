package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"sync"
	"testing"
	"time"

	collectormetrics "go.opentelemetry.io/proto/otlp/collector/metrics/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	metricspb "go.opentelemetry.io/proto/otlp/metrics/v1"
	"google.golang.org/protobuf/proto"
)

// metricReceiver receives OTLP metric exports in-process, over
// HTTP/protobuf (ServeHTTP) or gRPC (Export), decoding them as a collector
// does, and keeps every export.
type metricReceiver struct {
	collectormetrics.UnimplementedMetricsServiceServer
	mu      sync.Mutex
	exports []*collectormetrics.ExportMetricsServiceRequest
}

func (rc *metricReceiver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path != "/v1/metrics" || r.Header.Get("Content-Type") != "application/x-protobuf" {
		http.Error(w, "not an OTLP/HTTP protobuf metric export", http.StatusBadRequest)
		return
	}
	body, _ := io.ReadAll(r.Body)
	var req collectormetrics.ExportMetricsServiceRequest
	if err := proto.Unmarshal(body, &req); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	_, _ = rc.Export(r.Context(), &req)
	b, _ := proto.Marshal(&collectormetrics.ExportMetricsServiceResponse{})
	w.Header().Set("Content-Type", "application/x-protobuf")
	_, _ = w.Write(b)
}

func (rc *metricReceiver) Export(_ context.Context, req *collectormetrics.ExportMetricsServiceRequest) (*collectormetrics.ExportMetricsServiceResponse, error) {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	rc.exports = append(rc.exports, req)
	return &collectormetrics.ExportMetricsServiceResponse{}, nil
}

// count is the number of exports received.
func (rc *metricReceiver) count() int {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return len(rc.exports)
}

// pushed is one export as a test reads it: its resource's attributes, and
// each metric by name with its scope.
type pushed struct {
	resource map[string]string
	metrics  map[string]*metricspb.Metric
	scopes   map[string]*commonpb.InstrumentationScope
	schemas  map[string]string // the scope's schema URL, by metric
}

// read returns export i (from the end when negative).
func (rc *metricReceiver) read(i int) pushed {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	if i < 0 {
		i += len(rc.exports)
	}
	p := pushed{metrics: map[string]*metricspb.Metric{}, scopes: map[string]*commonpb.InstrumentationScope{}, schemas: map[string]string{}}
	for _, rm := range rc.exports[i].ResourceMetrics {
		p.resource = attrMap(rm.Resource.Attributes)
		for _, sm := range rm.ScopeMetrics {
			for _, m := range sm.Metrics {
				p.metrics[m.Name] = m
				p.scopes[m.Name] = sm.Scope
				p.schemas[m.Name] = sm.SchemaUrl
			}
		}
	}
	return p
}

// waitPush waits for an export for which ok holds, and returns it.
func (rc *metricReceiver) waitPush(t *testing.T, what string, limit time.Duration, ok func(pushed) bool) pushed {
	t.Helper()
	var got pushed
	waitFor(t, what, limit, func() bool {
		if rc.count() == 0 {
			return false
		}
		got = rc.read(-1)
		return ok(got)
	})
	return got
}

// expPoint returns the exponential histogram point of m whose attributes
// include want, nil if none.
func expPoint(m *metricspb.Metric, want map[string]string) *metricspb.ExponentialHistogramDataPoint {
	for _, p := range m.GetExponentialHistogram().GetDataPoints() {
		if includes(attrMap(p.Attributes), want) {
			return p
		}
	}
	return nil
}

// sumPoint returns the sum point of m whose attributes include want.
func sumPoint(m *metricspb.Metric, want map[string]string) *metricspb.NumberDataPoint {
	for _, p := range m.GetSum().GetDataPoints() {
		if includes(attrMap(p.Attributes), want) {
			return p
		}
	}
	return nil
}

// includes reports whether every pair of want is in got.
func includes(got, want map[string]string) bool {
	for k, v := range want {
		if got[k] != v {
			return false
		}
	}
	return true
}

// waitEnded waits until /metrics counts n requests of model, each counted
// when its exchange has ended, after its stream's figures: a client that
// has read a stream to its end can return before its proxy counts it.
func waitEnded(t *testing.T, in *instance, model string, n int) {
	t.Helper()
	waitFor(t, fmt.Sprintf("/metrics to count %d requests of %s", n, model), 10*time.Second, func() bool {
		total := 0.0
		for _, s := range in.scrape().Series("itlproxy_requests_total", "model", model) {
			total += s.GetCounter().GetValue()
		}
		return total == float64(n)
	})
}
