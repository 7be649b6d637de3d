package metrics

import (
	"math"
	"testing"
	"time"
)

func TestLoadBand(t *testing.T) {
	for _, c := range []struct {
		n    int64
		want string
	}{
		{-1, "1"}, {0, "1"}, {1, "1"}, {2, "2"}, {3, "3-4"}, {4, "3-4"}, {5, "5-8"}, {8, "5-8"},
		{9, "9-16"}, {16, "9-16"}, {17, "17-32"}, {32, "17-32"}, {33, "33-64"}, {64, "33-64"},
		{65, "65-128"}, {128, "65-128"}, {129, "129-256"}, {256, "129-256"}, {257, "257-512"},
		{512, "257-512"}, {513, "513+"}, {1 << 20, "513+"}, {math.MaxInt64, "513+"},
	} {
		if got := loadBandLabels[loadBand(c.n)]; got != c.want {
			t.Errorf("loadBand(%d) = %s, want %s", c.n, got, c.want)
		}
	}
	// Each band's upper bound is the largest count in it.
	for i := range loadBands - 1 {
		up := int64(loadBandUpper(i))
		if loadBand(up) != i || loadBand(up+1) != i+1 {
			t.Errorf("band %s: upper bound %d does not end it", loadBandLabels[i], up)
		}
	}
	if !math.IsInf(loadBandUpper(loadBands-1), 1) {
		t.Error("the last band is unbounded")
	}
}

// TestLoadBandsMadeWhenReached: a band's series appear when the model's
// load first reaches it, with every band under it and its bound; a gap
// allocates nothing, whether its band is new to the stream or not, once
// the band exists.
func TestLoadBandsMadeWhenReached(t *testing.T) {
	m, reg := newTestMetrics(t, Options{MaxModels: 2})
	l := m.RequestLabels("m", "chat_completions", "", "")
	bands := func() []string {
		var out []string
		for _, s := range gather(t, reg).Series("itlproxy_inter_token_latency_by_load_seconds") {
			for _, lp := range s.GetLabel() {
				if lp.GetName() == "load" {
					out = append(out, lp.GetValue())
				}
			}
		}
		return out
	}
	first := m.StartStream(l, IDs{})
	if got := bands(); len(got) != 0 {
		t.Fatalf("bands %v before any token", got)
	}
	first.FirstToken(time.Millisecond)
	first.Gap(time.Millisecond, 0)
	if got := bands(); len(got) != 1 || got[0] != "1" {
		t.Fatalf("bands %v at one stream in flight, want [1]", got)
	}
	var more []*Stream
	for range 4 {
		more = append(more, m.StartStream(l, IDs{}))
	}
	first.Gap(time.Millisecond, 2) // 5 streams in flight: band 5-8
	if got := bands(); len(got) != 4 {
		t.Fatalf("bands %v at five streams in flight, want 1 to 5-8", got)
	}
	fs := gather(t, reg)
	if got := fs.Value("itlproxy_load_band_upper_streams", "load", "5-8"); got != 8 {
		t.Errorf("bound of 5-8: %v", got)
	}
	if n := len(fs.Series("itlproxy_load_band_upper_streams")); n != 4 {
		t.Errorf("%d band bounds exported, want 4", n)
	}
	if n, _ := fs.Histogram("itlproxy_inter_token_latency_per_token_seconds"); n != 1 {
		t.Errorf("per-token ITL observed %d times, want 1", n)
	}
	if allocs := testing.AllocsPerRun(1000, func() {
		first.Gap(time.Millisecond, 2)
		more[0].FirstToken(time.Millisecond)
	}); allocs != 0 {
		t.Errorf("%v allocations per gap", allocs)
	}
	for _, s := range append(more, first) {
		s.End(StreamEnd{Outcome: OutcomeCompleted, TPOT: -1})
	}
}
