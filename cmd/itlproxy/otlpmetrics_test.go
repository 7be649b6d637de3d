package main

import (
	"encoding/hex"
	"fmt"
	"math"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	collectormetrics "go.opentelemetry.io/proto/otlp/collector/metrics/v1"
	metricspb "go.opentelemetry.io/proto/otlp/metrics/v1"
	"google.golang.org/grpc"

	"github.com/itlproxy/itlproxy/metrics/scrape"
)

// genAINames are the GenAI conventions' metrics the push derives, by the
// itlproxy family each comes from.
var genAINames = map[string]string{
	"itlproxy_time_to_first_token_seconds":   "gen_ai.client.operation.time_to_first_chunk",
	"itlproxy_inter_token_latency_seconds":   "gen_ai.client.operation.time_per_output_chunk",
	"itlproxy_time_per_output_token_seconds": "gen_ai.server.time_per_output_token",
	"itlproxy_tokens_per_response":           "gen_ai.client.token.usage",
}

// TestOTLPMetricsPush: with OTEL_METRICS_EXPORTER=prometheus,otlp every
// family of /metrics reaches an OTLP/HTTP receiver, from the same
// registry: each native histogram as an exponential histogram at scale 3
// with the same count, sum and exemplars (the trace id of the request's
// span among them), each counter a cumulative monotonic sum of the same
// value; the GenAI conventions' metrics come beside them with their
// units and attributes; spans and metrics name one resource.
func TestOTLPMetricsPush(t *testing.T) {
	// The batch processor reads its delay from the process environment:
	// the span of request a is then there at once, not in 5s.
	t.Setenv("OTEL_BSP_SCHEDULE_DELAY", "50")
	up := httptest.NewServer(scheduledUpstream{schedule: fixedSchedule(20*ms, 5*ms, 5*ms, 5*ms, 5*ms)})
	defer up.Close()
	var spans collector
	spanSrv := httptest.NewServer(&spans)
	t.Cleanup(spanSrv.Close) // after the instance's own cleanup: its last export reaches it
	var rc metricReceiver
	recvSrv := httptest.NewServer(&rc)
	t.Cleanup(recvSrv.Close) // after the instance's own cleanup: its last export reaches it
	in := start(t, nil, map[string]string{
		"ITLPROXY_UPSTREAM_URL":               up.URL,
		"OTEL_METRICS_EXPORTER":               "prometheus,otlp",
		"OTEL_EXPORTER_OTLP_METRICS_ENDPOINT": recvSrv.URL + "/v1/metrics",
		"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT":  spanSrv.URL + "/v1/traces",
		"OTEL_METRIC_EXPORT_INTERVAL":         "100",
		"OTEL_SERVICE_NAME":                   "edge",
	})
	for _, id := range []string{"a", "b", "c"} {
		timedStream(t, in.proxy, "m", map[string]string{"X-Request-Id": id})
	}
	stream(t, in.proxy, "n", "d")
	waitEnded(t, in, "m", 3)
	waitEnded(t, in, "n", 1)
	fs := in.scrape()
	itl, _ := fs.Histogram("itlproxy_inter_token_latency_seconds", "model", "m")
	p := rc.waitPush(t, "a push with every gap and request", 10*time.Second, func(p pushed) bool {
		pt := expPoint(p.metrics["itlproxy_inter_token_latency_seconds"], map[string]string{"model": "m"})
		return pt != nil && pt.Count == itl && total(p.metrics["itlproxy_requests_total"]) == 4
	})
	fs = in.scrape() // the same totals as the push: nothing ended since
	checkPushedFamilies(t, fs, p)
	checkPushedExemplars(t, p, spans.span(t, "a"))
	upURL, _ := url.Parse(up.URL)
	checkGenAI(t, fs, p, upURL.Port())
	spans.mu.Lock()
	spanResource := spans.resource
	spans.mu.Unlock()
	if p.resource["service.name"] != "edge" || p.resource["service.instance.id"] == "" ||
		p.resource["service.instance.id"] != spanResource["service.instance.id"] {
		t.Errorf("metrics' resource %v, spans' %v: want service.name edge and one service.instance.id", p.resource, spanResource)
	}
	if v := fs.Value("itlproxy_otlp_metric_exports_failed_total"); v != 0 {
		t.Errorf("itlproxy_otlp_metric_exports_failed_total = %v with a receiver that took every export", v)
	}
}

