package proxy

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"io"
	"math/rand/v2"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/itlproxy/itlproxy/metrics"
	"github.com/itlproxy/itlproxy/proxy/events"
	"github.com/itlproxy/itlproxy/proxy/internal/streamtest"
)

// fixture is a recorded stream and what measuring it must find.
type fixture struct {
	file      string
	tokens    int    // token-bearing events
	output    int64  // output tokens counted (usage, else events)
	input     int64  // input tokens counted, -1 for none
	context   string // the context band of its TPOT; "" for 0-1k, or unknown without input tokens
	outcome   string
	endpoint  string
	truncated bool
}

// api returns the fixture's endpoint.
func (fx fixture) api() events.Endpoint {
	switch fx.endpoint {
	case "/v1/completions":
		return events.Completions
	case "/v1/responses":
		return events.Responses
	case "/v1/messages":
		return events.Messages
	}
	return events.ChatCompletions
}

var fixtures = []fixture{
	{file: "vllm_chat_usage.sse", tokens: 7, output: 7, input: 17},
	{file: "vllm_completions.sse", tokens: 4, output: 4, input: -1, endpoint: "/v1/completions"},
	{file: "sglang_reasoning.sse", tokens: 6, output: 6, input: 9},
	{file: "openai_tool_calls.sse", tokens: 6, output: 6, input: 40},
	{file: "llamacpp_chat.sse", tokens: 7, output: 7, input: 12},
	{file: "ollama_chat.sse", tokens: 5, output: 5, input: -1},
	{file: "n2_choices.sse", tokens: 6, output: 6, input: -1},
	{file: "tgi_chat.sse", tokens: 3, output: 3, input: -1},
	{file: "vllm_error_event.sse", tokens: 2, output: 2, input: -1, outcome: metrics.OutcomeUpstreamError},
	{file: "openai_responses.sse", tokens: 7, output: 7, input: 14, endpoint: "/v1/responses"},
	{file: "openai_responses_tools.sse", tokens: 8, output: 40, input: 30, endpoint: "/v1/responses"},
	{file: "openai_responses_incomplete.sse", tokens: 3, output: 3, input: 5, endpoint: "/v1/responses", outcome: metrics.OutcomeIncomplete},
	{file: "anthropic_messages.sse", tokens: 7, output: 9, input: 25, endpoint: "/v1/messages"},
	{file: "anthropic_thinking_tools.sse", tokens: 6, output: 89, input: 472, endpoint: "/v1/messages"},
	{file: "anthropic_error.sse", tokens: 1, output: 1, input: 10, endpoint: "/v1/messages", outcome: metrics.OutcomeUpstreamError},
	{file: "anthropic_prompt_cache.sse", tokens: 10, output: 11, input: 12 + 2048 + 3000, context: "4k-16k", endpoint: "/v1/messages"},
	// Recorded from Ollama 0.17.4's OpenAI- and Anthropic-compatible routes.
	{file: "ollama_openai_chat.sse", tokens: 40, output: 40, input: -1},
	{file: "ollama_openai_chat_include_usage.sse", tokens: 40, output: 40, input: 3},
	{file: "ollama_openai_chat_natural_stop.sse", tokens: 21, output: 22, input: 3}, // usage counts the end token, never sent
	{file: "ollama_openai_chat_stop_sequence.sse", tokens: 17, output: 17, input: -1},
	{file: "ollama_openai_completions.sse", tokens: 40, output: 40, input: -1, endpoint: "/v1/completions"},
	{file: "ollama_openai_completions_include_usage.sse", tokens: 40, output: 40, input: 3, endpoint: "/v1/completions"},
	{file: "ollama_openai_responses.sse", tokens: 40, output: 40, input: 3, endpoint: "/v1/responses"},
	{file: "ollama_anthropic_messages.sse", tokens: 40, output: 40, input: 3, endpoint: "/v1/messages"}, // message_delta's cumulative input (3) is the latest, not message_start's 2
}

