package proxy

import (
	"io"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"unsafe"

	"github.com/itlproxy/itlproxy/metrics"
)

func TestTraceID(t *testing.T) {
	for in, want := range map[string]string{
		"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01":     "4bf92f3577b34da6a3ce929d0e0e4736",
		"01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-xyz": "4bf92f3577b34da6a3ce929d0e0e4736", // a later version may add fields
		"00-00000000000000000000000000000000-00f067aa0ba902b7-01":     "",                                 // all zeros is invalid
		"ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01":     "",                                 // version ff is invalid
		"00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01":     "",                                 // upper case is invalid
		"00-4bf92f3577b34da6a3ce929d0e0e4736":                         "",
		"":                                                            "",
	} {
		if got := traceID(in); got != want {
			t.Errorf("traceID(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestRequestIDs: every response carries the request id the proxy logs
// and puts in exemplars: the client's, else the upstream's, else a new one.
func TestRequestIDs(t *testing.T) {
	upstreamID := ""
	h := newHarness(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if upstreamID != "" {
			w.Header().Set("X-Request-Id", upstreamID)
		}
		writeChunks(w, r, [][]byte{[]byte(`data: {"choices":[{"delta":{"content":"x"}}]}` + "\n\ndata: [DONE]\n\n")}, nil)
	}))
	generated := regexp.MustCompile(`^[0-9a-f]{32}$`)
	for _, c := range []struct {
		name, client, upstream string
		want                   func(string) bool
	}{
		{"client's kept", "client-abc-123", "", func(id string) bool { return id == "client-abc-123" }},
		{"client's wins over upstream's", "client-abc-123", "req_upstream_9", func(id string) bool { return id == "client-abc-123" }},
		{"upstream's adopted", "", "req_upstream_9", func(id string) bool { return id == "req_upstream_9" }},
		{"generated", "", "", generated.MatchString},
		{"invalid client id replaced", "has spaces in it", "", generated.MatchString},
	} {
		upstreamID = c.upstream
		resp := h.post("/v1/chat/completions", `{"model":"m","stream":true}`, "X-Request-Id", c.client)
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		h.waitServed(1)
		if got := resp.Header.Get("X-Request-Id"); !c.want(got) {
			t.Errorf("%s: response X-Request-Id %q", c.name, got)
		}
		logged := h.logs.FilterMessage("request").All()
		if got := logged[len(logged)-1].ContextMap()["request_id"]; got != resp.Header.Get("X-Request-Id") {
			t.Errorf("%s: logged %v, returned %q", c.name, got, resp.Header.Get("X-Request-Id"))
		}
	}

	// The proxy's own answers carry one too.
	dead := newHarness(t, nil, func(c *Config, _ *metrics.Options) { c.Upstream, _ = url.Parse("http://127.0.0.1:1") })
	resp := dead.post("/v1/chat/completions", `{"model":"m"}`)
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadGateway || !generated.MatchString(resp.Header.Get("X-Request-Id")) {
		t.Errorf("502: X-Request-Id %q", resp.Header.Get("X-Request-Id"))
	}
	big := newHarness(t, nil, func(c *Config, _ *metrics.Options) { c.MaxRequestBytes = 10 })
	resp = big.post("/v1/chat/completions", strings.Repeat("x", 100), "X-Request-Id", "mine")
	resp.Body.Close()
	if resp.StatusCode != http.StatusRequestEntityTooLarge || resp.Header.Get("X-Request-Id") != "mine" {
		t.Errorf("413: X-Request-Id %q", resp.Header.Get("X-Request-Id"))
	}
}

// TestIDsKeptAtTheirCut: the ids a request brings are kept as copies of
// their first metrics.MaxIDBytes, cut at a character boundary, so that a
// stream keeps nothing of a client's 60 KB header, traceparent or user.
func TestIDsKeptAtTheirCut(t *testing.T) {
	p := &Proxy{cfg: Config{SessionHeader: "X-Session-Id", SessionFromUser: true}}
	within := func(kept, from string) bool {
		start := uintptr(unsafe.Pointer(unsafe.StringData(from)))
		at := uintptr(unsafe.Pointer(unsafe.StringData(kept)))
		return kept != "" && at >= start && at < start+uintptr(len(from))
	}
	session := strings.Repeat("é", 30_000)
	traceparent := "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01" + strings.Repeat("-x", 30_000)
	r, _ := http.NewRequest(http.MethodPost, "http://proxy/v1/chat/completions", nil)
	r.Header.Set("X-Session-Id", session)
	r.Header.Set("Traceparent", traceparent)
	ids, _ := p.requestIDs(r, "")
	if ids.Session != strings.Repeat("é", metrics.MaxIDBytes/2) || within(ids.Session, r.Header.Get("X-Session-Id")) {
		t.Errorf("session id of %d bytes kept, sharing the header's memory: %v", len(ids.Session), within(ids.Session, r.Header.Get("X-Session-Id")))
	}
	if ids.Trace != "4bf92f3577b34da6a3ce929d0e0e4736" || within(ids.Trace, r.Header.Get("Traceparent")) {
		t.Errorf("trace id %q kept, sharing the header's memory: %v", ids.Trace, within(ids.Trace, r.Header.Get("Traceparent")))
	}

	user := strings.Repeat("u", 1000) + "\xff"
	r.Header.Del("X-Session-Id")
	if ids, _ := p.requestIDs(r, user); ids.Session != strings.Repeat("u", metrics.MaxIDBytes) || within(ids.Session, user) {
		t.Errorf("user of %d bytes kept as the session id, sharing the body's memory: %v", len(ids.Session), within(ids.Session, user))
	}
}
