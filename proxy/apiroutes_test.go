package proxy

import (
	"io"
	"net/http"
	"slices"
	"testing"

	"github.com/itlproxy/itlproxy/metrics"
)

func TestParseRoutes(t *testing.T) {
	got, err := ParseRoutes(" /ollama/api/chat = ollama_chat ,, /generate=tgi_generate")
	if err != nil {
		t.Fatal(err)
	}
	want := slices.Clone(DefaultRoutes)
	want[slices.Index(want, Route{"/generate", "generate"})].API = "tgi_generate"
	want = append(want, Route{"/ollama/api/chat", "ollama_chat"})
	if !slices.Equal(got, want) {
		t.Errorf("routes %v, want %v", got, want)
	}
	if got, err := ParseRoutes(""); err != nil || !slices.Equal(got, DefaultRoutes) {
		t.Errorf("an empty list: %v, %v; want the defaults", got, err)
	}
	_, err = ParseRoutes("api/chat=ollama_chat,/x=vllm,/y/{id}=completions")
	const wantErr = `"api/chat=ollama_chat": the path must start with / and hold no pattern` + "\n" +
		`"/x=vllm": unknown API "vllm" (one of chat_completions, completions, generate, llamacpp_completion, messages, ` +
		`ollama_chat, ollama_generate, responses, sglang_generate, tgi_generate, tgi_generate_stream)` + "\n" +
		`"/y/{id}=completions": the path must start with / and hold no pattern`
	if err == nil || err.Error() != wantErr {
		t.Errorf("error:\n%v\nwant:\n%s", err, wantErr)
	}
}

// TestRoutesMountedElsewhere: a server mounted under another path is
// measured once its route is named, and a named /generate is not told
// apart by its body.
func TestRoutesMountedElsewhere(t *testing.T) {
	routes, err := ParseRoutes("/ollama/api/chat=ollama_chat,/generate=sglang_generate")
	if err != nil {
		t.Fatal(err)
	}
	h := newHarness(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"message":{"content":"x"},"done":true,"eval_count":1}`)
	}), func(cfg *Config, _ *metrics.Options) { cfg.Routes = routes })
	for _, path := range []string{"/ollama/api/chat", "/generate", "/api/chat"} {
		resp := h.post(path, `{"model":"m","inputs":"TGI's shape","stream":false}`)
		resp.Body.Close()
	}
	h.waitServed(3)
	for _, endpoint := range []string{"ollama_chat", "sglang_generate"} {
		if n := h.counter("itlproxy_requests_total", "endpoint", endpoint); n != map[string]float64{"ollama_chat": 2, "sglang_generate": 1}[endpoint] {
			t.Errorf("requests_total{endpoint=%s} = %v", endpoint, n)
		}
	}
	if n := h.counter("itlproxy_output_tokens_total", "endpoint", "ollama_chat"); n != 2 {
		t.Errorf("output tokens of the mounted route %v, want 2", n)
	}
}
