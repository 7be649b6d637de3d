package proxy

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/itlproxy/itlproxy/metrics"
	"github.com/itlproxy/itlproxy/proxy/events"
)

func TestWithUsageRequested(t *testing.T) {
	for _, c := range []struct{ name, in, want string }{
		{"no stream_options", `{"model":"m","stream":true}`, `{"model":"m","stream":true,"stream_options":{"include_usage":true}}`},
		{"white space kept", "{ \"model\": \"m\", \"stream\": true }\n", "{ \"model\": \"m\", \"stream\": true ,\"stream_options\":{\"include_usage\":true}}\n"},
		{"stream_options null", `{"stream":true,"stream_options":null,"x":1}`, `{"stream":true,"stream_options":{"include_usage":true},"x":1}`},
		{"empty stream_options", `{"stream":true,"stream_options":{}}`, `{"stream":true,"stream_options":{"include_usage":true}}`},
		{"other options kept", `{"stream":true,"stream_options":{"continuous_usage_stats":false}}`, `{"stream":true,"stream_options":{"include_usage":true,"continuous_usage_stats":false}}`},
		{"include_usage false", `{"stream":true,"stream_options":{"include_usage": false}}`, `{"stream":true,"stream_options":{"include_usage": true}}`},
		{"asked already", `{"stream":true,"stream_options":{"include_usage":true}}`, ``},
		{"stream_options not an object", `{"stream":true,"stream_options":"x"}`, ``},
		{"not JSON", `model=m`, ``},
	} {
		got := events.WithUsageRequested([]byte(c.in))
		if string(got) != c.want {
			t.Errorf("%s: %q, want %q", c.name, got, c.want)
		}
		if got != nil && !json.Valid(got) {
			t.Errorf("%s: the result is not JSON", c.name)
		}
	}
}

// openAILike streams as OpenAI's API does: with include_usage it adds
// "usage":null to every chunk and a usage-only chunk before [DONE];
// without, neither.
func openAILike(events int, crlf bool) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if int64(len(body)) != r.ContentLength && r.ContentLength >= 0 {
			http.Error(w, "bad Content-Length", http.StatusBadRequest)
			return
		}
		withUsage := bytes.Contains(body, []byte(`"include_usage":true`))
		nl := "\n"
		if crlf {
			nl = "\r\n"
		}
		var chunks [][]byte
		for i := range events {
			usage := ""
			if withUsage {
				usage = `,"usage":null`
			}
			chunks = append(chunks, fmt.Appendf(nil, `data: {"id":"c","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":"t%d"},"finish_reason":null}]%s}`+nl+nl, i, usage))
		}
		if withUsage {
			chunks = append(chunks, fmt.Appendf(nil, `data: {"id":"c","object":"chat.completion.chunk","choices":[],"usage":{"prompt_tokens":5,"completion_tokens":%d,"total_tokens":%d}}`+nl+nl, events, events+5))
		}
		chunks = append(chunks, []byte("data: [DONE]"+nl+nl))
		writeChunks(w, r, chunks, nil)
	}
}

// TestUsageInjection: with injection on, a client that did not ask for
// usage receives exactly what the upstream sends without it, and the
// tokens are counted from the usage the proxy asked for; a client that
// asked gets the usage as the upstream sends it.
func TestUsageInjection(t *testing.T) {
	for _, crlf := range []bool{false, true} {
		up := openAILike(6, crlf)
		direct := newHarness(t, up) // the proxy without injection: what the upstream sends
		injecting := newHarness(t, up, func(c *Config, _ *metrics.Options) { c.InjectUsage = true })
		read := func(h *harness, body string) string {
			resp := h.post("/v1/chat/completions", body)
			b, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			if err != nil || resp.StatusCode != http.StatusOK {
				t.Fatalf("%d %v %s", resp.StatusCode, err, b)
			}
			h.waitServed(1)
			return string(b)
		}
		plain := `{"model":"m","stream":true}`
		want := read(direct, plain)
		if strings.Contains(want, "usage") {
			t.Fatalf("the upstream sent usage unasked: %q", want)
		}
		if got := read(injecting, plain); got != want {
			t.Errorf("crlf %v: with injection the client got\n%q\nwant\n%q", crlf, got, want)
		}
		if out, in := injecting.counter("itlproxy_output_tokens_total"), injecting.counter("itlproxy_input_tokens_total"); out != 6 || in != 5 {
			t.Errorf("tokens from the injected usage: output %v input %v, want 6 and 5", out, in)
		}
		if n, _ := injecting.hist("itlproxy_time_per_output_token_seconds"); n != 1 {
			t.Errorf("TPOT count %d", n)
		}
		asked := `{"model":"m","stream":true,"stream_options":{"include_usage":true}}`
		if got, want := read(injecting, asked), read(direct, asked); got != want || !strings.Contains(got, `"prompt_tokens":5`) {
			t.Errorf("a client that asked for usage got\n%q\nwant\n%q", got, want)
		}
	}
}

// TestUsageStripperCuts: the stripper gives the same bytes however the
// upstream's stream is cut.
func TestUsageStripperCuts(t *testing.T) {
	in := "data: {\"choices\":[{\"delta\":{\"content\":\"a\"}}],\"usage\":null}\r\n\r\n" +
		": keep-alive\n\n" +
		"data: {\"usage\":null, \"choices\":[{\"delta\":{\"content\":\"b\"}}]}\n\n" +
		"event: message\ndata: {\"choices\":[],\"usage\":{\"prompt_tokens\":1,\"completion_tokens\":2}}\r\r" +
		"data: {\"choices\":[{\"delta\":{\"content\":\"c\"}}],\"usage\":{\"completion_tokens\":3}}\n\n" +
		"data: [DONE]\n\n"
	want := "data: {\"choices\":[{\"delta\":{\"content\":\"a\"}}]}\r\n\r\n" +
		": keep-alive\n\n" +
		"data: {\"choices\":[{\"delta\":{\"content\":\"b\"}}]}\n\n" +
		"data: {\"choices\":[{\"delta\":{\"content\":\"c\"}}],\"usage\":{\"completion_tokens\":3}}\n\n" +
		"data: [DONE]\n\n"
	for how, chunks := range chunkings([]byte(in)) {
		u := events.NewUsageStripper(io.NopCloser(&chunkReader{chunks: chunks}), 1<<20, copyBufferSize)
		got, err := io.ReadAll(u)
		if err != nil || string(got) != want {
			t.Fatalf("%s: %q, %v; want %q", how, got, err, want)
		}
	}
}

// chunkReader returns its chunks one read at a time.
type chunkReader struct{ chunks [][]byte }

func (c *chunkReader) Read(p []byte) (int, error) {
	if len(c.chunks) == 0 {
		return 0, io.EOF
	}
	n := copy(p, c.chunks[0])
	if c.chunks[0] = c.chunks[0][n:]; len(c.chunks[0]) == 0 {
		c.chunks = c.chunks[1:]
	}
	return n, nil
}
