package proxy

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/itlproxy/itlproxy/metrics"
)

// seenRequest is what an upstream received.
type seenRequest struct {
	method, path, rawQuery, host string
	header                       http.Header
	body                         []byte
}

func recordingUpstream(seen chan<- seenRequest, respond http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		seen <- seenRequest{r.Method, r.URL.Path, r.URL.RawQuery, r.Host, r.Header.Clone(), body}
		respond(w, r)
	}
}

func TestForwardsRequestUnchanged(t *testing.T) {
	seen := make(chan seenRequest, 1)
	h := newHarness(t, recordingUpstream(seen, func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("X-Upstream", "yes")
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusTeapot)
		_, _ = io.WriteString(w, `{"choices":[]}`)
	}), func(c *Config, _ *metrics.Options) {
		c.Upstream, _ = url.Parse(c.Upstream.String() + "/base")
	})
	body := `{"model":"m","messages":[{"role":"user","content":"héllo \u00e9"}],"stream":false}` + "\n\n"
	req, _ := http.NewRequest(http.MethodPost, h.proxy.URL+"/v1/chat/completions?api-version=2024-10-21&x=a%20b", strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer sk-test")
	req.Header.Set("X-Custom", "kept")
	req.Header.Add("X-Multi", "1")
	req.Header.Add("X-Multi", "2")
	req.Header.Set("Connection", "X-Hop")
	req.Header.Set("X-Hop", "dropped")
	req.Header.Set("X-Forwarded-For", "203.0.113.7")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	got, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	var up seenRequest
	select {
	case up = <-seen:
	case <-time.After(5 * time.Second):
		t.Fatalf("the upstream got nothing; the client got %s %q", resp.Status, got)
	}

	if up.method != http.MethodPost || up.path != "/base/v1/chat/completions" || up.rawQuery != "api-version=2024-10-21&x=a%20b" {
		t.Errorf("upstream got %s %s?%s", up.method, up.path, up.rawQuery)
	}
	if !bytes.Equal(up.body, []byte(body)) {
		t.Errorf("upstream body %q, sent %q", up.body, body)
	}
	upstreamHost := strings.TrimPrefix(h.upstream.URL, "http://")
	proxyHost := strings.TrimPrefix(h.proxy.URL, "http://")
	for _, c := range []struct{ name, got, want string }{
		{"Host", up.host, upstreamHost},
		{"Authorization", up.header.Get("Authorization"), "Bearer sk-test"},
		{"X-Custom", up.header.Get("X-Custom"), "kept"},
		{"X-Multi", strings.Join(up.header.Values("X-Multi"), ","), "1,2"},
		{"X-Hop (named by Connection)", up.header.Get("X-Hop"), ""},
		{"X-Forwarded-For (appended)", up.header.Get("X-Forwarded-For"), "203.0.113.7, 127.0.0.1"},
		{"X-Forwarded-Host", up.header.Get("X-Forwarded-Host"), proxyHost},
		{"X-Forwarded-Proto", up.header.Get("X-Forwarded-Proto"), "http"},
		{"response status", resp.Status, "418 I'm a teapot"},
		{"response header", resp.Header.Get("X-Upstream"), "yes"},
		{"response body", string(got), `{"choices":[]}`},
	} {
		if c.got != c.want {
			t.Errorf("%s: got %q, want %q", c.name, c.got, c.want)
		}
	}
}

func TestPassthroughEndpoints(t *testing.T) {
	seen := make(chan seenRequest, 1)
	h := newHarness(t, recordingUpstream(seen, func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, "answer to "+r.Method)
	}))
	big := strings.Repeat("x", 3<<20) // over MaxRequestBytes, but not a measured endpoint and not announced
	for _, c := range []struct{ method, path, body string }{
		{http.MethodGet, "/v1/models", ""},
		{http.MethodGet, "/v1/chat/completions", ""}, // a measured path, another method
		{http.MethodPut, "/custom/path?q=1", "payload"},
		{http.MethodPost, "/v1/embeddings", `{"model":"e","input":"x"}`},
		{http.MethodPost, "/upload", big},
	} {
		var body io.Reader = strings.NewReader(c.body)
		if c.body == big {
			body = io.MultiReader(strings.NewReader(big)) // unknown length: chunked
		}
		req, _ := http.NewRequest(c.method, h.proxy.URL+c.path, body)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		got, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		up := <-seen
		if string(got) != "answer to "+c.method || up.method != c.method || string(up.body) != c.body {
			t.Errorf("%s %s: client got %q; upstream got %s with %d body bytes", c.method, c.path, got, up.method, len(up.body))
		}
	}
	h.waitServed(5)
	if n := h.counter("itlproxy_requests_total", "endpoint", "other", "model", "_unknown", "code", "200"); n != 5 {
		t.Errorf("requests_total{endpoint=other} = %v, want 5", n)
	}
}

