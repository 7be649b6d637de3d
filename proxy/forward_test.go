package proxy

import (
	"bytes"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/itlproxy/itlproxy/metrics"
	"github.com/itlproxy/itlproxy/proxy/internal/streamtest"
	"github.com/itlproxy/itlproxy/proxy/transport"
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

// TestHTTPSUpstream streams from an https upstream speaking HTTP/2, event
// by event, with a base path.
func TestHTTPSUpstream(t *testing.T) {
	upstream := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.ProtoMajor != 2 || r.URL.Path != "/openai/v1/chat/completions" {
			http.Error(w, r.Proto+" "+r.URL.Path, http.StatusBadRequest)
			return
		}
		writeChunks(w, r, streamtest.Events(`data: {"choices":[{"delta":{"content":"a"}}]}`+"\n\n"+`data: {"choices":[{"delta":{"content":"b"}}]}`+"\n\ndata: [DONE]\n\n"),
			[]time.Duration{0, 30 * time.Millisecond, 0})
	}))
	upstream.EnableHTTP2 = true
	upstream.StartTLS()
	defer upstream.Close()
	h := newHarness(t, nil, func(c *Config, _ *metrics.Options) {
		c.Upstream, _ = url.Parse(upstream.URL + "/openai")
		tr := transport.New(0, nil)
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
	// The upstream sleeps 30 ms between the two events; the gap the proxy
	// stamps can be a little shorter when the first read returned late. A
	// proxy that held the events back would see them together, ~0 apart.
	if n, sum := h.hist("itlproxy_inter_token_latency_seconds", "model", "m"); n != 1 || sum < 0.02 {
		t.Errorf("ITL count %d sum %.3f, want 1 gap of about 30ms", n, sum)
	}
}
