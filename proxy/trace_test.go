package proxy

import (
	"io"
	"net"
	"net/http"
	"net/url"
	"slices"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.uber.org/zap"

	"github.com/itlproxy/itlproxy/metrics"
	"github.com/itlproxy/itlproxy/proxy/events"
)

// traced returns a harness option that gives the proxy a tracer of the
// real SDK, whose ended spans rec keeps.
func traced(rec *tracetest.SpanRecorder) harnessOption {
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	return func(c *Config, _ *metrics.Options) { c.Tracer = tp.Tracer("test") }
}

func attrsOf(s sdktrace.ReadOnlySpan) map[attribute.Key]attribute.Value {
	m := map[attribute.Key]attribute.Value{}
	for _, kv := range s.Attributes() {
		m[kv.Key] = kv.Value
	}
	return m
}

// onlySpan returns the one span rec holds.
func onlySpan(t *testing.T, rec *tracetest.SpanRecorder) sdktrace.ReadOnlySpan {
	t.Helper()
	spans := rec.Ended()
	if len(spans) != 1 {
		t.Fatalf("%d spans ended, want 1", len(spans))
	}
	return spans[0]
}

// TestSpanOfEachKindOfRequest: a non-streamed request's span has its
// usage and no stream attributes; a forwarded one is named by its method
// alone; an unreachable upstream makes the span an error.
func TestSpanOfEachKindOfRequest(t *testing.T) {
	t.Run("non-streamed", func(t *testing.T) {
		rec := tracetest.NewSpanRecorder()
		h := newHarness(t, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			_, _ = io.WriteString(w, `{"choices":[{"message":{"content":"hi"}}],"usage":{"prompt_tokens":7,"completion_tokens":3,"total_tokens":10}}`)
		}), traced(rec))
		resp := h.post("/v1/completions", `{"model":"m","prompt":"p"}`, "X-Request-Id", "req-json")
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		h.waitServed(1)
		s := onlySpan(t, rec)
		a := attrsOf(s)
		if s.Name() != "POST /v1/completions" || a["gen_ai.operation.name"].AsString() != "text_completion" ||
			a["gen_ai.usage.input_tokens"].AsInt64() != 7 || a["gen_ai.usage.output_tokens"].AsInt64() != 3 ||
			a["itlproxy.request_id"].AsString() != "req-json" {
			t.Errorf("span %q %v", s.Name(), a)
		}
		if _, ok := a["itlproxy.outcome"]; ok {
			t.Error("a non-streamed request's span has an outcome")
		}
	})
	t.Run("forwarded", func(t *testing.T) {
		rec := tracetest.NewSpanRecorder()
		h := newHarness(t, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			_, _ = io.WriteString(w, `{"data":[]}`)
		}), traced(rec))
		resp, err := http.Get(h.proxy.URL + "/v1/models")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		h.waitServed(1)
		s := onlySpan(t, rec)
		if a := attrsOf(s); s.Name() != "GET" || a["http.response.status_code"].AsInt64() != 200 || a["gen_ai.operation.name"].Type() != attribute.INVALID {
			t.Errorf("span %q %v", s.Name(), a)
		}
	})
	t.Run("upstream unreachable", func(t *testing.T) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		dead, _ := url.Parse("http://" + ln.Addr().String())
		ln.Close()
		rec := tracetest.NewSpanRecorder()
		h := newHarness(t, nil, func(c *Config, _ *metrics.Options) { c.Upstream = dead }, traced(rec))
		resp := h.post("/v1/chat/completions", `{"model":"m","stream":true}`)
		resp.Body.Close()
		h.waitServed(1)
		s := onlySpan(t, rec)
		if a := attrsOf(s); s.Status().Code != codes.Error || a["itlproxy.outcome"].AsString() != metrics.OutcomeUpstreamError {
			t.Errorf("span status %v, attributes %v", s.Status(), a)
		}
	})
}