// checkPushedFamilies checks that every family of the scrape fs is in the
// push p, each series with the same value: a native histogram as an
// exponential one at scale 3, a counter as a cumulative monotonic sum, a
// gauge as a gauge.
func checkPushedFamilies(t *testing.T, fs scrape.Families, p pushed) {
	t.Helper()
	for name, f := range fs {
		m := p.metrics[name]
		if m == nil {
			t.Errorf("%s is on /metrics and not in the push", name)
			continue
		}
		if !strings.HasPrefix(name, "itlproxy_") || name == "itlproxy_scheduler_latency_seconds" {
			continue // the Go runtime's and the process's change between a scrape and a push
		}
		for _, s := range f.GetMetric() {
			checkPushedSeries(t, name, f.GetType(), s, m)
		}
	}
}

// labelsOf is a series' labels as attributes.
func labelsOf(s *dto.Metric) map[string]string {
	out := map[string]string{}
	for _, l := range s.GetLabel() {
		out[l.GetName()] = l.GetValue()
	}
	return out
}

// checkPushedSeries compares series s of family name on /metrics with its
// point in the pushed metric m.
func checkPushedSeries(t *testing.T, name string, typ dto.MetricType, s *dto.Metric, m *metricspb.Metric) {
	t.Helper()
	labels := labelsOf(s)
	switch typ {
	case dto.MetricType_HISTOGRAM:
		h := m.GetExponentialHistogram()
		pt := expPoint(m, labels)
		if h == nil || pt == nil {
			t.Errorf("%s%v: not an exponential histogram point in the push", name, labels)
			return
		}
		if h.AggregationTemporality != metricspb.AggregationTemporality_AGGREGATION_TEMPORALITY_CUMULATIVE || pt.Scale != 3 ||
			pt.Count != s.GetHistogram().GetSampleCount() || pt.GetSum() != s.GetHistogram().GetSampleSum() {
			t.Errorf("%s%v: pushed %v scale %d count %d sum %g, /metrics count %d sum %g", name, labels, h.AggregationTemporality,
				pt.Scale, pt.Count, pt.GetSum(), s.GetHistogram().GetSampleCount(), s.GetHistogram().GetSampleSum())
		}
	case dto.MetricType_COUNTER:
		pt := sumPoint(m, labels)
		if pt == nil || !m.GetSum().IsMonotonic || pt.GetAsDouble() != s.GetCounter().GetValue() ||
			m.GetSum().AggregationTemporality != metricspb.AggregationTemporality_AGGREGATION_TEMPORALITY_CUMULATIVE {
			t.Errorf("%s%v: pushed %v, /metrics %v", name, labels, m.GetSum(), s.GetCounter().GetValue())
		}
	case dto.MetricType_GAUGE:
		if m.GetGauge() == nil {
			t.Errorf("%s: pushed %v, want a gauge", name, m)
		}
	}
}

// checkPushedExemplars checks that the ITL and TTFT points of model m
// carry exemplars, one of them with the trace id of the request's span and
// its request id.
func checkPushedExemplars(t *testing.T, p pushed, span interface{ GetTraceId() []byte }) {
	t.Helper()
	for _, family := range []string{"itlproxy_time_to_first_token_seconds", "itlproxy_inter_token_latency_seconds"} {
		pt := expPoint(p.metrics[family], map[string]string{"model": "m"})
		if pt == nil {
			t.Fatalf("no %s point of model m", family)
		}
		found := slices.ContainsFunc(pt.Exemplars, func(e *metricspb.Exemplar) bool {
			return hex.EncodeToString(e.TraceId) == hex.EncodeToString(span.GetTraceId()) &&
				attrMap(e.FilteredAttributes)["request_id"] == "a"
		})
		if !found {
			t.Errorf("%s: no exemplar of request a with its span's trace id %x among %v", family, span.GetTraceId(), pt.Exemplars)
		}
		for _, e := range pt.Exemplars {
			if len(e.TraceId) != 16 {
				t.Errorf("%s: exemplar trace id %x is not 16 bytes", family, e.TraceId)
			}
		}
	}
}

