package main

import (
	_ "embed"
	"fmt"
	"html/template"
	"math"
	"os"
	"slices"
	"strings"
	"time"
)

// sweepHTML is the page -report writes: one file, its charts inline SVG
// drawn here (sweepchart.go), no script and nothing fetched, so that it
// reads the same offline, attached to a ticket or printed.
//
//go:embed sweep.html
var sweepHTML string

var sweepPageTemplate = template.Must(template.New("sweep").Parse(sweepHTML))

// sweepPage is what the page shows.
type sweepPage struct {
	Title, Target, Models string
	Levels, MaxTokens     int
	Window, Started       string
	Version               string
	Objectives            string
	// The verdict: the number, a few words after it, and the sentence.
	CapacityStreams, CapacityHead, Capacity string
	CapacityMet                             bool
	Proxy                                   []string
	Interrupted                             string
	Charts                                  []chart
	Rows                                    []pageRow
	ProxyRows                               []pageProxyRow
	Method                                  string
}

// pageRow is a level in the page's table.
type pageRow struct {
	Streams                              int
	Requests, Failed                     int64
	ReqPerSec, TokPerSec                 string
	TTFT50, TTFT99, ITL50, ITL99, TPOT50 string
	Goodput, Verdict                     string
	Met, Judged, Capacity                bool
	TTFTMissed, ITLMissed, ErrorsMissed  bool
}

// pageProxyRow is a level beside what itlproxy measured of it.
type pageProxyRow struct {
	Streams                   int
	Error                     string
	Client, Proxy             int64
	TTFT99Client, TTFT99Proxy string
	ITL50Client, ITL50Proxy   string
	ITL99Client, ITL99Proxy   string
}

// writeHTML writes the page to file.
func (r *sweepReport) writeHTML(file string) error {
	var b strings.Builder
	if err := sweepPageTemplate.Execute(&b, r.page()); err != nil {
		return fmt.Errorf("-report: %w", err)
	}
	if err := os.WriteFile(file, []byte(b.String()), 0o644); err != nil {
		return fmt.Errorf("-report: %w", err)
	}
	return nil
}

// page lays the report out for the template.
func (r *sweepReport) page() sweepPage {
	p := sweepPage{
		Title:      "Capacity of " + strings.TrimPrefix(strings.TrimPrefix(r.modelNames(), "models "), "model "),
		Target:     r.Target,
		Models:     r.modelNames(),
		Levels:     len(r.levels),
		MaxTokens:  r.MaxTokens,
		Window:     fmtSeconds(&r.DurationSeconds),
		Started:    r.Started.Format(time.RFC3339),
		Version:    version,
		Objectives: r.objectives.String(),
		Capacity:   r.Capacity.verdict(r.Levels, r.objectives),
		Method:     r.PercentileMethod,
	}
	c := r.Capacity
	switch {
	case !r.objectives.any() || len(r.Levels) == 0:
		p.CapacityStreams, p.CapacityHead = "–", "no capacity"
	case c.Concurrency == 0:
		p.CapacityStreams, p.CapacityHead = "0", "streams: no level met the objectives"
	case c.AtLeast:
		p.CapacityStreams, p.CapacityHead, p.CapacityMet = fmt.Sprintf("≥ %d", c.Concurrency), "streams: every level up to the highest met the objectives", true
	default:
		p.CapacityStreams, p.CapacityMet = fmt.Sprint(c.Concurrency), true
		p.CapacityHead = strings.TrimPrefix(streams(c.Concurrency), p.CapacityStreams+" ") + " within the objectives, bound by " + joinAnd(namesOf(c.BoundBy))
	}
	for _, pc := range c.Proxy {
		p.Proxy = append(p.Proxy, pc.text())
	}
	if r.CapacityError != "" {
		p.Proxy = append(p.Proxy, r.CapacityError)
	}
	if r.Interrupted {
		p.Interrupted = fmt.Sprintf("Interrupted during the level of %s, which is left out: the levels done are shown.", streams(r.InterruptedLevel))
	}
	if len(r.Levels) > 0 {
		p.Charts = r.charts()
	}
	for _, l := range r.Levels {
		p.Rows = append(p.Rows, l.pageRow(c.Concurrency))
		if r.MetricsURL != "" {
			p.ProxyRows = append(p.ProxyRows, l.pageProxyRow())
		}
	}
	return p
}

// namesOf is what levels missed, as the text says it.
func namesOf(missed []string) []string {
	var out []string
	for _, m := range missed {
		out = append(out, missedNames[m])
	}
	return out
}

func (l levelJSON) pageRow(capacity int) pageRow {
	a := l.all
	return pageRow{
		Streams: l.Concurrency, Requests: a.sent, Failed: a.failed(),
		ReqPerSec: fmt.Sprintf("%.2f", l.Total.RequestsPerSecond), TokPerSec: fmt.Sprintf("%.1f", l.Total.OutputTokensPerSecond),
		TTFT50: quantileText(a.ttft, 0.5), TTFT99: quantileText(a.ttft, 0.99),
		ITL50: quantileText(a.itl, 0.5), ITL99: quantileText(a.itl, 0.99), TPOT50: quantileText(a.tpot, 0.5),
		Goodput: goodputText(l.Total.Goodput), Verdict: l.verdictText(),
		Met: l.Met, Judged: len(l.Missed) > 0 || l.Met, Capacity: l.Met && l.Concurrency == capacity,
		TTFTMissed:   slices.Contains(l.Missed, missedTTFT),
		ITLMissed:    slices.Contains(l.Missed, missedITL),
		ErrorsMissed: slices.Contains(l.Missed, missedErrors),
	}
}

