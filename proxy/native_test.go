package proxy

import (
	"bytes"
	"io"
	"math/rand/v2"
	"net/http"
	"strings"
	"testing"

	"github.com/itlproxy/itlproxy/metrics"
	"github.com/itlproxy/itlproxy/proxy/internal/streamtest"
)

// nativeCase is a native API's response as an upstream sends it, and
// what measuring it must find.
type nativeCase struct {
	path, body, file, contentType string
	header                        []string // response headers, name then value
	endpoint, model               string
	tokens                        int // token-bearing events
	output, input                 float64
	engineTPOT, engineTTFT        uint64 // observations expected
}

const defaultModel = "served-model"

var nativeStreams = []nativeCase{
	{path: "/api/chat", body: `{"model":"tiny","messages":[{"role":"user","content":"hello"}]}`, file: "ollama_chat.ndjson",
		contentType: ndjsonType, endpoint: "ollama_chat", model: "tiny", tokens: 40, output: 40, input: 3, engineTPOT: 1, engineTTFT: 1},
	{path: "/api/generate", body: `{"model":"tiny","prompt":"hello","stream":true}`, file: "ollama_generate.ndjson",
		contentType: ndjsonType, endpoint: "ollama_generate", model: "tiny", tokens: 40, output: 40, input: 3, engineTPOT: 1, engineTTFT: 1},
	{path: "/completion", body: `{"prompt":"hello","n_predict":7,"stream":true}`, file: "llamacpp_completion.sse",
		contentType: "text/event-stream", endpoint: "llamacpp_completion", model: defaultModel, tokens: 7, output: 7, input: 3, engineTPOT: 1, engineTTFT: 1},
	{path: "/completions", body: `{"prompt":"hello","stream":true}`, file: "llamacpp_completion.sse",
		contentType: "text/event-stream", endpoint: "llamacpp_completion", model: defaultModel, tokens: 7, output: 7, input: 3, engineTPOT: 1, engineTTFT: 1},
	{path: "/generate_stream", body: `{"inputs":"hello","parameters":{"max_new_tokens":8}}`, file: "tgi_generate_stream.sse",
		contentType: "text/event-stream", endpoint: "tgi_generate", model: defaultModel, tokens: 7, output: 8, input: 3},
	{path: "/generate", body: `{"text":"hello","sampling_params":{"max_new_tokens":7},"stream":true}`, file: "sglang_generate.sse",
		contentType: "text/event-stream", endpoint: "sglang_generate", model: defaultModel, tokens: 7, output: 7, input: 3},
}

func withDefaultModel(cfg *Config, _ *metrics.Options) { cfg.DefaultModel = defaultModel }

// TestNativeStreams sends each native API's stream through the proxy, cut
// into random reads: the client gets the upstream's bytes, and the
// measurement finds every token-bearing event, the usage, and the
// engine's timing beside the wire's.
func TestNativeStreams(t *testing.T) {
	for _, tc := range nativeStreams {
		t.Run(tc.path, func(t *testing.T) {
			raw := streamtest.ReadNative(t, tc.file)
			rng := rand.New(rand.NewPCG(uint64(len(raw)), 7))
			var chunks [][]byte
			for rest := raw; len(rest) > 0; {
				n := min(len(rest), 1+rng.IntN(120))
				chunks = append(chunks, rest[:n])
				rest = rest[n:]
			}
			h := newHarness(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", tc.contentType)
				writeChunks(w, r, chunks, nil)
			}), withDefaultModel)
			h.postExpecting(tc.path, tc.body, raw)
			checkNative(t, h, tc)
			if n := h.counter("itlproxy_streams_total", "outcome", metrics.OutcomeCompleted, "endpoint", tc.endpoint, "model", tc.model); n != 1 {
				t.Errorf("streams_total{completed} = %v, want 1", n)
			}
			ttft, _ := h.hist("itlproxy_time_to_first_token_seconds", "endpoint", tc.endpoint)
			itl, _ := h.hist("itlproxy_inter_token_latency_seconds", "endpoint", tc.endpoint)
			tpot, _ := h.hist("itlproxy_time_per_output_token_seconds", "endpoint", tc.endpoint)
			if ttft != 1 || itl != uint64(tc.tokens-1) || tpot != 1 {
				t.Errorf("TTFT %d, ITL %d, TPOT %d observations; want 1, %d, 1", ttft, itl, tpot, tc.tokens-1)
			}
			// Each native API's input count (3 tokens) bands its TPOT.
			if n, _ := h.hist("itlproxy_time_per_output_token_by_context_seconds", "endpoint", tc.endpoint, "context", "0-1k"); n != 1 {
				t.Errorf("TPOT in context band 0-1k: %d observations, want 1", n)
			}
			if ratio, _ := h.hist("itlproxy_wire_overhead_ratio", "endpoint", tc.endpoint); ratio != tc.engineTPOT {
				t.Errorf("wire overhead observed %d times, want %d", ratio, tc.engineTPOT)
			}
		})
	}
}