// checkGenAI checks the GenAI conventions' metrics of the push p against
// the itlproxy families of the scrape fs they come from.
func checkGenAI(t *testing.T, fs scrape.Families, p pushed, port string) {
	t.Helper()
	for family, name := range genAINames {
		m := p.metrics[name]
		if m == nil {
			t.Errorf("%s is not in the push", name)
			continue
		}
		wantUnit := "s"
		if name == "gen_ai.client.token.usage" {
			wantUnit = "{token}"
		}
		if m.Unit != wantUnit || p.schemas[name] != "https://opentelemetry.io/schemas/1.41.0" {
			t.Errorf("%s: unit %q schema %q, want %q and semantic conventions 1.41.0", name, m.Unit, p.schemas[name], wantUnit)
		}
		for _, s := range fs[family].GetMetric() {
			want := map[string]string{
				"gen_ai.operation.name": "chat", "gen_ai.provider.name": "openai",
				"gen_ai.request.model": scrape.Label(s, "model"), "itlproxy.endpoint": "chat_completions",
				"server.address": "127.0.0.1", "server.port": port,
			}
			if typ := scrape.Label(s, "type"); typ != "" {
				want["gen_ai.token.type"] = typ
			}
			pt := expPoint(m, want)
			if pt == nil || pt.Count != s.GetHistogram().GetSampleCount() || math.Abs(pt.GetSum()-s.GetHistogram().GetSampleSum()) > 0 {
				t.Errorf("%s%v: pushed %v, want the count and sum of %s%v", name, want, pt, family, labelsOf(s))
			}
		}
	}
}

// TestOTLPMetricsOverGRPC: with the gRPC protocol the push reaches a gRPC
// receiver.
func TestOTLPMetricsOverGRPC(t *testing.T) {
	up := httptest.NewServer(scheduledUpstream{schedule: fixedSchedule(5*ms, 5*ms, 5*ms)})
	defer up.Close()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var rc metricReceiver
	gs := grpc.NewServer()
	collectormetrics.RegisterMetricsServiceServer(gs, &rc)
	go func() { _ = gs.Serve(ln) }()
	t.Cleanup(gs.Stop) // after the instance's own cleanup: its last export reaches it
	in := start(t, nil, map[string]string{
		"ITLPROXY_UPSTREAM_URL":               up.URL,
		"OTEL_METRICS_EXPORTER":               "otlp",
		"OTEL_EXPORTER_OTLP_METRICS_ENDPOINT": "http://" + ln.Addr().String(),
		"OTEL_EXPORTER_OTLP_METRICS_PROTOCOL": "grpc",
		"OTEL_METRIC_EXPORT_INTERVAL":         "100",
	})
	stream(t, in.proxy, "m", "g")
	rc.waitPush(t, "a push over gRPC with the stream's gaps", 10*time.Second, func(p pushed) bool {
		pt := expPoint(p.metrics["gen_ai.client.operation.time_per_output_chunk"], map[string]string{"gen_ai.request.model": "m"})
		return pt != nil && pt.Count == 2
	})
}

// TestOTLPMetricsShutdownPush: the shutdown pushes a last time, with every
// stream the proxy let finish, long before the next interval.
func TestOTLPMetricsShutdownPush(t *testing.T) {
	up := httptest.NewServer(scheduledUpstream{schedule: fixedSchedule(5*ms, 5*ms, 5*ms)})
	defer up.Close()
	var rc metricReceiver
	recvSrv := httptest.NewServer(&rc)
	t.Cleanup(recvSrv.Close) // after the instance's own cleanup: its last export reaches it
	in := start(t, nil, map[string]string{
		"ITLPROXY_UPSTREAM_URL":       up.URL,
		"OTEL_METRICS_EXPORTER":       "otlp",
		"OTEL_EXPORTER_OTLP_ENDPOINT": recvSrv.URL,
		"OTEL_TRACES_SAMPLER":         "always_off",
	})
	for _, id := range []string{"a", "b", "c"} {
		stream(t, in.proxy, "m", id)
	}
	in.stop()
	if err := in.wait(10 * time.Second); err != nil {
		t.Fatal(err)
	}
	if n := rc.count(); n != 1 {
		t.Fatalf("%d exports, want the shutdown's alone (the interval is a minute)", n)
	}
	p := rc.read(0)
	if pt := sumPoint(p.metrics["itlproxy_streams_total"], map[string]string{"outcome": "completed"}); pt.GetAsDouble() != 3 {
		t.Errorf("the last push counts %v streams, want 3", pt.GetAsDouble())
	}
	if pt := expPoint(p.metrics["itlproxy_inter_token_latency_seconds"], map[string]string{"model": "m"}); pt.GetCount() != 6 {
		t.Errorf("the last push counts %d gaps, want 6", pt.GetCount())
	}
}

