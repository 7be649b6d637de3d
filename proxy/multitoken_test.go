package proxy

import (
	"fmt"
	"io"
	"net/http"
	"testing"
	"time"
)

// TestSeveralTokensPerEvent: a server sending two tokens per event (as
// speculative decoding or vLLM's stream intervals do). With cumulative
// usage on every event (continuous_usage_stats), each event's count is
// observed and each gap is also seen per token; with usage only at the
// end, the stream's average is observed once per event. TPOT comes from
// the usage either way.
func TestSeveralTokensPerEvent(t *testing.T) {
	const events, gap = 5, 40 * time.Millisecond
	for _, continuous := range []bool{true, false} {
		t.Run(fmt.Sprintf("continuous usage %v", continuous), func(t *testing.T) {
			var chunks [][]byte
			var gaps []time.Duration
			for i := range events {
				usage := ""
				if continuous {
					usage = fmt.Sprintf(`,"usage":{"prompt_tokens":7,"completion_tokens":%d}`, 2*(i+1))
				}
				chunks = append(chunks, fmt.Appendf(nil, `data: {"choices":[{"delta":{"content":"ab"}}]%s}`+"\n\n", usage))
				gaps = append(gaps, gap)
			}
			chunks = append(chunks, fmt.Appendf(nil, `data: {"choices":[],"usage":{"prompt_tokens":7,"completion_tokens":%d}}`+"\n\ndata: [DONE]\n\n", 2*events))
			gaps = append(gaps, 0)
			h := newHarness(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { writeChunks(w, r, chunks, gaps) }))
			resp := h.post("/v1/chat/completions", `{"model":"m","stream":true}`)
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			h.waitServed(1)

			n, sum := h.hist("itlproxy_tokens_per_event", "model", "m")
			if n != events || sum != 2*events {
				t.Errorf("tokens per event: %d observations summing to %v, want %d summing to %d", n, sum, events, 2*events)
			}
			n, sum = h.hist("itlproxy_inter_token_latency_per_token_seconds", "model", "m")
			if continuous {
				// 4 gaps of 40ms, each over the 2 tokens of the event ending it.
				// The first event's read may return late, so the span can be
				// a little under the upstream's 160 ms: 10% below is allowed.
				if n != events-1 || sum < 4*0.020*0.9 || sum > 4*0.020+0.02 {
					t.Errorf("per-token gaps: count %d sum %.4f, want 4 and about 0.080", n, sum)
				}
			} else if n != 0 {
				t.Errorf("per-token gaps observed without per-event counts: %d", n)
			}
			// TPOT: 4 gaps of 40ms over 10 tokens: 160ms / 9.
			n, sum = h.hist("itlproxy_time_per_output_token_seconds", "model", "m")
			if want := 0.160 / 9; n != 1 || sum < want*0.9 || sum > want*1.25 {
				t.Errorf("TPOT count %d sum %.4f, want 1 and %.4f", n, sum, want)
			}
			if out := h.counter("itlproxy_output_tokens_total"); out != 2*events {
				t.Errorf("output tokens %v", out)
			}
			if n, _ := h.hist("itlproxy_inter_token_latency_seconds"); n != events-1 {
				t.Errorf("ITL count %d: still one per gap between events", n)
			}
		})
	}
}