// postExpecting posts body to path and checks that the client got want,
// the upstream's bytes, once the proxy has recorded the request.
func (h *harness) postExpecting(path, body string, want []byte) {
	h.t.Helper()
	resp := h.post(path, body)
	got, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	h.waitServed(1)
	if !bytes.Equal(got, want) {
		h.t.Fatalf("client got %d bytes that differ from the upstream's %d", len(got), len(want))
	}
}

// checkNative checks what every native response must record: its
// labels, usage and engine timing, and no parse failure.
func checkNative(t *testing.T, h *harness, tc nativeCase) {
	t.Helper()
	if n := h.counter("itlproxy_requests_total", "endpoint", tc.endpoint, "model", tc.model, "code", "200"); n != 1 {
		t.Errorf("requests_total{endpoint=%s, model=%s} = %v, want 1", tc.endpoint, tc.model, n)
	}
	if out, in := h.counter("itlproxy_output_tokens_total", "endpoint", tc.endpoint), h.counter("itlproxy_input_tokens_total", "endpoint", tc.endpoint); out != tc.output || in != tc.input {
		t.Errorf("tokens out %v in %v, want %v and %v", out, in, tc.output, tc.input)
	}
	if n := h.counter("itlproxy_parse_failures_total"); n != 0 {
		t.Errorf("parse failures %v, want 0", n)
	}
	tpot, _ := h.hist("itlproxy_engine_time_per_output_token_seconds", "endpoint", tc.endpoint, "model", tc.model)
	ttft, _ := h.hist("itlproxy_engine_time_to_first_token_seconds", "endpoint", tc.endpoint, "model", tc.model)
	if tpot != tc.engineTPOT || ttft != tc.engineTTFT {
		t.Errorf("engine TPOT %d, TTFT %d observations; want %d, %d", tpot, ttft, tc.engineTPOT, tc.engineTTFT)
	}
}

// TestNativeBodies: a non-streamed request of each native API is counted
// with its usage, and the engine's timing where the body or the headers
// report it.
func TestNativeBodies(t *testing.T) {
	for _, tc := range []nativeCase{
		{path: "/api/chat", body: `{"model":"tiny","messages":[],"stream":false}`, file: "ollama_chat.json",
			endpoint: "ollama_chat", model: "tiny", output: 40, input: 3, engineTPOT: 1, engineTTFT: 1},
		{path: "/completion", body: `{"prompt":"hello"}`, file: "llamacpp_completion.json",
			endpoint: "llamacpp_completion", model: defaultModel, output: 7, input: 3, engineTPOT: 1, engineTTFT: 1},
		{path: "/generate", body: `{"inputs":"hello","parameters":{"details":true}}`, file: "tgi_generate.json",
			header:   []string{"X-Time-Per-Token", "12", "X-Prompt-Tokens", "3"},
			endpoint: "tgi_generate", model: defaultModel, output: 8, engineTPOT: 1},
		{path: "/generate", body: `{"text":"hello","model":"qwen"}`, file: "sglang_generate.json",
			endpoint: "sglang_generate", model: "qwen", output: 7, input: 3},
	} {
		t.Run(tc.file, func(t *testing.T) {
			raw := streamtest.ReadNative(t, tc.file)
			h := newHarness(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "application/json")
				for i := 0; i+1 < len(tc.header); i += 2 {
					w.Header().Set(tc.header[i], tc.header[i+1])
				}
				_, _ = w.Write(raw)
			}), withDefaultModel)
			h.postExpecting(tc.path, tc.body, raw)
			checkNative(t, h, tc)
			if n := h.counter("itlproxy_streams_total"); n != 0 {
				t.Errorf("a non-streamed request counted as %v streams", n)
			}
			if n, _ := h.hist("itlproxy_wire_overhead_ratio"); n != 0 {
				t.Errorf("a non-streamed request has a wire overhead: %d observations", n)
			}
		})
	}
}