// framings returns the stream written every way the SSE format allows,
// all of which a client must read as the same events.
func framings(stream string) map[string]string {
	evs := strings.SplitAfter(stream, "\n\n")
	var comments, fields, multiline strings.Builder
	for i, ev := range evs {
		if ev == "" {
			continue
		}
		comments.WriteString(": keep-alive\n\n:\n" + ev)
		// An event line the event may have comes after ours: the last wins.
		fields.WriteString("id: " + string(rune('a'+i%26)) + "\nretry: 3000\nevent: message\n" + ev)
		// Cut the JSON after each comma into data lines: joined with '\n'
		// (white space to JSON) they are the same document.
		for _, line := range strings.SplitAfter(strings.TrimSuffix(ev, "\n"), "\n") {
			if data, ok := strings.CutPrefix(line, "data: "); ok {
				line = "data: " + strings.ReplaceAll(data, ",", ",\ndata: ")
			}
			multiline.WriteString(line)
		}
		multiline.WriteString("\n")
	}
	return map[string]string{
		"LF":         stream,
		"CRLF":       strings.ReplaceAll(stream, "\n", "\r\n"),
		"CR":         strings.ReplaceAll(stream, "\n", "\r"),
		"comments":   comments.String(),
		"fields":     fields.String(),
		"multi-line": multiline.String(),
		"BOM":        "\xEF\xBB\xBF" + stream,
	}
}

// forEachFraming runs test, as a subtest, on every fixture written in
// every framing.
func forEachFraming(t *testing.T, test func(t *testing.T, fx fixture, name, stream string)) {
	for _, fx := range fixtures {
		raw := streamtest.Read(t, fx.file)
		for name, stream := range framings(string(raw)) {
			t.Run(fx.file+"/"+name, func(t *testing.T) { test(t, fx, name, stream) })
		}
	}
}

// TestStreamsArriveByteIdentical sends every fixture in every framing, cut
// into random chunks, through the proxy: the client must receive exactly
// the upstream's bytes, and the measurement must find the same events
// whatever the framing and the cuts.
func TestStreamsArriveByteIdentical(t *testing.T) {
	forEachFraming(t, func(t *testing.T, fx fixture, name, stream string) {
		rng := rand.New(rand.NewPCG(uint64(len(stream)), uint64(len(name))))
		var chunks [][]byte
		for rest := []byte(stream); len(rest) > 0; {
			n := min(len(rest), 1+rng.IntN(200))
			chunks = append(chunks, rest[:n])
			rest = rest[n:]
		}
		h := newHarness(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			writeChunks(w, r, chunks, nil)
		}))
		endpoint := cmp(fx.endpoint, "/v1/chat/completions")
		resp := h.post(endpoint, `{"model":"m","stream":true}`)
		got, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, []byte(stream)) {
			t.Fatalf("client got %d bytes that differ from the upstream's %d", len(got), len(stream))
		}
		if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
			t.Errorf("Content-Type %q", ct)
		}
		h.waitServed(1)
		checkStreamMetrics(t, h, fx)
	})
}

