package main

import (
	"bytes"
	"math"
	"strings"
	"testing"

	"github.com/itlproxy/itlproxy/metrics/scrape"
)

// checkOwnAccount checks itlproxy's account of a run through it against
// what the client counted: one own delay and one client write per token
// event, one request leg per request, each mean its sum over its count,
// and every quantile an estimate or a bound of the buckets.
func checkOwnAccount(t *testing.T, rep report, requests int64) {
	t.Helper()
	own := rep.Compare.Own
	if own == nil {
		t.Fatal("no own account in the comparison")
	}
	events := uint64(rep.Total.TokenEvents)
	for _, c := range []struct {
		f     ownFigures
		want  uint64  // 0: any count but 0
		first float64 // the family's first bucket bound
	}{{own.EventDelay, events, 1e-5}, {own.ClientWrite, 0, 1e-5}, {own.RequestForward, uint64(requests), 1e-4}, {own.SchedulerLatency, 0, 1e-4}} {
		f := c.f
		if c.want != 0 && f.Count != c.want || f.Count == 0 {
			t.Errorf("%s: count %d, want %d (0: any but 0)", f.Metric, f.Count, c.want)
			continue
		}
		if f.Mean == nil || math.Abs(*f.Mean-f.Sum/float64(f.Count)) > 1e-15 {
			t.Errorf("%s: mean %v, want sum/count %v", f.Metric, f.Mean, f.Sum/float64(f.Count))
		}
		for _, q := range []bounded{f.P50, f.P99} {
			if q.Seconds == nil || (q.Bound == "upper") != (*q.Seconds == c.first) || q.Bound == "lower" {
				t.Errorf("%s: quantile %+v: want an estimate, or the first bound %gs as an upper bound", f.Metric, q, c.first)
			}
		}
		t.Logf("%s: count %d, mean %s, p50 %s, p99 %s", f.Metric, f.Count, fmtSeconds(f.Mean), f.P50.text(), f.P99.text())
	}
	// One observation per write of a stream's bytes, whatever events it
	// carries: at least one per stream.
	if n := own.ClientWrite.Count; n < uint64(requests) {
		t.Errorf("%s: count %d, want at least one per stream (%d)", own.ClientWrite.Metric, n, requests)
	}
	// The request leg ends before the upstream has the request, the
	// client's TTFT only when the first token is back.
	if m := own.RequestForward.Mean; m != nil && *m >= rep.Total.TTFT.Mean {
		t.Errorf("request leg mean %s not below the client's TTFT mean %.4fs", fmtSeconds(m), rep.Total.TTFT.Mean)
	}
	var text bytes.Buffer
	if err := rep.Compare.writeText(&text); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"own account", "own delay", "client write", "wait to run", "request leg"} {
		if !strings.Contains(text.String(), want) {
			t.Errorf("the comparison's text lacks %q:\n%s", want, text.String())
		}
	}
}

// TestOwnFigures: count, exact mean, and the p50 and p99 interpolated as
// histogram_quantile does, except within the first bucket (an upper
// bound) and past the last finite one (a lower bound).
func TestOwnFigures(t *testing.T) {
	bounds := []float64{0.00001, 0.0001, 0.001, 0.005}
	cases := []struct {
		name     string
		h        scrape.Buckets
		mean     float64 // NaN: none
		p50, p99 bounded
	}{
		{"idle proxy: all under 10 µs", scrape.Buckets{Bounds: bounds, Cumulative: []uint64{100, 100, 100, 100}, Count: 100, Sum: 0.0004},
			0.000004, bounded{ptr(0.00001), "upper"}, bounded{ptr(0.00001), "upper"}},
		// Rank 50 of 100: 40 under 10 µs, then 50 in (10 µs, 100 µs]:
		// 10/50 of the way, 28 µs. Rank 99: 9/10 through (100 µs, 1 ms],
		// 910 µs.
		{"interpolated", scrape.Buckets{Bounds: bounds, Cumulative: []uint64{40, 90, 100, 100}, Count: 100, Sum: 0.01},
			0.0001, bounded{ptr(0.000028), ""}, bounded{ptr(0.00091), ""}},
		// Rank 99 of 100 is past 5 ms: at least that.
		{"past the last bound", scrape.Buckets{Bounds: bounds, Cumulative: []uint64{0, 60, 95, 98}, Count: 100, Sum: 1},
			0.01, bounded{ptr(0.00001 + 0.00009*50/60), ""}, bounded{ptr(0.005), "lower"}},
		{"no observations", scrape.Buckets{Bounds: bounds, Cumulative: []uint64{0, 0, 0, 0}},
			math.NaN(), bounded{}, bounded{}},
		{"buckets lost (bounds differed)", scrape.Buckets{Count: 3, Sum: 0.3},
			0.1, bounded{}, bounded{}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f := ownFiguresOf("m", c.h)
			if f.Count != c.h.Count || f.Sum != c.h.Sum {
				t.Errorf("count %d sum %v, want %d and %v", f.Count, f.Sum, c.h.Count, c.h.Sum)
			}
			if math.IsNaN(c.mean) != (f.Mean == nil) || f.Mean != nil && math.Abs(*f.Mean-c.mean) > 1e-15 {
				t.Errorf("mean %v, want %v", f.Mean, c.mean)
			}
			for _, q := range []struct {
				name      string
				got, want bounded
			}{{"p50", f.P50, c.p50}, {"p99", f.P99, c.p99}} {
				same := (q.got.Seconds == nil) == (q.want.Seconds == nil) && q.got.Bound == q.want.Bound &&
					(q.got.Seconds == nil || math.Abs(*q.got.Seconds-*q.want.Seconds) < 1e-12)
				if !same {
					t.Errorf("%s = %s (%+v), want %s", q.name, q.got.text(), q.got, q.want.text())
				}
			}
		})
	}
}