// fixture is a recorded stream and what measuring it must find.
type fixture struct {
	file      string
	tokens    int   // token-bearing events
	output    int64 // output tokens counted (usage, else events)
	input     int64 // input tokens counted, -1 for none
	outcome   string
	endpoint  string
	truncated bool
}

// label returns the fixture's endpoint label.
func (fx fixture) label() string {
	switch fx.endpoint {
	case "/v1/completions":
		return metrics.EndpointCompletions
	case "/v1/responses":
		return metrics.EndpointResponses
	case "/v1/messages":
		return metrics.EndpointMessages
	}
	return metrics.EndpointChatCompletions
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

// TestStreamsArriveByteIdentical sends every fixture in every framing, cut
// into random chunks, through the proxy: the client must receive exactly
// the upstream's bytes, and the measurement must find the same events
// whatever the framing and the cuts.
func TestStreamsArriveByteIdentical(t *testing.T) {
	for _, fx := range fixtures {
		raw, err := os.ReadFile(filepath.Join("testdata", "streams", fx.file))
		if err != nil {
			t.Fatal(err)
		}
		for name, stream := range framings(string(raw)) {
			t.Run(fx.file+"/"+name, func(t *testing.T) {
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
	}
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
	if tpot, _ := h.hist("itlproxy_time_per_output_token_seconds"); tpot != wantTPOT {
		t.Errorf("TPOT count %d, want %d", tpot, wantTPOT)
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
	if n != 4 || sum < wantITL.Seconds()*0.9 || sum > wantITL.Seconds()+0.05 {
		t.Errorf("ITL count %d sum %.4fs, want 4 and ≈%v", n, sum, wantITL)
	}
	n, sum = h.hist("itlproxy_time_per_output_token_seconds", "model", "m")
	if want := wantITL.Seconds() / 4; n != 1 || sum < want*0.9 || sum > want+0.0125 {
		t.Errorf("TPOT count %d sum %.4fs, want 1 and ≈%.4fs", n, sum, want)
	}
}

func TestClientDisconnectCancelsUpstream(t *testing.T) {
	upstreamCanceled := make(chan time.Time, 1)
	h := newHarness(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		rc := http.NewResponseController(w)
		for {
			_, _ = io.WriteString(w, `data: {"choices":[{"delta":{"content":"x"}}]}`+"\n\n")
			_ = rc.Flush()
			select {
			case <-r.Context().Done():
				upstreamCanceled <- time.Now()
				return
			case <-time.After(20 * time.Millisecond):
			}
		}
	}))
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, h.proxy.URL+"/v1/chat/completions", strings.NewReader(`{"model":"m","stream":true}`))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(resp.Body)
	for range 3 {
		if _, err := br.ReadString('\n'); err != nil {
			t.Fatal(err)
		}
	}
	canceledAt := time.Now()
	cancel()
	resp.Body.Close()
	select {
	case at := <-upstreamCanceled:
		t.Logf("upstream request canceled %v after the client left", at.Sub(canceledAt))
		if d := at.Sub(canceledAt); d > time.Second {
			t.Errorf("upstream canceled %v after the client left, want under 1s", d)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the upstream request was not canceled")
	}
	h.waitServed(1)
	if n := h.counter("itlproxy_streams_total", "outcome", metrics.OutcomeClientCanceled); n != 1 {
		t.Errorf("streams_total{outcome=client_canceled} = %v, want 1", n)
	}
	if n := h.counter("itlproxy_active_streams"); n != 0 {
		t.Errorf("active streams %v", n)
	}
}

// TestUpstreamCutMidStream: the upstream's connection dies mid-stream. The
// client must see a cut stream, not a clean end.
func TestUpstreamCutMidStream(t *testing.T) {
	h := newHarness(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = io.WriteString(w, `data: {"choices":[{"delta":{"content":"x"}}]}`+"\n\n")
		http.NewResponseController(w).Flush()
		conn, _, err := http.NewResponseController(w).Hijack()
		if err == nil {
			conn.Close()
		}
	}))
	resp := h.post("/v1/chat/completions", `{"model":"m","stream":true}`)
	got, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err == nil {
		t.Fatalf("client read a clean end after %q; want an error", got)
	}
	if !strings.Contains(string(got), `"x"`) {
		t.Errorf("client got %q before the cut", got)
	}
	h.waitServed(1)
	if n := h.counter("itlproxy_streams_total", "outcome", metrics.OutcomeUpstreamError); n != 1 {
		t.Errorf("streams_total{outcome=upstream_error} = %v, want 1", n)
	}
}

func TestUpstreamErrorStatusPassesThrough(t *testing.T) {
	for _, c := range []struct {
		code    int
		body    string
		ct      string
		outcome string
	}{
		{http.StatusTooManyRequests, `{"error":{"message":"slow down","type":"rate_limit_error"}}`, "application/json", metrics.OutcomeRejected},
		{http.StatusBadRequest, `{"object":"error","message":"bad","code":400}`, "application/json", metrics.OutcomeRejected},
		{http.StatusServiceUnavailable, "", "", metrics.OutcomeUpstreamError},
		{http.StatusInternalServerError, "Internal Server Error", "text/plain", metrics.OutcomeUpstreamError},
	} {
		h := newHarness(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if c.ct != "" {
				w.Header().Set("Content-Type", c.ct)
			}
			w.WriteHeader(c.code)
			_, _ = io.WriteString(w, c.body)
		}))
		resp := h.post("/v1/chat/completions", `{"model":"m","stream":true}`)
		got, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != c.code || string(got) != c.body {
			t.Errorf("%d: client got %d %q", c.code, resp.StatusCode, got)
		}
		h.waitServed(1)
		code := http.StatusText(c.code)
		if n := h.counter("itlproxy_requests_total", "code", strconv.Itoa(c.code), "streaming", "true"); n != 1 {
			t.Errorf("%s: requests_total = %v, want 1", code, n)
		}
		if n := h.counter("itlproxy_streams_total", "outcome", c.outcome); n != 1 {
			t.Errorf("%s: streams_total{outcome=%s} = %v, want 1", code, c.outcome, n)
		}
	}
}

