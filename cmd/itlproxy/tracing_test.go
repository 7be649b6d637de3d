package main

import (
	"context"
	"encoding/hex"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	collectortrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
)

// collector receives OTLP exports in-process: over HTTP/protobuf
// (ServeHTTP) or gRPC (Export), and keeps every span with its resource.
type collector struct {
	collectortrace.UnimplementedTraceServiceServer
	mu       sync.Mutex
	spans    []*tracepb.Span
	resource map[string]string
}

func (c *collector) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path != "/v1/traces" || r.Header.Get("Content-Type") != "application/x-protobuf" {
		http.Error(w, "not an OTLP/HTTP protobuf export", http.StatusBadRequest)
		return
	}
	body, _ := io.ReadAll(r.Body)
	var req collectortrace.ExportTraceServiceRequest
	if err := proto.Unmarshal(body, &req); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	_, _ = c.Export(r.Context(), &req)
	b, _ := proto.Marshal(&collectortrace.ExportTraceServiceResponse{})
	w.Header().Set("Content-Type", "application/x-protobuf")
	_, _ = w.Write(b)
}

func (c *collector) Export(_ context.Context, req *collectortrace.ExportTraceServiceRequest) (*collectortrace.ExportTraceServiceResponse, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, rs := range req.ResourceSpans {
		c.resource = attrMap(rs.Resource.Attributes)
		for _, ss := range rs.ScopeSpans {
			c.spans = append(c.spans, ss.Spans...)
		}
	}
	return &collectortrace.ExportTraceServiceResponse{}, nil
}

// span waits for the span whose request id is id.
func (c *collector) span(t *testing.T, id string) *tracepb.Span {
	t.Helper()
	var found *tracepb.Span
	waitFor(t, "the span of "+id, 10*time.Second, func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		for _, s := range c.spans {
			if attrMap(s.Attributes)["itlproxy.request_id"] == id {
				found = s
			}
		}
		return found != nil
	})
	return found
}

// attrMap renders attribute values as text, for comparison.
func attrMap(kvs []*commonpb.KeyValue) map[string]string {
	m := map[string]string{}
	for _, kv := range kvs {
		v := kv.Value
		switch v.Value.(type) {
		case *commonpb.AnyValue_StringValue:
			m[kv.Key] = v.GetStringValue()
		case *commonpb.AnyValue_IntValue:
			m[kv.Key] = strconv.FormatInt(v.GetIntValue(), 10)
		case *commonpb.AnyValue_BoolValue:
			m[kv.Key] = strconv.FormatBool(v.GetBoolValue())
		case *commonpb.AnyValue_DoubleValue:
			m[kv.Key] = strconv.FormatFloat(v.GetDoubleValue(), 'g', -1, 64)
		}
	}
	return m
}

// tracedUpstream is scheduledUpstream that keeps the traceparent each
// request came with, by request id.
type tracedUpstream struct {
	scheduledUpstream
	mu          sync.Mutex
	traceparent map[string]string
}

func (u *tracedUpstream) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	u.mu.Lock()
	u.traceparent[r.Header.Get("X-Request-Id")] = r.Header.Get("Traceparent")
	u.mu.Unlock()
	u.scheduledUpstream.ServeHTTP(w, r)
}

func (u *tracedUpstream) got(id string) string {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.traceparent[id]
}

// timedStream sends one streaming chat request and reads the whole response.
func timedStream(t *testing.T, proxyAddr, model string, header map[string]string) time.Duration {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, "http://"+proxyAddr+"/v1/chat/completions", strings.NewReader(`{"model":"`+model+`","stream":true}`))
	for k, v := range header {
		req.Header.Set(k, v)
	}
	start := time.Now()
	// Far longer than any stream here, far shorter than an exporter's
	// timeout: a stream that waits for a collector fails.
	client := &http.Client{Timeout: 5 * time.Second}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if _, err := io.Copy(io.Discard, resp.Body); err != nil {
		t.Fatal(err)
	}
	return time.Since(start)
}

const clientTraceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"

