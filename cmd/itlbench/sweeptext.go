package main

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
)

// writeText prints the sweep for people: the levels as a table, their
// errors, the proxy's view of each with -compare-metrics, and the
// capacity last, itlproxy's beside it.
func (r *sweepReport) writeText(w io.Writer) error {
	var b strings.Builder
	fmt.Fprintf(&b, "itlbench sweep: %s at %s, %d levels, each measured for %s after it settled\n",
		r.modelNames(), r.Target, len(r.levels), fmtSeconds(&r.DurationSeconds))
	fmt.Fprintf(&b, "objectives: %s", r.objectives)
	if o := r.objectives; o.any() {
		var each []string
		if o.ttft > 0 {
			each = append(each, "TTFT ≤ "+fmtDuration(o.ttft))
		}
		if o.itl > 0 {
			each = append(each, "a mean gap ≤ "+fmtDuration(o.itl))
		}
		b.WriteString("; goodput: the requests that succeeded with " + joinAnd(each))
	}
	b.WriteString("\n")
	if r.Interrupted {
		fmt.Fprintf(&b, "interrupted during the level of %s, which is left out: the levels done are reported\n", streams(r.InterruptedLevel))
	}
	b.WriteString("\n")
	if _, err := io.WriteString(w, b.String()); err != nil {
		return err
	}
	if err := r.writeLevels(w); err != nil {
		return err
	}
	b.Reset()
	for _, l := range r.Levels {
		if l.all.failed() > 0 {
			fmt.Fprintf(&b, "at %s:\n", streams(l.Concurrency))
			writeErrors(&b, l.all)
		}
	}
	fmt.Fprintf(&b, "\nper level: the requests that started within its window; rates over the time they took per stream. Percentiles: %s.\n", percentileMethod)
	if _, err := io.WriteString(w, b.String()); err != nil {
		return err
	}
	if r.MetricsURL != "" {
		if err := r.writeProxyLevels(w); err != nil {
			return err
		}
	}
	_, err := io.WriteString(w, r.capacityText())
	return err
}

// modelNames is "model m" or "models a, b".
func (r *sweepReport) modelNames() string {
	var names []string
	for _, m := range r.Models {
		names = append(names, m.Name)
	}
	if len(names) == 1 {
		return "model " + names[0]
	}
	return "models " + strings.Join(names, ", ")
}

// writeLevels writes a row per level done.
func (r *sweepReport) writeLevels(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "streams\trequests\tfailed\treq/s\ttokens/s\tTTFT p50\tTTFT p99\tITL p50\tITL p99\tTPOT p50\tgoodput\tverdict\t")
	for _, l := range r.Levels {
		a := l.all
		fmt.Fprintf(tw, "%d\t%d\t%d\t%.2f\t%.1f\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t\n", l.Concurrency, a.sent, a.failed(),
			l.Total.RequestsPerSecond, l.Total.OutputTokensPerSecond,
			quantileText(a.ttft, 0.5), quantileText(a.ttft, 0.99), quantileText(a.itl, 0.5), quantileText(a.itl, 0.99),
			quantileText(a.tpot, 0.5), goodputText(l.Total.Goodput), l.verdictText())
	}
	return tw.Flush()
}

// quantileText is d's q-quantile, "-" without samples.
func quantileText(d dist, q float64) string {
	if d.count == 0 {
		return "-"
	}
	return fmtDuration(d.quantile(q))
}

func goodputText(g *goodputJSON) string {
	if g == nil || g.Judged == 0 {
		return "-"
	}
	return fmt.Sprintf("%.1f%%", 100*g.Ratio)
}

// verdictText is "met", "missed ITL", or "-" without objectives.
func (l levelJSON) verdictText() string {
	switch {
	case l.Met:
		return "met"
	case len(l.Missed) == 0:
		return "-"
	}
	var names []string
	for _, m := range l.Missed {
		names = append(names, missedNames[m])
	}
	return "missed " + strings.Join(names, ", ")
}

// writeProxyLevels writes each level beside what itlproxy measured of it.
func (r *sweepReport) writeProxyLevels(w io.Writer) error {
	fmt.Fprintf(w, "\nitlproxy's view (%s) of each level's every request, its settle, fill and drain included\n"+
		"(client*: the client's samples in the proxy's buckets, interpolated as histogram_quantile does):\n", r.MetricsURL)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "streams\tTTFTs\tproxy\tTTFT p99 client*\tproxy\tITL p50 client*\tproxy\tITL p99 client*\tproxy\tproxy−client\t")
	var notes []string
	for _, l := range r.Levels {
		c := l.Compare
		if c == nil {
			notes = append(notes, fmt.Sprintf("at %s: compare-metrics: %s", streams(l.Concurrency), l.CompareError))
			continue
		}
		if c.Note != "" {
			notes = append(notes, fmt.Sprintf("at %s: %s", streams(l.Concurrency), c.Note))
		}
		all := c.Sets[0]
		fmt.Fprintf(tw, "%d\t%d\t%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t\n", l.Concurrency, all.TTFT.Client.Count, all.TTFT.Proxy.Count,
			fmtSeconds(all.TTFT.ClientInProxyBuckets.P99), fmtSeconds(all.TTFT.Proxy.P99),
			fmtSeconds(all.ITL.ClientInProxyBuckets.P50), fmtSeconds(all.ITL.Proxy.P50),
			fmtSeconds(all.ITL.ClientInProxyBuckets.P99), fmtSeconds(all.ITL.Proxy.P99),
			strings.TrimSpace(fmtSigned(all.ITL.Diff.P99)+" "+percentOf(all.ITL.Diff.P99, all.ITL.ClientInProxyBuckets.P99)))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, n := range notes {
		if _, err := fmt.Fprintln(w, "note: "+n); err != nil {
			return err
		}
	}
	return nil
}

// capacityText is the verdict, and itlproxy's estimate for each model.
func (r *sweepReport) capacityText() string {
	var b strings.Builder
	fmt.Fprintf(&b, "\ncapacity: %s\n", r.Capacity.verdict(r.Levels, r.objectives))
	for _, p := range r.Capacity.Proxy {
		fmt.Fprintf(&b, "itlproxy: %s\n", p.text())
	}
	if r.CapacityError != "" {
		fmt.Fprintf(&b, "itlproxy: %s\n", r.CapacityError)
	}
	return b.String()
}

// text says the proxy's estimate for a model, and how it was reached.
func (p proxyCapacityJSON) text() string {
	rule := "model:itlproxy_capacity_streams as its rule computes it, over this sweep"
	if p.Streams == nil {
		return fmt.Sprintf("no capacity for model %s (%s): %s", p.Model, rule, p.Note)
	}
	var band proxyBand
	for _, b := range p.Bands {
		if b.Load == p.Band {
			band = b
		}
	}
	return fmt.Sprintf("%s for model %s (%s): the highest load band whose p99 ITL is within its objective %s is %s "+
		"(histogram_quantile over the band's buckets: %s, %d gaps); its bands are powers of two",
		streams(*p.Streams), p.Model, rule, fmtSeconds(p.ObjectiveSeconds), p.Band, fmtSeconds(band.P99Seconds), band.Gaps)
}
