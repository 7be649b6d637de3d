package proxy

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/itlproxy/itlproxy/metrics"
	"github.com/itlproxy/itlproxy/proxy/recorder"
)

// TestRecorderSeesTheSpike sends a stream whose fifth gap is a spike and
// finds it in the recorder by its request id: the timeline holds every
// gap, the spike at its position, and the ids and measurements the proxy
// saw; the prompt, the completion and the headers are not there.
func TestRecorderSeesTheSpike(t *testing.T) {
	const spikeAt = 5
	var chunks [][]byte
	var gaps []time.Duration
	for i := range 10 {
		chunks = append(chunks, fmt.Appendf(nil, "data: {\"choices\":[{\"delta\":{\"content\":\"secret-completion-%d\"}}]}\n\n", i))
		gap := 5 * time.Millisecond
		if i == spikeAt {
			gap = 300 * time.Millisecond
		}
		gaps = append(gaps, gap)
	}
	chunks = append(chunks, []byte("data: [DONE]\n\n"))
	rec := recorder.New(recorder.Options{Last: 10, Slowest: 5, Window: time.Minute, MaxGaps: 64})
	h := newHarness(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { writeChunks(w, r, chunks, gaps) }),
		func(c *Config, _ *metrics.Options) { c.Recorder, c.SessionHeader = rec, "X-Session-Id" })
	resp := h.post("/v1/chat/completions", `{"model":"m","stream":true,"messages":[{"role":"user","content":"secret-prompt"}]}`,
		RequestIDHeader, "req-spike", "X-Session-Id", "sess-1", "Authorization", "Bearer secret-key")
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	h.waitServed(1)

	e := rec.Get("req-spike")
	if e == nil {
		t.Fatal("the stream is not recorded")
	}
	if e.Model != "m" || e.Endpoint != "chat_completions" || e.Outcome != metrics.OutcomeCompleted || e.SessionID != "sess-1" {
		t.Errorf("entry %+v", e.Stream)
	}
	if e.Gaps != 9 || len(e.Timeline) != 9 {
		t.Fatalf("%d gaps, %d in the timeline; want 9", e.Gaps, len(e.Timeline))
	}
	// Chunk 0 is the first token; gap i (from 1) ends chunk i, so the
	// spike before chunk 5 is gap 5, the timeline's [4].
	if e.LongestGapAt != spikeAt || e.LongestGap < 300*time.Millisecond {
		t.Errorf("longest gap %v at %d, want ≥300ms at %d", e.LongestGap, e.LongestGapAt, spikeAt)
	}
	for i, g := range e.Timeline {
		if spike := i == spikeAt-1; spike != (g.Length >= 300*time.Millisecond) {
			t.Errorf("gap [%d] is %v", i, g.Length)
		}
	}
	if e.TTFT <= 0 || e.TTFT >= 300*time.Millisecond || e.OutputTokens != 10 || e.Duration < 340*time.Millisecond {
		t.Errorf("TTFT %v, tokens %d, duration %v", e.TTFT, e.OutputTokens, e.Duration)
	}
	if got := rec.Slowest(recorder.ByLongestGap, 1); len(got) != 1 || got[0] != e {
		t.Errorf("slowest by gap: %v", got)
	}
	j := fmt.Sprintf("%+v", *e)
	for _, secret := range []string{"secret-prompt", "secret-completion", "secret-key", "Bearer"} {
		if strings.Contains(j, secret) {
			t.Errorf("the entry holds %q: %s", secret, j)
		}
	}
}

// TestRecorderSeesStreamsThatNeverStarted: a stream the upstream refused
// is recorded with its outcome and no timeline.
func TestRecorderSeesStreamsThatNeverStarted(t *testing.T) {
	rec := recorder.New(recorder.Options{Last: 10, MaxGaps: 64})
	h := newHarness(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "overloaded", http.StatusServiceUnavailable)
	}), func(c *Config, _ *metrics.Options) { c.Recorder = rec })
	resp := h.post("/v1/chat/completions", `{"model":"m","stream":true}`, RequestIDHeader, "req-503")
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	h.waitServed(1)
	e := rec.Get("req-503")
	if e == nil || e.Outcome != metrics.OutcomeUpstreamError || e.Gaps != 0 || e.TTFT != -1 {
		t.Fatalf("entry %+v", e)
	}
}