// TestSpanEventsCapped: past 32 notable gaps a span gets no more events,
// and counts the rest; the longest gap's index is kept.
func TestSpanEventsCapped(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tracer := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec)).Tracer("test")
	m, err := metrics.New(prometheus.NewRegistry(), metrics.Options{MaxModels: 4, StallThreshold: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	u, _ := url.Parse("http://upstream.example:8000")
	p := New(Config{Upstream: u, Tracer: tracer}, m, zap.NewNop())
	r, _ := http.NewRequest(http.MethodPost, "/v1/chat/completions", nil)
	ex := p.newExchange(r, request{t0: time.Now(), labels: m.RequestLabels("m", "chat_completions", "", ""),
		endpoint: events.ChatCompletions, route: "/v1/chat/completions", model: "m", wantStream: true})
	ex.code = http.StatusOK
	at := time.Now()
	for i := 1; i <= 60; i++ {
		d := time.Millisecond // not notable
		switch {
		case i == 40:
			d = time.Second
		case i%3 != 0:
			d = 20 * time.Millisecond // a stall
		}
		ex.sink.gap(d, 0, at, 1)
	}
	ex.finish(false, zap.NewNop())
	s := onlySpan(t, rec)
	a := attrsOf(s)
	// Of gaps 1..60, the 40 that are not multiples of 3 are stalls (gap 40
	// among them): 32 events, 8 counted.
	if len(s.Events()) != maxGapEvents || a["itlproxy.gap.events_dropped"].AsInt64() != 40-maxGapEvents {
		t.Errorf("%d events, %v dropped", len(s.Events()), a["itlproxy.gap.events_dropped"])
	}
	if a["itlproxy.gap.count"].AsInt64() != 60 || a["itlproxy.gap.longest_index"].AsInt64() != 40 || a["server.address"].AsString() != "upstream.example" || a["server.port"].AsInt64() != 8000 {
		t.Errorf("attributes %v", a)
	}
	if last := s.Events()[maxGapEvents-1]; last.Name != "itlproxy.stall" {
		t.Errorf("last event %q", last.Name)
	}
}

// TestStallEventCause: a stall's span event carries its cause, and a
// prefill's names the request whose prefill it was: here a request written
// to the upstream before the stall began, whose first token came 20 ms
// before the stall's end.
func TestStallEventCause(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tracer := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec)).Tracer("test")
	m, err := metrics.New(prometheus.NewRegistry(), metrics.Options{MaxModels: 4, StallThreshold: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	u, _ := url.Parse("http://upstream.example:8000")
	p := New(Config{Upstream: u, Tracer: tracer}, m, zap.NewNop())
	start := func(id string) *exchange {
		r, _ := http.NewRequest(http.MethodPost, "/v1/chat/completions", nil)
		r.Header.Set(RequestIDHeader, id)
		ex := p.newExchange(r, request{t0: time.Now(), labels: m.RequestLabels("m", "chat_completions", "", ""),
			endpoint: events.ChatCompletions, route: "/v1/chat/completions", model: "m", wantStream: true})
		ex.code = http.StatusOK
		return ex
	}
	running, prefill := start("running"), start("long-prompt")
	t0 := time.Now()
	running.requestWritten(t0)
	running.sink.firstToken(time.Millisecond, t0)
	prefill.requestWritten(t0.Add(time.Millisecond))
	prefill.sink.firstToken(600*time.Millisecond, t0.Add(600*time.Millisecond))
	running.sink.gap(620*time.Millisecond, 0, t0.Add(620*time.Millisecond), 2) // the prefill's
	running.sink.gap(300*time.Millisecond, 0, t0.Add(920*time.Millisecond), 2) // the server's own
	prefill.finish(false, zap.NewNop())
	running.finish(false, zap.NewNop())
	var stalls [][2]string
	for _, s := range rec.Ended() {
		for _, e := range s.Events() {
			a := map[attribute.Key]attribute.Value{}
			for _, kv := range e.Attributes {
				a[kv.Key] = kv.Value
			}
			if e.Name == "itlproxy.stall" {
				stalls = append(stalls, [2]string{a["itlproxy.stall.cause"].AsString(), a["itlproxy.stall.prefill_request_id"].AsString()})
			}
		}
	}
	if want := [][2]string{{metrics.StallPrefill, "long-prompt"}, {metrics.StallUpstream, ""}}; !slices.Equal(stalls, want) {
		t.Errorf("stall events %q, want %q", stalls, want)
	}
}

// TestTracedMeterAllocatesNothing: tracing adds no allocation per event
// of a stream whose gaps are not notable.
func TestTracedMeterAllocatesNothing(t *testing.T) {
	evs, _, m := recordedStreamMeter(t, nil, true)
	if m.sink.notable == nil {
		t.Fatal("the stream is not traced")
	}
	i := 0
	allocs := testing.AllocsPerRun(1000, func() {
		measure(m, evs[i%len(evs)], 1)
		i++
	})
	if allocs != 0 {
		t.Errorf("%v allocations per event", allocs)
	}
	if m.sink.stream.Gaps().Count == 0 {
		t.Error("no gap was recorded")
	}
}