func cmp(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

func checkStreamMetrics(t *testing.T, h *harness, fx fixture) {
	t.Helper()
	ttft, _ := h.hist("itlproxy_time_to_first_token_seconds")
	itl, _ := h.hist("itlproxy_inter_token_latency_seconds")
	wantTTFT := uint64(min(fx.tokens, 1))
	if ttft != wantTTFT || itl != uint64(max(fx.tokens-1, 0)) {
		t.Errorf("TTFT count %d, ITL count %d; want %d and %d", ttft, itl, wantTTFT, fx.tokens-1)
	}
	outcome := cmp(fx.outcome, metrics.OutcomeCompleted)
	if n := h.counter("itlproxy_streams_total", "outcome", outcome, "model", "m"); n != 1 {
		t.Errorf("streams_total{outcome=%s} = %v, want 1", outcome, n)
	}
	if n := h.counter("itlproxy_output_tokens_total"); n != float64(fx.output) {
		t.Errorf("output tokens %v, want %d", n, fx.output)
	}
	if n := h.counter("itlproxy_input_tokens_total"); n != float64(max(fx.input, 0)) {
		t.Errorf("input tokens %v, want %d", n, max(fx.input, 0))
	}
	if n := h.counter("itlproxy_parse_failures_total"); n != 0 {
		t.Errorf("parse failures %v, want 0", n)
	}
	if n := h.counter("itlproxy_active_streams"); n != 0 {
		t.Errorf("active streams %v after the end", n)
	}
	wantTPOT := uint64(0)
	if fx.output >= 2 && fx.tokens >= 1 {
		wantTPOT = 1
	}
	tpot, tpotSum := h.hist("itlproxy_time_per_output_token_seconds")
	if tpot != wantTPOT {
		t.Errorf("TPOT count %d, want %d", tpot, wantTPOT)
	}
	band := fx.context
	switch {
	case band != "":
	case fx.input < 0:
		band = "unknown"
	default:
		band = "0-1k"
	}
	if n, sum := h.hist("itlproxy_time_per_output_token_by_context_seconds", "context", band); n != wantTPOT || sum != tpotSum {
		t.Errorf("TPOT in context band %s: %d observations (%gs), want %d (%gs)", band, n, sum, wantTPOT, tpotSum)
	}
	if n, _ := h.hist("itlproxy_time_per_output_token_by_context_seconds"); n != tpot {
		t.Errorf("%d TPOT observations banded by context, want all %d", n, tpot)
	}
}

// TestFlushesEachEvent proves the proxy does not buffer: the upstream
// sends its second event only after the client has read the first.
func TestFlushesEachEvent(t *testing.T) {
	clientGotFirst := make(chan struct{})
	h := newHarness(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream; charset=utf-8")
		_, _ = io.WriteString(w, `data: {"choices":[{"delta":{"content":"a"}}]}`+"\n\n")
		http.NewResponseController(w).Flush()
		select {
		case <-clientGotFirst:
		case <-time.After(5 * time.Second):
			return // the test fails below: the client never saw the first event
		}
		_, _ = io.WriteString(w, `data: {"choices":[{"delta":{"content":"b"}}]}`+"\n\ndata: [DONE]\n\n")
	}))
	resp := h.post("/v1/chat/completions", `{"model":"m","stream":true}`)
	defer resp.Body.Close()
	br := bufio.NewReader(resp.Body)
	line, err := br.ReadString('\n')
	if err != nil || !strings.Contains(line, `"a"`) {
		t.Fatalf("first event: %q, %v", line, err)
	}
	close(clientGotFirst)
	rest, _ := io.ReadAll(br)
	if !strings.Contains(string(rest), `"b"`) || !strings.HasSuffix(string(rest), "[DONE]\n\n") {
		t.Fatalf("rest of stream: %q", rest)
	}
}

// TestStreamTiming checks the observations against the upstream's own
// schedule: TTFT and every gap, within scheduling noise.
func TestStreamTiming(t *testing.T) {
	ttft := 150 * time.Millisecond
	gaps := []time.Duration{0, ttft, 20 * time.Millisecond, 60 * time.Millisecond, 5 * time.Millisecond, 40 * time.Millisecond}
	chunks := [][]byte{[]byte(`data: {"choices":[{"delta":{"role":"assistant"}}]}` + "\n\n")}
	for range 5 {
		chunks = append(chunks, []byte(`data: {"choices":[{"delta":{"content":"x"}}]}`+"\n\n"))
	}
	h := newHarness(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { writeChunks(w, r, chunks, gaps) }))
	resp := h.post("/v1/chat/completions", `{"model":"m","stream":true}`)
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	h.waitServed(1)

	n, sum := h.hist("itlproxy_time_to_first_token_seconds", "model", "m", "endpoint", "chat_completions")
	if n != 1 || sum < ttft.Seconds() || sum > ttft.Seconds()+0.05 {
		t.Errorf("TTFT count %d sum %.4fs, want 1 and %v (+<50ms)", n, sum, ttft)
	}
	var wantITL time.Duration
	for _, g := range gaps[2:] {
		wantITL += g
	}
	n, sum = h.hist("itlproxy_inter_token_latency_seconds", "model", "m")
	// The gaps add up to the span from the first token to the last: a late
	// read of the first (after 150 ms idle) shortens it. A proxy that held
	// events back would make it ~0.
	if n != 4 || sum < wantITL.Seconds()*0.75 || sum > wantITL.Seconds()+0.05 {
		t.Errorf("ITL count %d sum %.4fs, want 4 and ≈%v", n, sum, wantITL)
	}
	n, sum = h.hist("itlproxy_time_per_output_token_seconds", "model", "m")
	if want := wantITL.Seconds() / 4; n != 1 || sum < want*0.75 || sum > want+0.0125 {
		t.Errorf("TPOT count %d sum %.4fs, want 1 and ≈%.4fs", n, sum, want)
	}
}