// TestTraceSpans: each request's span reaches an OTLP/HTTP collector, a
// child of the client's traceparent when it sent one and a root when not;
// the upstream sees the span as its parent; the span carries the GenAI and
// itlproxy attributes, and an event for each gap over the ITL objective and
// each stall, at its index; the exemplars carry the span's trace id.
func TestTraceSpans(t *testing.T) {
	// Gaps 5, 60, 5, 200, 5 ms: gap 2 is over the 30ms objective, gap 4 is
	// a stall (over 120ms) too. Each value sits at least 25ms from a bound.
	up := &tracedUpstream{scheduledUpstream: scheduledUpstream{schedule: fixedSchedule(20*ms, 5*ms, 60*ms, 5*ms, 200*ms, 5*ms)}, traceparent: map[string]string{}}
	upSrv := httptest.NewServer(up)
	defer upSrv.Close()
	var col collector
	colSrv := httptest.NewServer(&col)
	defer colSrv.Close()
	in := start(t, nil, map[string]string{
		"ITLPROXY_UPSTREAM_URL":       upSrv.URL,
		"ITLPROXY_STALL_THRESHOLD":    "120ms",
		"ITLPROXY_SLO_ITL":            "30ms",
		"OTEL_EXPORTER_OTLP_ENDPOINT": colSrv.URL,
		"OTEL_RESOURCE_ATTRIBUTES":    "deployment.environment.name=test",
	})
	timedStream(t, in.proxy, "m", map[string]string{"X-Request-Id": "req-child", "X-Session-Id": "sess-1", "Traceparent": clientTraceparent})
	timedStream(t, in.proxy, "n", map[string]string{"X-Request-Id": "req-root"})

	child := col.span(t, "req-child")
	if got := hex.EncodeToString(child.TraceId); got != "4bf92f3577b34da6a3ce929d0e0e4736" {
		t.Errorf("child span's trace id %s, want the client's", got)
	}
	if got := hex.EncodeToString(child.ParentSpanId); got != "00f067aa0ba902b7" {
		t.Errorf("child span's parent %s, want the client's span", got)
	}
	root := col.span(t, "req-root")
	if len(root.ParentSpanId) != 0 {
		t.Errorf("a request without traceparent has a parent span %x", root.ParentSpanId)
	}
	for _, c := range []struct {
		id   string
		span *tracepb.Span
	}{{"req-child", child}, {"req-root", root}} {
		want := "00-" + hex.EncodeToString(c.span.TraceId) + "-" + hex.EncodeToString(c.span.SpanId) + "-01"
		if got := up.got(c.id); got != want {
			t.Errorf("%s: the upstream got traceparent %q, want the proxy's span %q", c.id, got, want)
		}
	}
	if child.Kind != tracepb.Span_SPAN_KIND_SERVER || child.Name != "POST /v1/chat/completions" {
		t.Errorf("span kind %v name %q", child.Kind, child.Name)
	}
	checkStreamSpan(t, child)
	col.mu.Lock()
	resource := col.resource
	col.mu.Unlock()
	if resource["service.name"] != "itlproxy" || resource["deployment.environment.name"] != "test" {
		t.Errorf("resource %v", resource)
	}
	checkExemplarTraceIDs(t, in.admin, map[string]*tracepb.Span{"m": child, "n": root})
}

// checkStreamSpan checks the attributes and events of the span of the
// stream TestTraceSpans sends with a traceparent.
func checkStreamSpan(t *testing.T, child *tracepb.Span) {
	t.Helper()
	attrs := attrMap(child.Attributes)
	for k, want := range map[string]string{
		"gen_ai.operation.name":      "chat",
		"gen_ai.request.model":       "m",
		"gen_ai.response.model":      "m",
		"gen_ai.usage.input_tokens":  "5",
		"gen_ai.usage.output_tokens": "6",
		"server.address":             "127.0.0.1",
		"http.response.status_code":  "200",
		"itlproxy.request_id":        "req-child",
		"itlproxy.session_id":        "sess-1",
		"itlproxy.outcome":           "completed",
		"itlproxy.gap.count":         "5",
		"itlproxy.gap.longest_index": "4",
	} {
		if attrs[k] != want {
			t.Errorf("attribute %s = %q, want %q", k, attrs[k], want)
		}
	}
	for k, atLeast := range map[string]float64{"itlproxy.ttft": 0.020, "itlproxy.tpot": 0.055, "itlproxy.gap.longest": 0.200} {
		if v, err := strconv.ParseFloat(attrs[k], 64); err != nil || v < atLeast {
			t.Errorf("attribute %s = %q, want at least %g", k, attrs[k], atLeast)
		}
	}
	var events []string
	for _, e := range child.Events {
		a := attrMap(e.Attributes)
		events = append(events, e.Name+"@"+a["itlproxy.gap.index"]+" stall="+a["itlproxy.gap.stall"]+" over="+a["itlproxy.gap.itl_objective_exceeded"])
	}
	wantEvents := []string{"itlproxy.itl_objective_exceeded@2 stall=false over=true", "itlproxy.stall@4 stall=true over=true"}
	if !slices.Equal(events, wantEvents) {
		t.Errorf("span events %q, want %q", events, wantEvents)
	}
}

// checkExemplarTraceIDs checks that the TTFT and ITL exemplars of each
// model carry the trace id of its span.
func checkExemplarTraceIDs(t *testing.T, admin string, spans map[string]*tracepb.Span) {
	t.Helper()
	om := scrapeAs(t, admin, "application/openmetrics-text; version=1.0.0")
	for model, span := range spans {
		want := `trace_id="` + hex.EncodeToString(span.TraceId) + `"`
		for _, family := range []string{"itlproxy_time_to_first_token_seconds_bucket", "itlproxy_inter_token_latency_seconds_bucket"} {
			line := regexp.MustCompile(`(?m)^` + family + `\{[^}]*model="` + model + `"[^}]*\} \d+ # \{[^}]*` + want + `[^}]*\}`)
			if !line.MatchString(om) {
				t.Errorf("no %s exemplar of model %s with %s in:\n%s", family, model, want, grep(om, family))
			}
		}
	}
}