func (l levelJSON) pageProxyRow() pageProxyRow {
	row := pageProxyRow{Streams: l.Concurrency}
	if l.Compare == nil {
		row.Error = "compare-metrics: " + l.CompareError
		return row
	}
	all := l.Compare.Sets[0]
	row.Client, row.Proxy = all.TTFT.Client.Count, all.TTFT.Proxy.Count
	row.TTFT99Client, row.TTFT99Proxy = fmtSeconds(all.TTFT.ClientInProxyBuckets.P99), fmtSeconds(all.TTFT.Proxy.P99)
	row.ITL50Client, row.ITL50Proxy = fmtSeconds(all.ITL.ClientInProxyBuckets.P50), fmtSeconds(all.ITL.Proxy.P50)
	row.ITL99Client, row.ITL99Proxy = fmtSeconds(all.ITL.ClientInProxyBuckets.P99), fmtSeconds(all.ITL.Proxy.P99)
	return row
}

// charts are the page's charts: ITL and TTFT (p50, p99) with their
// objective, tokens per second, and goodput when judged; each marks the
// capacity, and itlproxy's. A p99 point is red where it missed its
// objective, a point of the others where its level missed any; p99 is
// drawn over p50, which it can meet.
func (r *sweepReport) charts() []chart {
	var levels []int
	var itl50, itl99, ttft50, ttft99, rate, goodput []float64
	var ttftMissed, itlMissed, levelMissed []bool
	for _, l := range r.Levels {
		levels = append(levels, l.Concurrency)
		a := l.all
		itl50 = append(itl50, seconds(a.itl, 0.5))
		itl99 = append(itl99, seconds(a.itl, 0.99))
		ttft50 = append(ttft50, seconds(a.ttft, 0.5))
		ttft99 = append(ttft99, seconds(a.ttft, 0.99))
		rate = append(rate, l.Total.OutputTokensPerSecond)
		g := math.NaN()
		if gp := l.Total.Goodput; gp != nil && gp.Judged > 0 {
			g = gp.Ratio
		}
		goodput = append(goodput, g)
		ttftMissed = append(ttftMissed, slices.Contains(l.Missed, missedTTFT))
		itlMissed = append(itlMissed, slices.Contains(l.Missed, missedITL))
		levelMissed = append(levelMissed, len(l.Missed) > 0)
	}
	var marks []chartMark
	if c := r.Capacity; c.Concurrency > 0 {
		label := fmt.Sprintf("capacity %d", c.Concurrency)
		if c.AtLeast {
			label = fmt.Sprintf("capacity ≥ %d", c.Concurrency)
		}
		marks = append(marks, chartMark{Class: "capacity", Label: label, Streams: c.Concurrency})
	}
	for _, pc := range r.Capacity.Proxy {
		if pc.Streams != nil {
			marks = append(marks, chartMark{Class: "proxy", Label: fmt.Sprintf("itlproxy %d (%s)", *pc.Streams, pc.Model), Streams: *pc.Streams})
		}
	}
	o := r.objectives
	out := []chart{
		drawChart(chartSpec{ID: "itl", Title: "Inter-token latency", Note: "p50 and p99 of every gap between token events",
			YLabel: "ITL", Format: fmtMillis, Objective: o.itl.Seconds(), ObjectiveLabel: "objective " + fmtMillis(o.itl.Seconds()),
			Series: []series{{"p50", "p50", itl50, nil}, {"p99", "p99", itl99, itlMissed}}}, levels, marks),
		drawChart(chartSpec{ID: "ttft", Title: "Time to first token", Note: "p50 and p99",
			YLabel: "TTFT", Format: fmtMillis, Objective: o.ttft.Seconds(), ObjectiveLabel: "objective " + fmtMillis(o.ttft.Seconds()),
			Series: []series{{"p50", "p50", ttft50, nil}, {"p99", "p99", ttft99, ttftMissed}}}, levels, marks),
		drawChart(chartSpec{ID: "throughput", Title: "Output tokens per second", Note: "what each level's streams sustain",
			YLabel: "tokens/s", Format: fmtRate, Series: []series{{"rate", "tokens/s", rate, levelMissed}}}, levels, marks),
	}
	if o.any() {
		out = append(out, drawChart(chartSpec{ID: "goodput", Title: "Goodput", Note: "requests that met every objective",
			YLabel: "share of requests", Format: fmtPercent, Series: []series{{"goodput", "goodput", goodput, levelMissed}}}, levels, marks))
	}
	return out
}

// seconds is d's q-quantile in seconds, NaN without samples.
func seconds(d dist, q float64) float64 {
	if d.count == 0 {
		return math.NaN()
	}
	return d.quantile(q).Seconds()
}