// TestTGITimePerTokenHeader: TGI's x-time-per-token is whole
// milliseconds, read on TGI's route only.
func TestTGITimePerTokenHeader(t *testing.T) {
	h := newHarness(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("X-Time-Per-Token", "12")
		_, _ = io.WriteString(w, `{"generated_text":"x"}`)
	}))
	for _, path := range []string{"/generate", "/v1/chat/completions", "/health"} {
		resp := h.post(path, `{"inputs":"hello"}`)
		resp.Body.Close()
	}
	h.waitServed(3)
	if n, sum := h.hist("itlproxy_engine_time_per_output_token_seconds"); n != 1 || sum != 0.012 {
		t.Errorf("engine TPOT %d observations, sum %v; want 1 (TGI's only), 0.012", n, sum)
	}
	if n, _ := h.hist("itlproxy_engine_time_per_output_token_seconds", "model", metrics.ModelUnknown, "endpoint", "tgi_generate"); n != 1 {
		t.Errorf("TGI's engine TPOT not under model _unknown, endpoint tgi_generate")
	}
}

// TestNativeHostile: an Ollama stream with an unreadable line, an
// oversized one and an error line: every byte reaches the client, each
// unreadable line is counted, and the error ends the stream as an
// upstream error.
func TestNativeHostile(t *testing.T) {
	stream := `{"message":{"content":"a"},"done":false}` + "\n" +
		`{"message":{"content":"b"` + "\n" +
		`{"message":{"content":"` + strings.Repeat("x", 300) + `"},"done":false}` + "\r\n" +
		"\n" +
		`{"message":{"content":"c"},"done":false}` + "\n" +
		`{"error":"an error was encountered while running the model"}` + "\n"
	h := newHarness(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/x-ndjson; charset=utf-8")
		writeChunks(w, r, streamtest.Cuts([]byte(stream))["byte by byte"], nil)
	}), func(cfg *Config, _ *metrics.Options) { cfg.MaxEventBytes = 256 })
	resp := h.post("/api/chat", `{"model":"m"}`)
	got, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	h.waitServed(1)
	if string(got) != stream {
		t.Fatalf("client got %q", got)
	}
	if n := h.counter("itlproxy_parse_failures_total", "reason", metrics.ParseInvalidJSON); n != 1 {
		t.Errorf("invalid lines counted %v, want 1", n)
	}
	if n := h.counter("itlproxy_parse_failures_total", "reason", metrics.ParseEventTooLarge); n != 1 {
		t.Errorf("oversized lines counted %v, want 1", n)
	}
	if n := h.counter("itlproxy_streams_total", "outcome", metrics.OutcomeUpstreamError); n != 1 {
		t.Errorf("streams_total{upstream_error} = %v, want 1", n)
	}
	if n := h.counter("itlproxy_output_tokens_total"); n != 2 {
		t.Errorf("output tokens %v, want the 2 readable token lines", n)
	}
}

// FuzzProxyNDJSONPassthrough sends arbitrary bytes as Ollama's NDJSON
// stream through the proxy in arbitrary reads: the client gets exactly
// those bytes, and the measurement does not depend on the cuts.
func FuzzProxyNDJSONPassthrough(f *testing.F) {
	f.Add(streamtest.ReadNative(f, "ollama_chat.ndjson"), uint64(1))
	f.Add(streamtest.ReadNative(f, "ollama_generate.ndjson"), uint64(2))
	f.Add([]byte(`{"message":{"content":"a"}}`+"\r\n\n"+`{"error":"x"}`+"\n"+`{"done":true,"eval_count":3}`), uint64(3))
	f.Fuzz(func(t *testing.T, stream []byte, seed uint64) {
		through := func(seed uint64) measured {
			return passThroughAt(t, "/api/chat", `{"model":"m"}`, cutTransport{stream, seed, ndjsonType})
		}
		cut := through(seed | 1)
		if !bytes.Equal([]byte(cut.body), stream) {
			t.Fatalf("client got %q, upstream sent %q", cut.body, stream)
		}
		if whole := through(0); cut != whole {
			t.Fatalf("measurement depends on the cuts: %+v vs %+v in one piece", cut, whole)
		}
		if cut.streams != 1 || cut.completed+cut.failed != 1 || cut.ttft > 1 {
			t.Fatalf("inconsistent measurement %+v", cut)
		}
	})
}
