package metrics

import (
	"testing"
	"time"
)

// TestEngine: the engine's figures are recorded where reported, and the
// overhead ratio only for a stream that has both clocks.
func TestEngine(t *testing.T) {
	m, reg := newTestMetrics(t, Options{MaxModels: 4})
	l := m.RequestLabels("m", "ollama_chat", "", "")
	m.Engine(l, 20*time.Millisecond, 0, 25*time.Millisecond) // a stream
	m.Engine(l, 20*time.Millisecond, 0, -1)                  // a body: no wire TPOT
	m.Engine(l, 0, 100*time.Millisecond, 30*time.Millisecond)
	fs := gather(t, reg)
	if n, sum := fs.Histogram("itlproxy_engine_time_per_output_token_seconds"); n != 2 || sum != 0.04 {
		t.Errorf("engine TPOT: %d observations, sum %v; want 2, 0.04", n, sum)
	}
	if n, sum := fs.Histogram("itlproxy_engine_time_to_first_token_seconds"); n != 1 || sum != 0.1 {
		t.Errorf("engine TTFT: %d observations, sum %v; want 1, 0.1", n, sum)
	}
	if n, sum := fs.Histogram("itlproxy_wire_overhead_ratio", "endpoint", "ollama_chat"); n != 1 || sum != 1.25 {
		t.Errorf("overhead: %d observations, sum %v; want 1, 1.25", n, sum)
	}
}
