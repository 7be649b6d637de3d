package proxy

import (
	"compress/gzip"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/itlproxy/itlproxy/metrics"
)

// TestInjectionAsksForIdentity: when the proxy asks for usage on a client's
// behalf, it asks the upstream for an uncompressed stream, so that it can
// take out what asking added, even from a client that accepts gzip (as
// Go's and most SDKs' HTTP clients do by default). The client gets the
// stream the upstream sends without usage, and the tokens are counted.
func TestInjectionAsksForIdentity(t *testing.T) {
	up := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		w.Header().Set("Content-Type", "text/event-stream")
		var out io.Writer = w
		if strings.Contains(r.Header.Get("Accept-Encoding"), "gzip") {
			w.Header().Set("Content-Encoding", "gzip")
			zw := gzip.NewWriter(w)
			defer zw.Close()
			out = zw
		}
		_, _ = io.WriteString(out, `data: {"choices":[{"index":0,"delta":{"content":"x"}}]}`+"\n\n")
		if strings.Contains(string(body), "include_usage") {
			_, _ = io.WriteString(out, `data: {"choices":[],"usage":{"prompt_tokens":5,"completion_tokens":1}}`+"\n\n")
		}
		_, _ = io.WriteString(out, "data: [DONE]\n\n")
	})
	h := newHarness(t, up, func(c *Config, _ *metrics.Options) { c.InjectUsage = true })
	req, err := http.NewRequest(http.MethodPost, h.proxy.URL+"/v1/chat/completions", strings.NewReader(`{"model":"m","stream":true}`))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Accept-Encoding", "gzip") // set by hand: the client sees the body as sent
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if want := `data: {"choices":[{"index":0,"delta":{"content":"x"}}]}` + "\n\ndata: [DONE]\n\n"; err != nil || string(got) != want ||
		resp.Header.Get("Content-Encoding") != "" {
		t.Errorf("client got %q (Content-Encoding %q), %v; want %q", got, resp.Header.Get("Content-Encoding"), err, want)
	}
	h.waitServed(1)
	if out, in := h.counter("itlproxy_output_tokens_total"), h.counter("itlproxy_input_tokens_total"); out != 1 || in != 5 {
		t.Errorf("tokens from the injected usage: output %v input %v, want 1 and 5", out, in)
	}
}
