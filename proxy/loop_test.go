package proxy

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httputil"
	"net/url"
	"regexp"
	"sync/atomic"
	"testing"
	"time"

	"github.com/itlproxy/itlproxy/metrics"
)

// TestViaMarksForwardedRequests: each request forwarded carries the
// proxy's Via after the client's, and two proxies in a chain are told
// apart: neither takes the other's mark for its own.
func TestViaMarksForwardedRequests(t *testing.T) {
	vias := make(chan []string, 4)
	up := newHarness(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		vias <- r.Header.Values("Via")
		_, _ = io.WriteString(w, `{"choices":[]}`)
	}))
	// A second proxy in front of the first.
	front := newHarness(t, nil, func(c *Config, _ *metrics.Options) { c.Upstream, _ = url.Parse(up.proxy.URL) })

	mark := regexp.MustCompile(`^1\.1 itlproxy-[0-9a-f]{16}$`)
	resp := up.post("/v1/chat/completions", `{"model":"m"}`, "Via", "1.0 fred")
	resp.Body.Close()
	if got := <-vias; resp.StatusCode != http.StatusOK || len(got) != 2 || got[0] != "1.0 fred" || !mark.MatchString(got[1]) {
		t.Errorf("%d; the upstream saw Via %q, want the client's and the proxy's", resp.StatusCode, got)
	}
	resp = front.post("/v1/chat/completions", `{"model":"m"}`)
	resp.Body.Close()
	if got := <-vias; resp.StatusCode != http.StatusOK || len(got) != 2 || !mark.MatchString(got[0]) || !mark.MatchString(got[1]) || got[0] == got[1] {
		t.Errorf("through two proxies: %d; the upstream saw Via %q, want two marks of their own", resp.StatusCode, got)
	}
}

// TestLoopDetected: a proxy whose upstream sends its requests back to it
// answers the request that comes back with 508 at once, forwarding
// nothing more, and warns of it once a minute at most.
func TestLoopDetected(t *testing.T) {
	var h *harness
	var relayed atomic.Int32
	// The upstream is a plain reverse proxy back to the proxy, as a
	// Service that selects the proxy's own pods would be.
	h = newHarness(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		relayed.Add(1)
		back, _ := url.Parse(h.proxy.URL)
		httputil.NewSingleHostReverseProxy(back).ServeHTTP(w, r)
	}))
	for range 3 {
		start := time.Now()
		resp := h.post("/v1/chat/completions", `{"model":"m","stream":true}`)
		var body apiError
		err := json.NewDecoder(resp.Body).Decode(&body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusLoopDetected || err != nil || body.Error.Code != "loop_detected" || body.Error.Type != "upstream_error" {
			t.Fatalf("%d %+v (%v), want 508 with an OpenAI-style error", resp.StatusCode, body, err)
		}
		if took := time.Since(start); took > 2*time.Second {
			t.Errorf("answered after %v", took)
		}
	}
	h.waitServed(6) // each request, and its return
	if n := relayed.Load(); n != 3 {
		t.Errorf("the loop relayed %d requests, want each once", n)
	}
	if n := h.logs.FilterMessageSnippet("came back to this proxy").Len(); n != 1 {
		t.Errorf("%d warnings of the loop, want 1", n)
	}
	fs := h.metrics()
	if v := fs.Value("itlproxy_requests_total", "model", "m", "code", "508"); v != 3 {
		t.Errorf("%v requests counted with the 508 they were answered, want 3", v)
	}
	if v := fs.Value("itlproxy_requests_total", "endpoint", "other", "code", "508"); v != 3 {
		t.Errorf("%v requests that came back counted, want 3", v)
	}
}

// TestLogLimit: the first event is logged, those within the interval
// after it are not, and the next one logged says how many were not.
func TestLogLimit(t *testing.T) {
	l := logLimit{every: time.Second}
	t0 := time.Unix(0, 0)
	for i, c := range []struct {
		at      time.Duration
		ok      bool
		skipped int
	}{{0, true, 0}, {100 * time.Millisecond, false, 0}, {999 * time.Millisecond, false, 0}, {time.Second, true, 2}, {1500 * time.Millisecond, false, 0}, {3 * time.Second, true, 1}} {
		if ok, skipped := l.allow(t0.Add(c.at)); ok != c.ok || skipped != c.skipped {
			t.Errorf("event %d at %v: %v with %d not logged, want %v with %d", i, c.at, ok, skipped, c.ok, c.skipped)
		}
	}
}
