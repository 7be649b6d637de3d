package proxy

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/itlproxy/itlproxy/metrics"
	"github.com/itlproxy/itlproxy/proxy/internal/streamtest"
)

func TestNonStreamingUsage(t *testing.T) {
	body := `{"id":"chatcmpl-1","object":"chat.completion","model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"Hello there"},"finish_reason":"stop"}],"usage":{"prompt_tokens":11,"completion_tokens":3,"total_tokens":14}}`
	h := newHarness(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		time.Sleep(30 * time.Millisecond)
		_, _ = io.WriteString(w, body)
	}))
	for range 2 {
		resp := h.post("/v1/chat/completions", `{"model":"m","messages":[]}`)
		got, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if string(got) != body {
			t.Fatalf("client got %q", got)
		}
	}
	h.waitServed(2)
	if n := h.counter("itlproxy_input_tokens_total", "model", "m"); n != 22 {
		t.Errorf("input tokens %v, want 22", n)
	}
	if n := h.counter("itlproxy_output_tokens_total", "model", "m"); n != 6 {
		t.Errorf("output tokens %v, want 6", n)
	}
	n, sum := h.hist("itlproxy_request_duration_seconds", "model", "m", "streaming", "false")
	if n != 2 || sum < 0.06 {
		t.Errorf("duration count %d sum %.3f, want 2 and ≥ 60ms", n, sum)
	}
	if n := h.counter("itlproxy_requests_total", "model", "m", "code", "200", "streaming", "false"); n != 2 {
		t.Errorf("requests_total = %v", n)
	}
	if n := h.counter("itlproxy_streams_total"); n != 0 {
		t.Errorf("streams_total = %v for non-streamed requests", n)
	}
}

func TestModelLabelsBounded(t *testing.T) {
	okStream := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		writeChunks(w, r, [][]byte{[]byte(`data: {"choices":[{"delta":{"content":"x"}}]}` + "\n\ndata: [DONE]\n\n")}, nil)
	})
	send := func(h *harness, models ...string) {
		for _, m := range models {
			body := `{"stream":true}`
			if m != "" {
				body = `{"model":` + fmtString(m) + `,"stream":true}`
			}
			resp := h.post("/v1/chat/completions", body)
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
		h.waitServed(len(models))
	}
	t.Run("cap", func(t *testing.T) {
		h := newHarness(t, okStream, func(_ *Config, o *metrics.Options) { o.MaxModels = 2 })
		send(h, "a/b:1", "c.d", "e", "f", "a/b:1", "", strings.Repeat("z", 300), "bad\xff")
		for model, want := range map[string]float64{"a/b:1": 2, "c.d": 1, "_other": 4, "_unknown": 1} {
			if n := h.counter("itlproxy_requests_total", "model", model); n != want {
				t.Errorf("model %q: %v requests, want %v", model, n, want)
			}
		}
	})
	t.Run("allow-list", func(t *testing.T) {
		h := newHarness(t, okStream, func(_ *Config, o *metrics.Options) { o.Models = []string{"llama", "qwen"} })
		send(h, "llama", "mistral", "qwen", "gpt")
		for model, want := range map[string]float64{"llama": 1, "qwen": 1, "_other": 2} {
			if n := h.counter("itlproxy_requests_total", "model", model); n != want {
				t.Errorf("model %q: %v requests, want %v", model, n, want)
			}
		}
	})
}

func fmtString(s string) string { b, _ := json.Marshal(s); return string(b) }

func TestMetricsLint(t *testing.T) {
	h := newHarness(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		writeChunks(w, r, streamtest.Events("data: {\"choices\":[{\"delta\":{\"content\":\"x\"}}]}\n\ndata: {\"choices\":[{\"delta\":{\"content\":\"y\"}}],\"usage\":{\"prompt_tokens\":1,\"completion_tokens\":2}}\n\ndata: [DONE]\n\n"), nil)
	}))
	resp := h.post("/v1/chat/completions", `{"model":"m","stream":true}`)
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	h.waitServed(1)
	problems, err := testutil.GatherAndLint(h.reg)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("lint: %s: %s", p.Metric, p.Text)
	}
}

// TestNonStreamingUsageAllAPIs: non-streamed responses of every API count
// their tokens, whatever each calls them.
func TestNonStreamingUsageAllAPIs(t *testing.T) {
	for _, c := range []struct {
		path, body string
		in, out    float64
	}{
		{"/v1/chat/completions", `{"choices":[{"message":{"content":"Hi"}}],"usage":{"prompt_tokens":11,"completion_tokens":3}}`, 11, 3},
		{"/v1/completions", `{"choices":[{"text":"Hi"}],"usage":{"prompt_tokens":4,"completion_tokens":2}}`, 4, 2},
		{"/v1/responses", `{"object":"response","status":"completed","usage":{"input_tokens":9,"output_tokens":5,"total_tokens":14}}`, 9, 5},
		{"/v1/messages", `{"type":"message","content":[{"type":"text","text":"Hi"}],"usage":{"input_tokens":12,"output_tokens":6}}`, 12, 6},
	} {
		h := newHarness(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			_, _ = io.WriteString(w, c.body)
		}))
		resp := h.post(c.path, `{"model":"m"}`)
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		h.waitServed(1)
		if in, out := h.counter("itlproxy_input_tokens_total"), h.counter("itlproxy_output_tokens_total"); in != c.in || out != c.out {
			t.Errorf("%s: input %v output %v, want %v %v", c.path, in, out, c.in, c.out)
		}
	}
}