// TestTraceSpansOverGRPC: with OTEL_EXPORTER_OTLP_PROTOCOL=grpc the span
// reaches a gRPC collector.
func TestTraceSpansOverGRPC(t *testing.T) {
	up := httptest.NewServer(scheduledUpstream{schedule: fixedSchedule(5*ms, 5*ms)})
	defer up.Close()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var col collector
	gs := grpc.NewServer()
	collectortrace.RegisterTraceServiceServer(gs, &col)
	go func() { _ = gs.Serve(ln) }()
	defer gs.Stop()
	in := start(t, nil, map[string]string{
		"ITLPROXY_UPSTREAM_URL":       up.URL,
		"OTEL_EXPORTER_OTLP_ENDPOINT": "http://" + ln.Addr().String(),
		"OTEL_EXPORTER_OTLP_PROTOCOL": "grpc",
		"OTEL_SERVICE_NAME":           "edge-proxy",
	})
	timedStream(t, in.proxy, "m", map[string]string{"X-Request-Id": "req-grpc", "Traceparent": clientTraceparent})
	span := col.span(t, "req-grpc")
	if got := hex.EncodeToString(span.ParentSpanId); got != "00f067aa0ba902b7" {
		t.Errorf("parent %s, want the client's span", got)
	}
	col.mu.Lock()
	defer col.mu.Unlock()
	if col.resource["service.name"] != "edge-proxy" {
		t.Errorf("service.name %q", col.resource["service.name"])
	}
}

// TestDeadCollector: a collector that accepts connections and never
// answers adds no latency to streams, and the spans that find the queue
// full are dropped and counted.
func TestDeadCollector(t *testing.T) {
	dead := deadListener(t)
	// A data path that waited for the collector would wait for the
	// exporter's timeout (10s); the streams take about 25ms.
	in := unhurtBy(t, "a dead collector", map[string]string{
		"OTEL_EXPORTER_OTLP_ENDPOINT": "http://" + dead.Addr().String(), "OTEL_BSP_MAX_QUEUE_SIZE": "2"})
	queueFull := in.scrape().Value("itlproxy_trace_spans_dropped_total", "reason", "queue_full")
	// Two spans fit in the queue; the batch processor hands them to the
	// exporter after its 5s delay at the earliest, and the exporter then
	// waits for the dead collector; the other spans are dropped.
	if queueFull < unhurtStreams-2-2 {
		t.Errorf("itlproxy_trace_spans_dropped_total{reason=\"queue_full\"} = %v, want about %d", queueFull, unhurtStreams-2)
	}
}

// TestRefusingCollector: spans a collector refuses are counted as
// dropped, and the failure is logged. The batch processor reads its delay
// from the process environment, as the SDK documents.
func TestRefusingCollector(t *testing.T) {
	t.Setenv("OTEL_BSP_SCHEDULE_DELAY", "20")
	refusing := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		http.Error(w, "no", http.StatusBadRequest)
	}))
	defer refusing.Close()
	up := httptest.NewServer(scheduledUpstream{schedule: fixedSchedule(5*ms, 5*ms)})
	defer up.Close()
	in := start(t, nil, map[string]string{"ITLPROXY_UPSTREAM_URL": up.URL, "OTEL_EXPORTER_OTLP_ENDPOINT": refusing.URL})
	for range 3 {
		timedStream(t, in.proxy, "m", nil)
	}
	waitFor(t, "3 spans counted as export_failed", 10*time.Second, func() bool {
		return in.scrape().Value("itlproxy_trace_spans_dropped_total", "reason", "export_failed") == 3
	})
	if log := in.stderr.String(); !strings.Contains(log, "OpenTelemetry export failed") || !strings.Contains(log, "traces export") {
		t.Errorf("the failed export is not logged:\n%s", in.stderr)
	}
}

// TestTracesEndpoint: which URL spans go to, and how, from the standard
// variables.
func TestTracesEndpoint(t *testing.T) {
	for _, tc := range []struct {
		name               string
		env                map[string]string
		endpoint, protocol string
	}{
		{"off", nil, "", "http/protobuf"},
		{"base URL, HTTP", map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318/"}, "http://c:4318/v1/traces", "http/protobuf"},
		{"base URL with a path", map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "https://c/otlp"}, "https://c/otlp/v1/traces", "http/protobuf"},
		{"base URL, gRPC", map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4317", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}, "http://c:4317", "grpc"},
		{"traces URL as it is", map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://t:4318/x"}, "http://t:4318/x", "http/protobuf"},
		{"traces protocol first", map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4317", "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "grpc"}, "http://c:4317", "grpc"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env := map[string]string{"ITLPROXY_UPSTREAM_URL": upstreamOK}
			for k, v := range tc.env {
				env[k] = v
			}
			cfg, err := loadConfig(env, false)
			if err != nil {
				t.Fatal(err)
			}
			if endpoint, protocol := cfg.TracesEndpoint(); endpoint != tc.endpoint || protocol != tc.protocol {
				t.Errorf("got %q over %q, want %q over %q", endpoint, protocol, tc.endpoint, tc.protocol)
			}
		})
	}
}
