package proxy

import (
	"math/rand/v2"
	"testing"

	"github.com/itlproxy/itlproxy/metrics"
	"github.com/itlproxy/itlproxy/proxy/events"
)

// TestScannerReadsFixtures: the scanner itlbench reads streams with
// finds in every recorded stream, in every framing and cut into random
// reads, the same token-bearing events and usage that the proxy's own
// measurement finds (checkStreamMetrics holds the proxy to the same
// fixture table).
func TestScannerReadsFixtures(t *testing.T) {
	forEachFraming(t, func(t *testing.T, fx fixture, _, stream string) {
		tokens, done, failed := 0, false, false
		output := int64(-1)
		s := events.NewScanner(fx.api(), 1<<20, func(e events.Event, _ events.Stamp) {
			if e.Invalid || e.Oversized {
				t.Errorf("unreadable event: %+v", e)
			}
			if e.Token {
				tokens++
			}
			if e.HasUsage && e.OutputTokens >= 0 {
				output = e.OutputTokens
			}
			done = done || e.Done
			failed = failed || e.Failed
		})
		rng := rand.New(rand.NewPCG(uint64(len(stream)), 7))
		for rest := []byte(stream); len(rest) > 0; {
			n := min(len(rest), 1+rng.IntN(100))
			s.Write(rest[:n], events.Stamp{})
			rest = rest[n:]
		}
		if s.End() {
			t.Error("a complete stream read as truncated")
		}
		if output < 0 {
			output = int64(tokens)
		}
		wantFailed := fx.outcome == metrics.OutcomeUpstreamError
		if tokens != fx.tokens || output != fx.output || failed != wantFailed {
			t.Errorf("%d tokens, output %d, failed %v; want %d, %d, %v", tokens, output, failed, fx.tokens, fx.output, wantFailed)
		}
	})
}