// openAIError decodes an OpenAI-style error body.
func openAIError(t *testing.T, resp *http.Response) (message, typ, code string) {
	t.Helper()
	var e struct {
		Error struct {
			Message string  `json:"message"`
			Type    string  `json:"type"`
			Param   *string `json:"param"`
			Code    string  `json:"code"`
		} `json:"error"`
	}
	if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
		t.Errorf("error Content-Type %q", ct)
	}
	if err := json.NewDecoder(resp.Body).Decode(&e); err != nil {
		t.Fatalf("error body is not OpenAI-style JSON: %v", err)
	}
	return e.Error.Message, e.Error.Type, e.Error.Code
}

func TestDeadUpstream(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead, _ := url.Parse("http://" + ln.Addr().String())
	ln.Close()
	h := newHarness(t, nil, func(c *Config, _ *metrics.Options) { c.Upstream = dead })
	resp := h.post("/v1/chat/completions", `{"model":"m","stream":true}`)
	msg, typ, code := openAIError(t, resp)
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadGateway || typ != "upstream_error" || code != "upstream_unreachable" || msg == "" {
		t.Errorf("got %d %q %q %q", resp.StatusCode, msg, typ, code)
	}
	h.waitServed(1)
	if n := h.counter("itlproxy_requests_total", "code", "502"); n != 1 {
		t.Errorf("requests_total{code=502} = %v", n)
	}
	if n := h.counter("itlproxy_streams_total", "outcome", metrics.OutcomeUpstreamError); n != 1 {
		t.Errorf("streams_total{outcome=upstream_error} = %v", n)
	}
	for _, e := range h.logs.All() {
		if line := fmt.Sprint(e.Message, e.ContextMap()); strings.Contains(line, "Bearer") {
			t.Errorf("a credential reached the log: %s", line)
		}
	}
	if h.logs.FilterMessage("upstream unreachable").Len() != 1 {
		t.Error("the failure was not logged")
	}
}

func TestUpstreamTimeoutBeforeHeaders(t *testing.T) {
	release := make(chan struct{})
	defer close(release)
	h := newHarness(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}), func(c *Config, _ *metrics.Options) { c.Transport = NewTransport(200*time.Millisecond, nil) })
	start := time.Now()
	resp := h.post("/v1/completions", `{"model":"m"}`)
	_, typ, code := openAIError(t, resp)
	resp.Body.Close()
	if resp.StatusCode != http.StatusGatewayTimeout || typ != "upstream_error" || code != "upstream_timeout" {
		t.Errorf("got %d %q %q", resp.StatusCode, typ, code)
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("took %v", d)
	}
	h.waitServed(1)
	if n := h.counter("itlproxy_requests_total", "code", "504", "endpoint", "completions", "streaming", "false"); n != 1 {
		t.Errorf("requests_total{code=504} = %v", n)
	}
}

