//go:build itlproxy_parts

package proxy

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/itlproxy/itlproxy/metrics"
	"github.com/itlproxy/itlproxy/proxy/recorder"
)

// TestPartsSwitchOff runs the benchmark build's configurations in the
// order bench/run.sh does, each switching one more part off, and checks
// that each does what it says and nothing else: the client gets every byte
// as sent, whatever is off, and the metrics show exactly the parts left on.
func TestPartsSwitchOff(t *testing.T) {
	defer func(saved part) { partsOff = saved }(partsOff)
	var chunks [][]byte
	for i := range 5 {
		chunks = append(chunks, fmt.Appendf(nil, "data: {\"choices\":[{\"delta\":{\"content\":\"w%d\"}}]}\n\n", i))
	}
	chunks = append(chunks, []byte("data: [DONE]\n\n"))
	want := bytes.Join(chunks, nil)
	gaps := []time.Duration{0, time.Millisecond, time.Millisecond, time.Millisecond, time.Millisecond, 0}
	off := part(0)
	for _, step := range append([]namedPart{{"none", 0}}, partNames...) {
		off |= step.part
		partsOff = off
		t.Run(step.name, func(t *testing.T) {
			rec := recorder.New(recorder.Options{Last: 10, Slowest: 5, Window: time.Minute, MaxGaps: 64})
			h := newHarness(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "text/event-stream")
				writeChunks(w, r, chunks, gaps)
			}), func(c *Config, _ *metrics.Options) { c.Recorder, c.SessionHeader = rec, "X-Session-Id" })
			resp := h.post("/v1/chat/completions", `{"model":"m","stream":true}`, RequestIDHeader, "req-1", "X-Session-Id", "s-1")
			got, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			if err != nil || !bytes.Equal(got, want) {
				t.Fatalf("the client got %q (%v), want the upstream's bytes", got, err)
			}
			h.waitServed(1)
			requests := h.counter("itlproxy_requests_total")
			gapCount, _ := h.hist("itlproxy_inter_token_latency_seconds")
			model := h.counter("itlproxy_requests_total", "model", "m")
			sessions, _ := h.hist("itlproxy_time_to_first_token_by_turn_seconds")
			checks := []struct {
				what     string
				on, seen bool
			}{
				{"a recorded stream", partRecorder.on(), rec.Get("req-1") != nil},
				{"a session's turn", partSessions.on() && partObservations.on(), sessions > 0},
				{"4 gaps observed", partObservations.on() && partSplit.on(), gapCount == 4},
				{"the request counted", partExchange.on(), requests == 1},
				{"the model read from the body", partRouting.on() && partExchange.on(), model == 1},
			}
			for _, c := range checks {
				if c.on != c.seen {
					t.Errorf("%s: seen %v with off=%q (requests %v, gaps %d, model %v, session turns %d)",
						c.what, c.seen, PartsOff(), requests, gapCount, model, sessions)
				}
			}
		})
	}
}
