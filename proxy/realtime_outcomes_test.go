package proxy

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/itlproxy/itlproxy/internal/e2e"
	"github.com/itlproxy/itlproxy/metrics"
)

// TestRealtimeOutcomes: how each response ends is its stream's outcome,
// when the upstream says so (response.done's status, an error event for
// it) and when either end drops the connection mid-response; a response
// the upstream failed does not end the connection, and the next one is
// measured.
func TestRealtimeOutcomes(t *testing.T) {
	for _, tc := range []struct {
		name  string
		plan  string
		leave func(*rtClient) // how the client leaves mid-response, if it does
		// shutdown: the proxy's shutdown reaches its deadline mid-response.
		shutdown bool
		outcome  string
		status   string // the client's view
	}{
		{name: "the upstream drops the connection", plan: "kind=audio deltas=20 gap=5ms then=drop at=3", outcome: metrics.OutcomeUpstreamError},
		// The upstream holds the response after three deltas, and the client
		// leaves once it has read them: no delta is on its way as it
		// leaves, so the proxy forwarded as many as the client read.
		{name: "the client drops the connection", plan: "kind=audio deltas=200 gap=10ms then=hang at=3",
			leave: func(c *rtClient) { _ = c.c.CloseNow() }, outcome: metrics.OutcomeClientCanceled},
		{name: "the client closes with a Close frame", plan: "kind=audio deltas=200 gap=10ms then=hang at=3",
			leave: func(c *rtClient) { _ = c.c.Close(websocket.StatusGoingAway, "bye") }, outcome: metrics.OutcomeClientCanceled},
		{name: "the shutdown closes the connection at its deadline", plan: "kind=audio deltas=200 gap=10ms", shutdown: true,
			outcome: metrics.OutcomeClientCanceled},
		{name: "an error event names the response", plan: "kind=text deltas=20 gap=5ms then=error at=4", outcome: metrics.OutcomeUpstreamError, status: "error"},
		{name: "status failed", plan: "kind=text deltas=3 gap=5ms then=failed", outcome: metrics.OutcomeUpstreamError, status: "failed"},
		{name: "status incomplete", plan: "kind=text deltas=3 gap=5ms then=incomplete", outcome: metrics.OutcomeIncomplete, status: "incomplete"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h, rec := realtimeHarness(t, &e2e.RealtimeUpstream{})
			c := dialRealtime(t, h, "m", websocket.CompressionDisabled, nil)
			var seen *clientResponse
			if tc.leave != nil {
				c.afterDelta = func(n int) {
					if n == 3 {
						tc.leave(c)
					}
				}
			}
			closed := make(chan int, 1)
			if tc.shutdown {
				go func() {
					time.Sleep(35 * time.Millisecond)
					ctx, cancel := context.WithCancel(context.Background())
					cancel() // the deadline, passed
					closed <- h.waitUpgraded(ctx)
				}()
			}
			seen = c.respond(create(tc.plan), 0)
			if tc.shutdown {
				if n := <-closed; n != 1 {
					t.Errorf("the shutdown closed %d connections, want 1", n)
				}
			}
			if seen.status != tc.status {
				t.Errorf("the client saw status %q, want %q", seen.status, tc.status)
			}
			outcomes := []*clientResponse{seen}
			want := []string{tc.outcome}
			if tc.status != "" {
				// The connection lives on: the next response is measured.
				outcomes = append(outcomes, c.respond(create("kind=text deltas=4 gap=2ms"), 0))
				want = append(want, metrics.OutcomeCompleted)
				_ = c.c.Close(websocket.StatusNormalClosure, "")
			}
			h.waitServed(1)
			checkAgainstClient(t, rec, outcomes, want)
			if got := h.counter("itlproxy_streams_total", "endpoint", "realtime", "outcome", tc.outcome); got != 1 && tc.outcome != metrics.OutcomeCompleted {
				t.Errorf("streams %s: %v, want 1", tc.outcome, got)
			}
			if got := h.counter("itlproxy_active_streams", "endpoint", "realtime"); got != 0 {
				t.Errorf("%v responses still in flight", got)
			}
			// A response that ended without response.done's usage has no
			// context length: its TPOT is in the unknown band, not 0-1k.
			wantUnknown := uint64(0)
			if tc.status == "" || tc.status == "error" {
				wantUnknown = 1
			}
			if n, _ := h.hist("itlproxy_time_per_output_token_by_context_seconds", "endpoint", "realtime", "context", "unknown"); n != wantUnknown {
				t.Errorf("%d TPOTs in context band unknown, want %d", n, wantUnknown)
			}
		})
	}
}

