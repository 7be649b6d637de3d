package proxy

import (
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/itlproxy/itlproxy/proxy/events"
)

// TestObservedWhileInFlight: the measurer records a stream's events while
// the stream is still in flight, not only when it ends: the TTFT and the
// first gaps are on /metrics while the upstream holds the rest back.
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
		time.Sleep(measureDelay)
	}
	close(release)
	_, _ = io.Copy(io.Discard, resp.Body)
	h.waitServed(1)
	if n := h.counter("itlproxy_streams_total", "outcome", "completed"); n != 1 {
		t.Errorf("completed streams %v, want 1", n)
	}
}

// TestQueueBound: reads queued faster than the measurer measures them
// never take the queue past its bound: the forwarding goroutine measures
// the queue itself first, and every event is measured, none dropped.
func TestQueueBound(t *testing.T) {
	p := meteredProxy(t)
	rec := benchRecorder()
	const streams, reads = 4, 600
	meters := make([]*meter, streams)
	for i := range meters {
		meters[i] = streamMeter(p, rec)
	}
	// Events of about 1 KiB: 2,400 of them are ten times the bound.
	ev := []byte(`data: {"choices":[{"delta":{"content":"` + strings.Repeat("x", 1000) + `"}}]}` + "\n\n")
	if e := events.ParseJSON(events.ChatCompletions, ev[len("data: "):len(ev)-2]); e.Invalid {
		t.Fatal("the test's event does not parse")
	}
	w := &p.measurer
	for i := range reads {
		for _, m := range meters {
			m.read(ev)
		}
		w.mu.Lock()
		queued := len(w.queue.bytes)
		w.mu.Unlock()
		if queued > maxQueuedBytes {
			t.Fatalf("after %d reads of each stream, %d bytes queued, over the bound of %d", i+1, queued, maxQueuedBytes)
		}
	}
	for _, m := range meters {
		m.drain()
		if m.tally.Events != reads || m.stream.Gaps().Count != reads-1 {
			t.Errorf("a stream measured %d events and %d gaps, want %d and %d", m.tally.Events, m.stream.Gaps().Count, reads, reads-1)
		}
	}
}
