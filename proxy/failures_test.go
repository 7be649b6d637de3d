package proxy

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/itlproxy/itlproxy/metrics"
	"github.com/itlproxy/itlproxy/proxy/transport"
)

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
	}), func(c *Config, _ *metrics.Options) { c.Transport = transport.New(200*time.Millisecond, nil) })
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
