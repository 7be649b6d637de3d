package telemetry

import (
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	collectormetrics "go.opentelemetry.io/proto/otlp/collector/metrics/v1"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
	"google.golang.org/protobuf/proto"
)

// brokenCollector is a collector whose collection fails, as a bug would
// make one: the registry gathers the others and says so.
type brokenCollector struct{ desc *prometheus.Desc }

func (b brokenCollector) Describe(ch chan<- *prometheus.Desc) { ch <- b.desc }
func (b brokenCollector) Collect(ch chan<- prometheus.Metric) {
	ch <- prometheus.NewInvalidMetric(b.desc, errors.New("a collector's bug"))
}

// pushes is an OTLP/HTTP receiver that keeps the metric names of each
// push.
type pushes struct {
	mu    sync.Mutex
	names [][]string
}

func (p *pushes) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	var req collectormetrics.ExportMetricsServiceRequest
	if err := proto.Unmarshal(body, &req); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	var names []string
	for _, rm := range req.ResourceMetrics {
		for _, sm := range rm.ScopeMetrics {
			for _, m := range sm.Metrics {
				names = append(names, m.Name)
			}
		}
	}
	p.mu.Lock()
	p.names = append(p.names, names)
	p.mu.Unlock()
	b, _ := proto.Marshal(&collectormetrics.ExportMetricsServiceResponse{})
	w.Header().Set("Content-Type", "application/x-protobuf")
	_, _ = w.Write(b)
}

func (p *pushes) received() [][]string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.names)
}

// TestGatherFailureStillPushes: a registry that fails to gather one
// family still has every other pushed, interval after interval; each such
// push is counted as failed, and the failure logged once.
func TestGatherFailureStillPushes(t *testing.T) {
	var rc pushes
	srv := httptest.NewServer(&rc)
	defer srv.Close()
	reg := prometheus.NewRegistry()
	good := prometheus.NewCounter(prometheus.CounterOpts{Name: "itlproxy_good_total", Help: "Good."})
	good.Add(2)
	reg.MustRegister(good, brokenCollector{prometheus.NewDesc("itlproxy_broken", "Broken.", nil, nil)})
	core, logs := observer.New(zap.InfoLevel)
	m, err := StartMetrics(Config{OTELMetricsExporter: "otlp", OTLPMetricsEndpoint: srv.URL + "/v1/metrics", OTLPProtocol: "http/protobuf",
		OTELMetricExportInterval: 50, OTELMetricExportTimeout: 5000, OTLPMetricsTemporality: "cumulative"},
		MetricsOptions{Gatherer: reg, Registerer: reg, Version: "test", Log: zap.New(core)})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Shutdown(time.Second)
	deadline := time.Now().Add(10 * time.Second)
	for len(rc.received()) < 3 {
		if time.Now().After(deadline) {
			t.Fatalf("%d pushes in 10s, want 3", len(rc.received()))
		}
		time.Sleep(10 * time.Millisecond)
	}
	for i, names := range rc.received() {
		if !slices.Contains(names, "itlproxy_good_total") {
			t.Errorf("push %d lacks the family that was gathered: %v", i, names)
		}
	}
	// The registry still fails to gather the broken family, and gives
	// the others.
	families, err := reg.Gather()
	if err == nil {
		t.Fatal("the broken collector gathered without an error")
	}
	n := -1.0
	for _, f := range families {
		if f.GetName() == "itlproxy_otlp_metric_exports_failed_total" {
			n = f.GetMetric()[0].GetCounter().GetValue()
		}
	}
	if n < 3 {
		t.Errorf("%v pushes counted as failed, want every one of the %d so far", n, len(rc.received()))
	}
	if warned := logs.FilterMessageSnippet("OTLP metric export failed").Len(); warned != 1 {
		t.Errorf("the failure logged %d times, want once", warned)
	}
}
