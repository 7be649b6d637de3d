package proxy

import (
	"io"
	"net/http"
	"testing"
	"time"
)

// TestObservedWhileInFlight: a stream's events are measured while the
// stream is in flight, not only when it ends: once the client has read
// three events, the TTFT and the first two gaps are on /metrics while the
// upstream holds the rest back (the last read is measured as the proxy
// waits for the next).
func TestObservedWhileInFlight(t *testing.T) {
	release := make(chan struct{})
	h := newHarness(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		writeChunks(w, r, [][]byte{[]byte(token), []byte(token), []byte(token)}, nil)
		<-release
		writeChunks(w, r, [][]byte{[]byte("data: [DONE]\n\n")}, nil)
	}))
	resp := h.post("/v1/chat/completions", `{"model":"m","stream":true}`)
	defer resp.Body.Close()
	buf := make([]byte, 3*len(token))
	if _, err := io.ReadFull(resp.Body, buf); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		ttft, _ := h.hist("itlproxy_time_to_first_token_seconds", "model", "m")
		gaps, _ := h.hist("itlproxy_inter_token_latency_seconds", "model", "m")
		if ttft == 1 && gaps == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after 5s in flight: %d TTFT and %d gaps observed, want 1 and 2", ttft, gaps)
		}
		time.Sleep(time.Millisecond)
	}
	close(release)
	_, _ = io.Copy(io.Discard, resp.Body)
	h.waitServed(1)
	if n := h.counter("itlproxy_streams_total", "outcome", "completed"); n != 1 {
		t.Errorf("completed streams %v, want 1", n)
	}
}