// TestMalformedStreams: whatever the upstream sends, the client gets it
// unchanged; what could not be measured is counted by reason.
func TestMalformedStreams(t *testing.T) {
	tok := `data: {"choices":[{"delta":{"content":"x"}}]}` + "\n\n"
	for _, c := range []struct {
		name   string
		stream string
		reason string
		count  float64
		tokens int
	}{
		{"not JSON", tok + "data: keep-alive\n\n" + tok, metrics.ParseInvalidJSON, 1, 2},
		{"truncated JSON", tok + `data: {"choices":[{"delta":` + "\n\n" + tok, metrics.ParseInvalidJSON, 1, 2},
		{"binary garbage", tok + "\x00\xff\xfe\x01\n\ndata: \x00\x01\n\n" + tok, metrics.ParseInvalidJSON, 1, 2},
		{"missing final blank line", tok + tok + "data: [DONE]\n", metrics.ParseTruncated, 1, 2},
		{"cut mid-line", tok + `data: {"choi`, metrics.ParseTruncated, 1, 1},
		{"event over the bound", tok + "data: " + strings.Repeat("y", 4096) + "\n\n" + tok, metrics.ParseEventTooLarge, 1, 2},
	} {
		t.Run(c.name, func(t *testing.T) {
			h := newHarness(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				writeChunks(w, r, [][]byte{[]byte(c.stream)}, nil)
			}), func(cfg *Config, _ *metrics.Options) { cfg.MaxEventBytes = 1024 })
			resp := h.post("/v1/chat/completions", `{"model":"m","stream":true}`)
			got, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			if err != nil || string(got) != c.stream {
				t.Fatalf("client got %q, %v", got, err)
			}
			h.waitServed(1)
			if n := h.counter("itlproxy_parse_failures_total", "reason", c.reason, "model", "m"); n != c.count {
				t.Errorf("parse_failures_total{reason=%s} = %v, want %v", c.reason, n, c.count)
			}
			if n, _ := h.hist("itlproxy_inter_token_latency_seconds"); n != uint64(c.tokens-1) {
				t.Errorf("ITL count %d, want %d", n, c.tokens-1)
			}
		})
	}
}

func TestEncodedStreamPassesUnmeasured(t *testing.T) {
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	_, _ = io.WriteString(zw, `data: {"choices":[{"delta":{"content":"x"}}]}`+"\n\n")
	zw.Close()
	h := newHarness(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Encoding", "gzip")
		writeChunks(w, r, [][]byte{gz.Bytes()}, nil)
	}))
	resp := h.post("/v1/chat/completions", `{"model":"m","stream":true}`, "Accept-Encoding", "gzip")
	got, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !bytes.Equal(got, gz.Bytes()) || resp.Header.Get("Content-Encoding") != "gzip" {
		t.Fatalf("client got %d bytes with Content-Encoding %q", len(got), resp.Header.Get("Content-Encoding"))
	}
	h.waitServed(1)
	if n := h.counter("itlproxy_parse_failures_total", "reason", metrics.ParseEncoded); n != 1 {
		t.Errorf("parse_failures_total{reason=content_encoding} = %v", n)
	}
	if n := h.counter("itlproxy_streams_total", "outcome", metrics.OutcomeCompleted); n != 1 {
		t.Errorf("streams_total{outcome=completed} = %v", n)
	}
}

// TestHangUpAfterDoneIsCompleted: SDKs close the connection as soon as
// they read [DONE], often before the upstream's chunked terminator
// arrives. The stream completed all the same.
func TestHangUpAfterDoneIsCompleted(t *testing.T) {
	release := make(chan struct{})
	defer close(release)
	h := newHarness(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		writeChunks(w, r, [][]byte{[]byte(`data: {"choices":[{"delta":{"content":"x"}}]}` + "\n\ndata: [DONE]\n\n")}, nil)
		select { // hold the terminator back until the client has gone
		case <-release:
		case <-r.Context().Done():
		}
	}))
	resp := h.post("/v1/chat/completions", `{"model":"m","stream":true}`)
	br := bufio.NewReader(resp.Body)
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			t.Fatal(err)
		}
		if strings.HasPrefix(line, "data: [DONE]") {
			break
		}
	}
	resp.Body.Close()
	h.waitServed(1)
	if n := h.counter("itlproxy_streams_total", "outcome", metrics.OutcomeCompleted); n != 1 {
		t.Errorf("streams_total{outcome=completed} = %v, want 1 (client_canceled: %v)", n,
			h.counter("itlproxy_streams_total", "outcome", metrics.OutcomeClientCanceled))
	}
}