// ownScrapeText is an itlproxy scrape with two endpoints: the run's, chat,
// and another whose series the account must leave out.
const ownScrapeText = `# TYPE itlproxy_event_delay_seconds histogram
itlproxy_event_delay_seconds_bucket{endpoint="chat",le="1e-05"} 70
itlproxy_event_delay_seconds_bucket{endpoint="chat",le="0.0001"} 100
itlproxy_event_delay_seconds_bucket{endpoint="chat",le="+Inf"} 100
itlproxy_event_delay_seconds_sum{endpoint="chat"} 0.002
itlproxy_event_delay_seconds_count{endpoint="chat"} 100
itlproxy_event_delay_seconds_bucket{endpoint="completions",le="1e-05"} 0
itlproxy_event_delay_seconds_bucket{endpoint="completions",le="0.0001"} 0
itlproxy_event_delay_seconds_bucket{endpoint="completions",le="+Inf"} 5
itlproxy_event_delay_seconds_sum{endpoint="completions"} 5
itlproxy_event_delay_seconds_count{endpoint="completions"} 5
# TYPE itlproxy_scheduler_latency_seconds histogram
itlproxy_scheduler_latency_seconds_bucket{le="1e-05"} 10
itlproxy_scheduler_latency_seconds_bucket{le="0.0001"} 30
itlproxy_scheduler_latency_seconds_bucket{le="+Inf"} 40
itlproxy_scheduler_latency_seconds_sum 0.5
itlproxy_scheduler_latency_seconds_count 40
`

// TestOwnAccountArithmetic: the account is the scrape after less the
// scrape before, of the run's endpoint only but for the wait to run,
// which has no endpoint; a family the first scrape lacked counts from
// zero; counts going down are refused, and a scrape without any of the
// families gives no account.
func TestOwnAccountArithmetic(t *testing.T) {
	families, err := scrape.Parse(strings.NewReader(ownScrapeText))
	if err != nil {
		t.Fatal(err)
	}
	var after proxyScrape
	after.own, after.ownExported = ownHistograms(families, "chat")
	if !after.ownExported {
		t.Fatal("the scrape's families were not found")
	}
	bounds := []float64{0.00001, 0.0001}
	var before proxyScrape
	before.own, before.ownExported = map[string]scrape.Buckets{
		"itlproxy_event_delay_seconds":       {Bounds: bounds, Cumulative: []uint64{20, 20}, Count: 20, Sum: 0.0001},
		"itlproxy_scheduler_latency_seconds": {Bounds: bounds, Cumulative: []uint64{10, 10}, Count: 10, Sum: 0.00005},
	}, true
	a, err := ownAccountOf("chat", before, after)
	if err != nil || a == nil {
		t.Fatalf("%+v, %v", a, err)
	}
	// Event delay: 80 of chat's, 50 under 10 µs: the p50's rank 40 is in
	// the first bucket; rank 79.2 is 29.2/30 through (10 µs, 100 µs].
	if f := a.EventDelay; f.Count != 80 || math.Abs(f.Sum-0.0019) > 1e-12 || f.P50.Bound != "upper" ||
		f.P99.Bound != "" || math.Abs(*f.P99.Seconds-(0.00001+0.00009*29.2/30)) > 1e-12 {
		t.Errorf("event delay: count %d sum %v p50 %s p99 %s; want 80, 0.0019, < 10µs, 97.6µs", f.Count, f.Sum, f.P50.text(), f.P99.text())
	}
	// Wait to run: 30 more, 10 past 100 µs: p99 is a lower bound.
	if f := a.SchedulerLatency; f.Count != 30 || f.P99.Bound != "lower" || *f.P99.Seconds != 0.0001 {
		t.Errorf("wait to run: count %d p99 %s; want 30, > 100µs", f.Count, f.P99.text())
	}
	if f := a.RequestForward; f.Count != 0 || f.Mean != nil || f.P50.Seconds != nil {
		t.Errorf("request leg, absent from both scrapes: %+v", f)
	}
	if _, err := ownAccountOf("chat", after, before); err == nil {
		t.Error("counts going down were not refused")
	}
	if a, err := ownAccountOf("chat", before, proxyScrape{}); a != nil || err != nil {
		t.Errorf("a scrape without the families: %+v, %v; want no account", a, err)
	}
}