// TestOTLPMetricsDelta: under the delta temporalities the pushes' points
// add up to /metrics' totals: counters and histograms as deltas with
// delta, histograms only with lowmemory; gauges stay gauges.
func TestOTLPMetricsDelta(t *testing.T) {
	for _, tc := range []struct {
		temporality string
		counters    metricspb.AggregationTemporality
	}{
		{"delta", metricspb.AggregationTemporality_AGGREGATION_TEMPORALITY_DELTA},
		{"LowMemory", metricspb.AggregationTemporality_AGGREGATION_TEMPORALITY_CUMULATIVE},
	} {
		t.Run(tc.temporality, func(t *testing.T) {
			up := httptest.NewServer(scheduledUpstream{schedule: fixedSchedule(5*ms, 5*ms, 5*ms, 5*ms)})
			defer up.Close()
			var rc metricReceiver
			recvSrv := httptest.NewServer(&rc)
			t.Cleanup(recvSrv.Close)
			in := start(t, nil, map[string]string{
				"ITLPROXY_UPSTREAM_URL":                             up.URL,
				"OTEL_METRICS_EXPORTER":                             "otlp",
				"OTEL_EXPORTER_OTLP_ENDPOINT":                       recvSrv.URL,
				"OTEL_METRIC_EXPORT_INTERVAL":                       "30",
				"OTEL_TRACES_SAMPLER":                               "always_off",
				"OTEL_EXPORTER_OTLP_METRICS_TEMPORALITY_PREFERENCE": tc.temporality,
			})
			for i := range 12 {
				stream(t, in.proxy, "m", streamID(i))
			}
			waitEnded(t, in, "m", 12)
			fs := in.scrape()
			itl, itlSum := fs.Histogram("itlproxy_inter_token_latency_seconds", "model", "m")
			streams := fs.Value("itlproxy_streams_total", "outcome", "completed")
			waitFor(t, "the pushes' deltas to add up to /metrics' gaps", 10*time.Second, func() bool {
				count, _ := rc.expTotal("itlproxy_inter_token_latency_seconds", map[string]string{"model": "m"})
				return count == itl
			})
			count, sum := rc.expTotal("gen_ai.client.operation.time_per_output_chunk", map[string]string{"gen_ai.request.model": "m"})
			if count != itl || math.Abs(sum-itlSum) > 1e-9*itlSum {
				t.Errorf("GenAI gaps add up to %d (sum %g), /metrics counts %d (sum %g)", count, sum, itl, itlSum)
			}
			p := rc.read(-1)
			if got := p.metrics["itlproxy_streams_total"].GetSum().AggregationTemporality; got != tc.counters {
				t.Errorf("counters pushed %v, want %v", got, tc.counters)
			}
			if tc.counters == metricspb.AggregationTemporality_AGGREGATION_TEMPORALITY_DELTA {
				if total := rc.sumTotal("itlproxy_streams_total", map[string]string{"outcome": "completed"}); total != streams {
					t.Errorf("the pushes' deltas count %v streams, /metrics %v", total, streams)
				}
			}
			if p.metrics["itlproxy_active_streams"].GetGauge() == nil {
				t.Error("itlproxy_active_streams is not pushed as a gauge")
			}
		})
	}
}

// expTotal adds up the count and sum of the delta points of exponential
// histogram name whose attributes include want, over every export.
func (rc *metricReceiver) expTotal(name string, want map[string]string) (count uint64, sum float64) {
	for i := range rc.count() {
		m := rc.read(i).metrics[name]
		if m.GetExponentialHistogram().GetAggregationTemporality() != metricspb.AggregationTemporality_AGGREGATION_TEMPORALITY_DELTA {
			continue
		}
		if pt := expPoint(m, want); pt != nil {
			count, sum = count+pt.Count, sum+pt.GetSum()
		}
	}
	return count, sum
}

