package proxy

import (
	"bytes"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/itlproxy/itlproxy/metrics"
)

// TestIdleTimeoutIsTheUpstreams: the idle timeout counts only while the
// proxy waits for the upstream. A client that stops reading for longer
// than the timeout, while the upstream sends without pause, still gets
// the whole stream, and the stream is completed, not idle_timeout.
func TestIdleTimeoutIsTheUpstreams(t *testing.T) {
	big := bytes.Repeat([]byte(token), (8<<20)/len(token)) // past every buffer on the way
	want := append(append([]byte{}, big...), "data: [DONE]\n\n"...)
	h := newHarness(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "text/event-stream")
		for i := 0; i < len(big); i += 64 << 10 {
			if _, err := w.Write(big[i:min(i+64<<10, len(big))]); err != nil {
				return
			}
			w.(http.Flusher).Flush()
		}
		_, _ = io.WriteString(w, "data: [DONE]\n\n")
	}), func(c *Config, _ *metrics.Options) { c.StreamIdleTimeout = 300 * time.Millisecond })
	resp := h.post("/v1/chat/completions", `{"model":"m","stream":true}`)
	time.Sleep(1500 * time.Millisecond) // the client is busy elsewhere
	got, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil || !bytes.Equal(got, want) {
		t.Errorf("client got %d of %d bytes (equal %v), %v", len(got), len(want), bytes.Equal(got, want), err)
	}
	h.waitServed(1)
	if n := h.counter("itlproxy_streams_total", "outcome", metrics.OutcomeCompleted); n != 1 {
		t.Errorf("completed streams %v, want 1 (idle_timeout %v)", n, h.counter("itlproxy_streams_total", "outcome", metrics.OutcomeIdleTimeout))
	}
}

// TestIdleAfterDone: an upstream that keeps the connection open after
// [DONE] is not cut by the idle timeout: the client reads every byte to the
// response's end, and the stream is completed.
func TestIdleAfterDone(t *testing.T) {
	h := newHarness(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		writeChunks(w, r, [][]byte{[]byte(token), []byte("data: [DONE]\n\n")}, nil)
		select {
		case <-r.Context().Done():
		case <-time.After(time.Second):
		}
	}), func(c *Config, _ *metrics.Options) { c.StreamIdleTimeout = 200 * time.Millisecond })
	resp := h.post("/v1/chat/completions", `{"model":"m","stream":true}`)
	got, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if want := token + "data: [DONE]\n\n"; err != nil || string(got) != want {
		t.Errorf("client got %q, %v; want %q and a clean end", got, err, want)
	}
	h.waitServed(1)
	if n := h.counter("itlproxy_streams_total", "outcome", metrics.OutcomeCompleted); n != 1 {
		t.Errorf("completed streams %v, want 1 (idle_timeout %v)", n, h.counter("itlproxy_streams_total", "outcome", metrics.OutcomeIdleTimeout))
	}
}
