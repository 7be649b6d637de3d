package main

import (
	"fmt"
	"math"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// snapshot is what the demo table shows per model, read from the same
// registry /metrics serves, so the table and the scrape never disagree.
type snapshot map[string]*modelStats

type modelStats struct {
	requests  float64
	outcomes  map[string]float64
	outTokens float64
	ttft, itl bucketCounts
}

// bucketCounts is a classic histogram summed over label sets: cumulative
// counts per upper bound.
type bucketCounts struct {
	bounds     []float64
	cumulative []uint64
	count      uint64
}

func (b *bucketCounts) add(h *dto.Histogram) {
	if b.bounds == nil {
		for _, bk := range h.GetBucket() {
			b.bounds = append(b.bounds, bk.GetUpperBound())
		}
		b.cumulative = make([]uint64, len(b.bounds))
	}
	for i, bk := range h.GetBucket() {
		if i < len(b.cumulative) {
			b.cumulative[i] += bk.GetCumulativeCount()
		}
	}
	b.count += h.GetSampleCount()
}

// quantile estimates the q-quantile as Prometheus' histogram_quantile does:
// linear interpolation within the bucket holding the rank. NaN without
// observations.
func (b *bucketCounts) quantile(q float64) float64 {
	if b.count == 0 {
		return math.NaN()
	}
	rank := q * float64(b.count)
	lower, below := 0.0, uint64(0)
	for i, upper := range b.bounds {
		if c := b.cumulative[i]; float64(c) >= rank {
			if c == below {
				return upper
			}
			return lower + (upper-lower)*(rank-float64(below))/float64(c-below)
		}
		lower, below = upper, b.cumulative[i]
	}
	return lower // in the +Inf bucket: the highest finite bound, as Prometheus does
}

func snapshotOf(g prometheus.Gatherer) (snapshot, error) {
	families, err := g.Gather()
	if err != nil {
		return nil, err
	}
	snap := snapshot{}
	stats := func(m *dto.Metric) *modelStats {
		var model string
		for _, l := range m.GetLabel() {
			if l.GetName() == "model" {
				model = l.GetValue()
			}
		}
		s := snap[model]
		if s == nil {
			s = &modelStats{outcomes: map[string]float64{}}
			snap[model] = s
		}
		return s
	}
	label := func(m *dto.Metric, name string) string {
		for _, l := range m.GetLabel() {
			if l.GetName() == name {
				return l.GetValue()
			}
		}
		return ""
	}
	for _, f := range families {
		for _, m := range f.GetMetric() {
			switch f.GetName() {
			case "itlproxy_requests_total":
				stats(m).requests += m.GetCounter().GetValue()
			case "itlproxy_streams_total":
				stats(m).outcomes[label(m, "outcome")] += m.GetCounter().GetValue()
			case "itlproxy_output_tokens_total":
				stats(m).outTokens += m.GetCounter().GetValue()
			case "itlproxy_time_to_first_token_seconds":
				stats(m).ttft.add(m.GetHistogram())
			case "itlproxy_inter_token_latency_seconds":
				stats(m).itl.add(m.GetHistogram())
			}
		}
	}
	return snap, nil
}

// table renders the snapshot for the given models, in their order.
func (s snapshot) table(models []string, elapsed time.Duration) string {
	width := len("after 1h00m00s")
	for _, m := range models {
		width = max(width, len(m))
	}
	var b strings.Builder
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "%-*s\trequests\tstreams ok/canceled/error\ttokens/s\tTTFT p50\tp99\tITL p50\tp99\tgaps\t\n",
		width, "after "+elapsed.Round(time.Second).String())
	for _, model := range models {
		st := s[model]
		if st == nil {
			st = &modelStats{outcomes: map[string]float64{}}
		}
		fmt.Fprintf(tw, "%-*s\t%.0f\t%.0f/%.0f/%.0f\t%.1f\t%s\t%s\t%s\t%s\t%d\t\n", width, model, st.requests,
			st.outcomes["completed"], st.outcomes["client_canceled"], st.outcomes["upstream_error"]+st.outcomes["rejected"],
			st.outTokens/elapsed.Seconds(),
			seconds(st.ttft.quantile(0.5)), seconds(st.ttft.quantile(0.99)),
			seconds(st.itl.quantile(0.5)), seconds(st.itl.quantile(0.99)), st.itl.count)
	}
	_ = tw.Flush()
	b.WriteByte('\n')
	return b.String()
}

// seconds formats a duration in seconds for the table.
func seconds(v float64) string {
	if math.IsNaN(v) {
		return "-"
	}
	return time.Duration(v * float64(time.Second)).Round(100 * time.Microsecond).String()
}