// sumTotal adds up the delta points of sum name whose attributes include
// want, over every export.
func (rc *metricReceiver) sumTotal(name string, want map[string]string) float64 {
	var total float64
	for i := range rc.count() {
		if pt := sumPoint(rc.read(i).metrics[name], want); pt != nil {
			total += pt.GetAsDouble()
		}
	}
	return total
}

// total adds up the points of sum m.
func total(m *metricspb.Metric) float64 {
	var n float64
	for _, p := range m.GetSum().GetDataPoints() {
		n += p.GetAsDouble()
	}
	return n
}

// TestOTLPGenAIByServer: with two upstreams in a list, each reporting no
// usage (an OpenAI-compatible server without stream_options.include_usage,
// and no injection), the GenAI points carry the server that served their
// streams, each with that server's count of streams, and there is no
// gen_ai.client.token.usage: the conventions ask an instrumentation that
// cannot obtain the count not to report it. The families the push derives
// them from are not pushed themselves.
func TestOTLPGenAIByServer(t *testing.T) {
	var served [2]atomic.Int64
	var ports [2]string
	var urls []string
	for i := range served {
		h := scheduledUpstream{schedule: fixedSchedule(5*ms, 2*ms, 2*ms), prompt: func(string) prompt { return prompt{none: true} }}
		up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			served[i].Add(1)
			h.ServeHTTP(w, r)
		}))
		defer up.Close()
		u, _ := url.Parse(up.URL)
		ports[i] = u.Port()
		urls = append(urls, up.URL)
	}
	var rc metricReceiver
	recvSrv := httptest.NewServer(&rc)
	t.Cleanup(recvSrv.Close) // after the instance's own cleanup: its last export reaches it
	in := start(t, nil, map[string]string{
		"ITLPROXY_UPSTREAM_URL":               strings.Join(urls, ","),
		"OTEL_METRICS_EXPORTER":               "prometheus,otlp",
		"OTEL_EXPORTER_OTLP_METRICS_ENDPOINT": recvSrv.URL + "/v1/metrics",
		"OTEL_METRIC_EXPORT_INTERVAL":         "100",
		"OTEL_TRACES_SAMPLER":                 "always_off",
	})
	const streams = 10
	for i := range streams {
		stream(t, in.proxy, "m", fmt.Sprintf("r%d", i))
	}
	waitEnded(t, in, "m", streams)
	if served[0].Load() == 0 || served[1].Load() == 0 {
		t.Fatalf("streams by server %d and %d: want both to have served", served[0].Load(), served[1].Load())
	}
	ttft := "gen_ai.client.operation.time_to_first_chunk"
	p := rc.waitPush(t, "a push with every stream's first chunk", 10*time.Second, func(p pushed) bool {
		var n uint64
		for _, pt := range p.metrics[ttft].GetExponentialHistogram().GetDataPoints() {
			n += pt.Count
		}
		return n == streams
	})
	for i, port := range ports {
		want := map[string]string{"server.address": "127.0.0.1", "server.port": port, "gen_ai.request.model": "m"}
		for name, per := range map[string]uint64{
			ttft: 1, "gen_ai.client.operation.time_per_output_chunk": 2, "gen_ai.server.time_per_output_token": 1,
		} {
			pt := expPoint(p.metrics[name], want)
			if pt == nil || pt.Count != per*uint64(served[i].Load()) {
				t.Errorf("%s of server %s: %v; want %d observations, %d per stream it served", name, port, pt, per*uint64(served[i].Load()), per)
			}
		}
	}
	for i := range rc.count() {
		for name := range rc.read(i).metrics {
			if name == "gen_ai.client.token.usage" || strings.HasPrefix(name, "itlproxy_genai_") {
				t.Errorf("push %d carries %s", i, name)
			}
		}
	}
	// itlproxy's own families keep their fallback: the events counted.
	if n := in.scrape().Value("itlproxy_output_tokens_total", "model", "m"); n != 3*streams {
		t.Errorf("itlproxy_output_tokens_total %v, want the %d token-bearing events", n, 3*streams)
	}
}
