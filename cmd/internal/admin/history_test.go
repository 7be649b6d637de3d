package admin

import (
	"math"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/itlproxy/itlproxy/metrics"
	"github.com/itlproxy/itlproxy/metrics/scrape"
)

// TestWindowIsTheDifference: a window's rates and quantiles count only
// what happened since the sample at its start, as PromQL's increase and
// histogram_quantile over a range do.
func TestWindowIsTheDifference(t *testing.T) {
	reg := prometheus.NewRegistry()
	rec, err := metrics.New(reg, metrics.Options{MaxModels: 4, SLOs: metrics.SLOs{Default: metrics.Objectives{TTFT: 100 * time.Millisecond}}})
	if err != nil {
		t.Fatal(err)
	}
	l := rec.RequestLabels("m", "chat_completions", "", "")
	streamOf := func(ttft, gap time.Duration, gaps int) {
		s := rec.StartStream(l, metrics.IDs{})
		s.FirstToken(ttft)
		for range gaps {
			s.Gap(gap, 1)
		}
		s.End(metrics.StreamEnd{Outcome: metrics.OutcomeCompleted, TPOT: -1, OutputTokens: int64(gaps + 1)})
		rec.Tokens(l, 1, int64(gaps+1))
		rec.Request(l, true, 200, time.Second)
	}
	// Before the window: slow streams that missed their objective.
	for range 10 {
		streamOf(2*time.Second, time.Second, 9)
	}
	t0 := time.Now()
	h := &history{g: reg}
	h.add(t0.Add(-time.Minute))
	// Within it: fast ones that met it.
	for range 30 {
		streamOf(10*time.Millisecond, 5*time.Millisecond, 19)
	}
	then, ok := h.since(t0, time.Minute)
	if !ok {
		t.Fatal("no sample a minute old")
	}
	now, err := takeSample(reg, t0)
	if err != nil {
		t.Fatal(err)
	}
	w := windowOf(then.models["m"], now.models["m"], time.Minute)
	for _, c := range []struct {
		name      string
		got, want float64
		tolerance float64
	}{
		{"requests/s", w.requestRate, 30.0 / 60, 1e-9},
		{"tokens/s", w.tokenRate, 600.0 / 60, 1e-9},
		{"judged", w.judged, 30, 0},
		{"attainment", w.attainment, 1, 0},
		{"goodput tokens/s", w.good, 600.0 / 60, 1e-9},
		// Quantiles from the buckets: every observation within the window
		// is 10ms (TTFT) or 5ms (ITL), so the window's p99 is no more than
		// a bucket above, where the whole history's is seconds.
		{"TTFT p99", w.ttftP99, 0.01, 0.01},
		{"ITL p99", w.itlP99, 0.005, 0.005},
	} {
		if math.Abs(c.got-c.want) > c.tolerance {
			t.Errorf("%s = %v, want %v ± %v", c.name, c.got, c.want, c.tolerance)
		}
	}
	if all := scrape.HistogramQuantile(0.99, now.models["m"].itl); all < 0.5 {
		t.Errorf("the whole history's ITL p99 is %v: the test no longer tells a window from it", all)
	}
	if _, ok := h.since(t0.Add(-2*time.Minute), time.Minute); ok {
		t.Error("a sample from the future counts as the window's start")
	}
}

func TestMinusKeepsTheNewObservations(t *testing.T) {
	bounds := []float64{0.1, 1}
	a := scrape.Buckets{Bounds: bounds, Cumulative: []uint64{5, 9}, Count: 10, Sum: 4}
	b := scrape.Buckets{Bounds: bounds, Cumulative: []uint64{2, 3}, Count: 3, Sum: 1}
	d := minus(a, b)
	if d.Count != 7 || d.Sum != 3 || d.Cumulative[0] != 3 || d.Cumulative[1] != 6 {
		t.Errorf("a - b = %+v", d)
	}
	if d := minus(a, scrape.Buckets{}); d.Count != 10 {
		t.Errorf("a - nothing = %+v", d)
	}
	if d := minus(a, scrape.Buckets{Bounds: []float64{0.5}, Cumulative: []uint64{1}, Count: 1}); d.Bounds != nil || d.Count != 9 {
		t.Errorf("a - other bounds = %+v: no buckets, the count", d)
	}
}