// TestRealtimeRecordedAsStreams: the model label comes from the query and
// is bounded as every model label; a connection is its responses'
// session (the session header's, else its own), each response a turn;
// the objectives judge its responses, whose tokens are goodput, and their
// gaps fall in load bands; the exemplars carry the response's id; each
// response has a span, a child of the connection's; the connection is
// one request, 101.
func TestRealtimeRecordedAsStreams(t *testing.T) {
	spans := tracetest.NewSpanRecorder()
	h, rec := realtimeHarness(t, &e2e.RealtimeUpstream{}, traced(spans), func(c *Config, o *metrics.Options) {
		c.SessionHeader = "X-Session-Id"
		o.MaxModels, o.SessionMax, o.SessionTTL = 1, 16, time.Hour
		o.SLOs = metrics.SLOs{Default: metrics.Objectives{TTFT: time.Second, ITL: time.Second}}
	})
	c := dialRealtime(t, h, "gpt-realtime", websocket.CompressionDisabled, http.Header{"X-Session-Id": {"call-7"}})
	var ids []string
	tokens := 0
	for range 3 {
		r := c.respond(create("kind=audio deltas=6 gap=2ms"), 0)
		ids, tokens = append(ids, r.id), tokens+int(r.output)
	}
	_ = c.c.Close(websocket.StatusNormalClosure, "")
	other := dialRealtime(t, h, "another-model", websocket.CompressionDisabled, nil)
	otherID := other.respond(create("kind=text deltas=2"), 0).id
	_ = other.c.Close(websocket.StatusNormalClosure, "")
	long := dialRealtime(t, h, strings.Repeat("m", 300), websocket.CompressionDisabled, nil)
	long.respond(create("kind=text deltas=2"), 0)
	_ = long.c.Close(websocket.StatusNormalClosure, "")
	h.waitServed(3)

	for _, m := range []struct {
		model                string
		streams, connections float64
	}{{"gpt-realtime", 3, 1}, {metrics.ModelOther, 2, 2}} {
		if got := h.counter("itlproxy_streams_total", "endpoint", "realtime", "model", m.model); got != m.streams {
			t.Errorf("model %s: %v streams, want %v", m.model, got, m.streams)
		}
		if got := h.counter("itlproxy_requests_total", "endpoint", "realtime", "model", m.model, "code", "101"); got != m.connections {
			t.Errorf("model %s: %v connections, want %v with code 101", m.model, got, m.connections)
		}
	}
	model := []string{"model", "gpt-realtime"}
	for _, c := range []struct {
		name   string
		labels []string
		want   float64
	}{
		{"itlproxy_slo_observations_total", []string{"slo", metrics.SLOTTFT}, 3},
		{"itlproxy_slo_observations_total", []string{"slo", metrics.SLOITL}, 15},
		{"itlproxy_streams_judged_total", []string{"verdict", metrics.VerdictMet}, 3},
		{"itlproxy_goodput_tokens_total", nil, float64(tokens)},
	} {
		if got := h.counter(c.name, append(c.labels, model...)...); got != c.want {
			t.Errorf("%s %v: %v, want %v", c.name, c.labels, got, c.want)
		}
	}
	if n, _ := h.hist("itlproxy_inter_token_latency_by_load_seconds", append(model, "endpoint", "realtime")...); n != 15 {
		t.Errorf("%d gaps by load band, want 15", n)
	}
	for turn, want := range map[string]uint64{"1": 3, "2-4": 2} {
		if n, _ := h.hist("itlproxy_time_to_first_token_by_turn_seconds", "turn", turn); n != want {
			t.Errorf("TTFT of turn %s: %d, want %d", turn, n, want)
		}
	}
	for i, id := range append(ids, otherID) {
		e := rec.Get(id)
		switch {
		case e == nil:
			t.Fatalf("response %s not recorded", id)
		case i < 3 && e.SessionID != "call-7", i == 3 && (e.SessionID == "" || e.SessionID == "call-7"):
			t.Errorf("response %s: session %q", id, e.SessionID)
		}
	}

	fs, err := h.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	exemplars := map[string]bool{}
	for _, f := range fs {
		if f.GetName() != "itlproxy_time_to_first_token_seconds" && f.GetName() != "itlproxy_inter_token_latency_seconds" {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, b := range m.GetHistogram().GetBucket() {
				for _, l := range b.GetExemplar().GetLabel() {
					if l.GetName() == "request_id" {
						exemplars[l.GetValue()] = true
					}
				}
			}
		}
	}
	if !exemplars[ids[0]] && !exemplars[ids[1]] && !exemplars[ids[2]] {
		t.Errorf("no exemplar carries a response id %v: %v", ids, exemplars)
	}

	var conn trace.SpanContext
	responses := map[string]trace.SpanContext{}
	for _, s := range spans.Ended() {
		a := attrsOf(s)
		switch s.Name() {
		case "GET /v1/realtime":
			if a["itlproxy.session_id"].AsString() == "call-7" {
				conn = s.SpanContext()
			}
		case "realtime response":
			if a["itlproxy.outcome"].AsString() != metrics.OutcomeCompleted || a["itlproxy.gap.count"].AsInt64() < 1 || a["itlproxy.ttft"].AsFloat64() <= 0 {
				t.Errorf("response span %v", a)
			}
			responses[a["gen_ai.response.id"].AsString()] = s.Parent()
		}
	}
	for _, id := range ids {
		if p, ok := responses[id]; !ok || p.SpanID() != conn.SpanID() || p.TraceID() != conn.TraceID() {
			t.Errorf("response %s: span parent %v, want the connection's %v", id, p, conn)
		}
	}
}