func TestOversizedBody(t *testing.T) {
	upstreamCalls := make(chan struct{}, 10)
	h := newHarness(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		upstreamCalls <- struct{}{}
		_, _ = io.Copy(io.Discard, r.Body)
	}), func(c *Config, _ *metrics.Options) { c.MaxRequestBytes = 1024 })

	for _, c := range []struct {
		name    string
		size    int
		chunked bool
		want    int
	}{
		{"announced", 2048, false, http.StatusRequestEntityTooLarge},
		{"chunked", 2048, true, http.StatusRequestEntityTooLarge},
		{"exactly the bound", 1024, false, http.StatusOK},
		{"exactly the bound, chunked", 1024, true, http.StatusOK},
	} {
		body := `{"model":"m","p":"` + strings.Repeat("x", c.size-len(`{"model":"m","p":""}`)) + `"}`
		var r io.Reader = strings.NewReader(body)
		if c.chunked {
			r = io.MultiReader(r)
		}
		req, _ := http.NewRequest(http.MethodPost, h.proxy.URL+"/v1/chat/completions", r)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if resp.StatusCode != c.want {
			t.Errorf("%s: status %d, want %d", c.name, resp.StatusCode, c.want)
		}
		if c.want == http.StatusRequestEntityTooLarge {
			_, typ, code := openAIError(t, resp)
			if typ != "invalid_request_error" || code != "request_too_large" {
				t.Errorf("%s: error %q %q", c.name, typ, code)
			}
		}
		resp.Body.Close()
		h.waitServed(1)
	}
	if len(upstreamCalls) != 2 {
		t.Errorf("upstream called %d times, want 2 (only the bodies within the bound)", len(upstreamCalls))
	}
	if n := h.counter("itlproxy_requests_total", "code", "413"); n != 2 {
		t.Errorf("requests_total{code=413} = %v, want 2", n)
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
		writeChunks(w, r, events("data: {\"choices\":[{\"delta\":{\"content\":\"x\"}}]}\n\ndata: {\"choices\":[{\"delta\":{\"content\":\"y\"}}],\"usage\":{\"prompt_tokens\":1,\"completion_tokens\":2}}\n\ndata: [DONE]\n\n"), nil)
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

// TestHTTPSUpstream streams from an https upstream speaking HTTP/2, event
// by event, with a base path.
func TestHTTPSUpstream(t *testing.T) {
	upstream := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.ProtoMajor != 2 || r.URL.Path != "/openai/v1/chat/completions" {
			http.Error(w, r.Proto+" "+r.URL.Path, http.StatusBadRequest)
			return
		}
		writeChunks(w, r, events(`data: {"choices":[{"delta":{"content":"a"}}]}`+"\n\n"+`data: {"choices":[{"delta":{"content":"b"}}]}`+"\n\ndata: [DONE]\n\n"),
			[]time.Duration{0, 30 * time.Millisecond, 0})
	}))
	upstream.EnableHTTP2 = true
	upstream.StartTLS()
	defer upstream.Close()
	h := newHarness(t, nil, func(c *Config, _ *metrics.Options) {
		c.Upstream, _ = url.Parse(upstream.URL + "/openai")
		tr := NewTransport(0, nil)
		tr.TLSClientConfig = upstream.Client().Transport.(*http.Transport).TLSClientConfig.Clone()
		c.Transport = tr
	})
	resp := h.post("/v1/chat/completions", `{"model":"m","stream":true}`)
	got, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.HasSuffix(string(got), "data: [DONE]\n\n") {
		t.Fatalf("got %s %q", resp.Status, got)
	}
	h.waitServed(1)
	if n, sum := h.hist("itlproxy_inter_token_latency_seconds", "model", "m"); n != 1 || sum < 0.03 {
		t.Errorf("ITL count %d sum %.3f, want 1 gap of ≥30ms", n, sum)
	}
}

// TestClientGivesUpBeforeFirstByte: a user who stops waiting while the
// request is queued upstream is counted (499, client_canceled), and the
// upstream request is canceled.
func TestClientGivesUpBeforeFirstByte(t *testing.T) {
	upstreamCanceled := make(chan struct{})
	h := newHarness(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// Read the request, as a server does before queueing it: only then
		// can Go's server notice the connection closing.
		_, _ = io.Copy(io.Discard, r.Body)
		<-r.Context().Done()
		close(upstreamCanceled)
	}))
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, h.proxy.URL+"/v1/chat/completions", strings.NewReader(`{"model":"m","stream":true}`))
	if _, err := http.DefaultClient.Do(req); err == nil {
		t.Fatal("the request succeeded")
	}
	select {
	case <-upstreamCanceled:
	case <-time.After(time.Second):
		t.Fatal("the upstream request was not canceled within 1s")
	}
	h.waitServed(1)
	if n := h.counter("itlproxy_requests_total", "code", "499", "streaming", "true"); n != 1 {
		t.Errorf("requests_total{code=499} = %v", n)
	}
	if n := h.counter("itlproxy_streams_total", "outcome", metrics.OutcomeClientCanceled); n != 1 {
		t.Errorf("streams_total{outcome=client_canceled} = %v", n)
	}
}
