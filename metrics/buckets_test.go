package metrics

import (
	"math"
	"slices"
	"testing"
	"time"

	"github.com/itlproxy/itlproxy/metrics/scrape"
)

// TestJudgedBreakdownBounds: each breakdown histogram that an objective
// judges has every objective of that kind (the default's, each model's and
// each class's) among its classic bucket bounds, so that the breaches of a
// band can be counted from its buckets as they are from the main
// histogram's; its other bounds are its own set (coarse but for the
// per-endpoint ladders; no other kind's objective, and not the stall
// threshold).
func TestJudgedBreakdownBounds(t *testing.T) {
	// Objectives that are no bucket bound already, each kind different
	// for the default, a model and a class.
	objectives := map[string][]time.Duration{
		SLOTTFT:   {700 * time.Millisecond, 2200 * time.Millisecond, 300 * time.Millisecond},
		SLOITL:    {40 * time.Millisecond, 70 * time.Millisecond, 15 * time.Millisecond},
		SLOTPOT:   {33 * time.Millisecond, 55 * time.Millisecond, 22 * time.Millisecond},
		SLOMaxGap: {1500 * time.Millisecond, 3 * time.Second, 800 * time.Millisecond},
	}
	nth := func(i int) Objectives {
		return Objectives{TTFT: objectives[SLOTTFT][i], ITL: objectives[SLOITL][i],
			TPOT: objectives[SLOTPOT][i], MaxGap: objectives[SLOMaxGap][i]}
	}
	m, reg := newTestMetrics(t, Options{MaxModels: 4, SessionMax: 4, SessionTTL: time.Hour,
		StallThreshold: 2 * time.Second,
		SLOs: SLOs{Default: nth(0), Models: map[string]Objectives{"big": nth(1)},
			Classes: map[string]Class{"interactive": {Default: Override{Objectives: nth(2), Set: 15}}}}})
	m.UpstreamsChanged([]string{"10.0.0.1:8000"}, nil)
	s := m.StartStream(m.RequestLabels("m", "chat_completions", "", ""), IDs{Session: "s"})
	s.SetUpstream("10.0.0.1:8000")
	s.FirstToken(500 * time.Millisecond)
	s.Gap(30*time.Millisecond, 0)
	s.Gap(30*time.Millisecond, 0)
	s.End(StreamEnd{Outcome: OutcomeCompleted, TPOT: 30 * time.Millisecond, Events: 3, OutputTokens: 3, InputTokens: 2000})
	fs := gather(t, reg)

	for _, c := range []struct {
		name   string
		family string
		slo    string
		coarse []float64
	}{
		{"ITL by load", "itlproxy_inter_token_latency_by_load_seconds", SLOITL, breakdownGapBuckets},
		{"ITL by position", "itlproxy_inter_token_latency_by_position_seconds", SLOITL, breakdownGapBuckets},
		{"TPOT by context", "itlproxy_time_per_output_token_by_context_seconds", SLOTPOT, breakdownGapBuckets},
		{"TTFT by load", "itlproxy_time_to_first_token_by_load_seconds", SLOTTFT, breakdownTTFTBuckets},
		{"TTFT by turn", "itlproxy_time_to_first_token_by_turn_seconds", SLOTTFT, breakdownTTFTBuckets},
		{"longest gap of each stream", "itlproxy_stream_max_gap_seconds", SLOMaxGap, maxGapBuckets},
		{"ITL by upstream endpoint", "itlproxy_upstream_inter_token_latency_seconds", SLOITL, upstreamGapBuckets},
		{"TTFT by upstream endpoint", "itlproxy_upstream_time_to_first_token_seconds", SLOTTFT, upstreamTTFTBuckets},
	} {
		t.Run(c.name, func(t *testing.T) {
			series := fs.Series(c.family)
			if len(series) == 0 {
				t.Fatalf("%s has no series", c.family)
			}
			var want []float64
			for _, d := range objectives[c.slo] {
				want = append(want, d.Seconds())
			}
			for _, sr := range series {
				var bounds []float64
				for _, b := range sr.GetHistogram().GetBucket() {
					bounds = append(bounds, b.GetUpperBound())
				}
				for _, w := range want {
					if !slices.Contains(bounds, w) {
						t.Errorf("%s has no classic bucket bound at the %s objective %v: %v", c.family, c.slo, w, bounds)
					}
				}
				for _, b := range bounds {
					if !slices.Contains(want, b) && !slices.Contains(c.coarse, b) {
						t.Errorf("%s has a classic bucket bound %v that is neither its own nor a %s objective", c.family, b, c.slo)
					}
				}
			}
		})
	}
}

// TestUpstreamBucketsSeparatePods: the per-endpoint ladders put a p99 read
// by histogram_quantile (scrape.HistogramQuantile, as PromQL computes it)
// of two pods k times apart at least so far apart, wherever the faster
// pod's gaps or TTFT fall from the ladder's first bound to where the
// slower pod's reach its last, for pods whose observations are all alike
// or spread uniformly over up to half as much again: 2x apart read at
// least 1.4x apart, 2.5x and 3x apart more than 2x apart (what the
// slow-endpoint alert compares with).
func TestUpstreamBucketsSeparatePods(t *testing.T) {
	for _, c := range []struct {
		name   string
		bounds []float64
	}{{"ITL", upstreamGapBuckets}, {"TTFT", upstreamTTFTBuckets}} {
		for _, k := range []struct{ apart, least float64 }{{2, 1.4}, {2.5, 2}, {3, 2}} {
			for _, spread := range []float64{0, 0.1, 0.3, 0.5} {
				worst, at := math.Inf(1), 0.0
				for v := c.bounds[0]; v*k.apart*(1+spread) <= c.bounds[len(c.bounds)-1]; v *= 1.005 {
					fast, slow := pointsInBuckets(c.bounds, v, spread, 1), pointsInBuckets(c.bounds, v, spread, k.apart)
					if r := scrape.HistogramQuantile(0.99, slow) / scrape.HistogramQuantile(0.99, fast); r < worst {
						worst, at = r, v
					}
				}
				if worst <= k.least {
					t.Errorf("%s, pods %vx apart, spread %v: p99s read %.3fx apart at %v, want at least %vx", c.name, k.apart, spread, worst, at, k.least)
				}
			}
		}
	}
}

// pointsInBuckets returns the classic histogram over bounds of 1,000
// observations spread uniformly from scale·v to scale·v·(1+spread).
func pointsInBuckets(bounds []float64, v, spread, scale float64) scrape.Buckets {
	b := scrape.Buckets{Bounds: bounds, Cumulative: make([]uint64, len(bounds)), Count: 1000}
	for i := range 1000 {
		x := scale * v * (1 + spread*float64(i)/999)
		b.Sum += x
		for j, bound := range bounds {
			if x <= bound {
				b.Cumulative[j]++
			}
		}
	}
	return b
}
