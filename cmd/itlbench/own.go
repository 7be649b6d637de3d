package main

import (
	"fmt"
	"io"
	"text/tabwriter"

	"github.com/itlproxy/itlproxy/metrics/scrape"
)

// ownMetrics are itlproxy's histograms of what it adds to each token,
// read from the same two scrapes as the comparison: its own account of
// the run, to set beside the transit the client measured. The wait to
// run has no endpoint label: it is the whole process's.
var ownMetrics = []struct {
	name, metric string
	perEndpoint  bool
}{
	{"own delay", "itlproxy_event_delay_seconds", true},
	{"client write", "itlproxy_client_write_seconds", true},
	{"wait to run", "itlproxy_scheduler_latency_seconds", false},
	{"request leg", "itlproxy_request_forward_seconds", true},
}

// ownHistograms reads each of ownMetrics from a scrape, summed over the
// endpoint's series; exported is false when the scrape has none of them
// (an itlproxy older than these metrics).
func ownHistograms(families scrape.Families, endpoint string) (hists map[string]scrape.Buckets, exported bool) {
	hists = map[string]scrape.Buckets{}
	for _, m := range ownMetrics {
		if families[m.metric] != nil {
			exported = true
		}
		if m.perEndpoint {
			hists[m.metric] = families.Buckets(m.metric, "endpoint", endpoint)
		} else {
			hists[m.metric] = families.Buckets(m.metric)
		}
	}
	return hists, exported
}

// ownAccount is what itlproxy measured of itself during the run.
type ownAccount struct {
	Endpoint string `json:"endpoint"`
	Method   string `json:"method"`
	// EventDelay is each token-bearing event's time inside the proxy, from
	// its bytes being available to the proxy to the start of their write.
	EventDelay ownFigures `json:"event_delay"`
	// ClientWrite is each write of a stream's bytes to the client.
	ClientWrite ownFigures `json:"client_write"`
	// SchedulerLatency is the runtime's sample of the time the process's
	// goroutines waited to run once ready: what comes before a read
	// returns, which no clock of the proxy's can see per event.
	SchedulerLatency ownFigures `json:"scheduler_latency"`
	// RequestForward is each request's way from its first bytes to its
	// write to the upstream.
	RequestForward ownFigures `json:"request_forward"`
}

// figures returns the account's figures in ownMetrics' order.
func (a *ownAccount) figures() []*ownFigures {
	return []*ownFigures{&a.EventDelay, &a.ClientWrite, &a.SchedulerLatency, &a.RequestForward}
}

// ownFigures is one histogram's difference between the two scrapes, in
// seconds.
type ownFigures struct {
	Metric string   `json:"metric"`
	Count  uint64   `json:"count"`
	Sum    float64  `json:"sum"`
	Mean   *float64 `json:"mean"` // sum/count; null without observations
	P50    bounded  `json:"p50"`
	P99    bounded  `json:"p99"`
}

// bounded is a quantile interpolated within classic buckets, or the bound
// it lies beyond where interpolation would only be a guess.
type bounded struct {
	Seconds *float64 `json:"seconds"` // null without observations or buckets
	// Bound is "" for an estimate; "upper" when the quantile is within the
	// first bucket (it is below Seconds, the first bound); "lower" when it
	// is past the last finite bound (it is at least Seconds).
	Bound string `json:"bound,omitempty"`
}

// boundedQuantile estimates h's q-quantile as histogram_quantile does,
// except where the buckets only bound it.
func boundedQuantile(h scrape.Buckets, q float64) bounded {
	switch {
	case h.Count == 0 || len(h.Bounds) == 0:
		return bounded{}
	case h.WithinFirstBucket(q):
		return bounded{Seconds: ptr(h.Bounds[0]), Bound: "upper"}
	case h.BeyondBounds(q):
		return bounded{Seconds: ptr(h.Bounds[len(h.Bounds)-1]), Bound: "lower"}
	}
	return bounded{Seconds: ptr(scrape.HistogramQuantile(q, h))}
}

// ownFiguresOf is the figures of d, what metric observed during the run.
func ownFiguresOf(metric string, d scrape.Buckets) ownFigures {
	f := ownFigures{Metric: metric, Count: d.Count, Sum: d.Sum}
	if d.Count > 0 {
		f.Mean = ptr(d.Sum / float64(d.Count))
	}
	f.P50, f.P99 = boundedQuantile(d, 0.5), boundedQuantile(d, 0.99)
	return f
}

const ownMethod = "itlproxy's own histograms, this run only (the scrape after minus the scrape before): " +
	"own delay, client write and request leg summed over the run's endpoint; the wait to run is the whole process's, " +
	"the Go runtime's sample of its goroutines' waits, its sum estimated from the runtime's finer buckets. " +
	"Means are sum/count; p50 and p99 are interpolated within the classic buckets as histogram_quantile does, " +
	"except '<' (within the first bucket: below its bound) and '>' (past the last finite bound)"

// ownAccountOf is itlproxy's account of what it added between the two
// scrapes; nil when it exports none of ownMetrics.
func ownAccountOf(endpoint string, before, after proxyScrape) (*ownAccount, error) {
	if !after.ownExported {
		return nil, nil
	}
	a := &ownAccount{Endpoint: endpoint, Method: ownMethod}
	for i, f := range a.figures() {
		m := ownMetrics[i].metric
		d, err := minus(after.own[m], before.own[m])
		if err != nil {
			return nil, fmt.Errorf("%s: %w", m, err)
		}
		*f = ownFiguresOf(m, d)
	}
	return a, nil
}

// writeText prints the account as a table.
func (a *ownAccount) writeText(w io.Writer) error {
	if _, err := fmt.Fprintf(w, "\nitlproxy's own account of what it added (%s), this run only:\n", a.Endpoint); err != nil {
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "\tcount\tmean\tp50\tp99\t")
	for i, f := range a.figures() {
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\t\n", ownMetrics[i].name, f.Count, fmtSeconds(f.Mean), f.P50.text(), f.P99.text())
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	_, err := fmt.Fprintf(w, "%s.\n", ownMethod)
	return err
}

func (b bounded) text() string {
	switch b.Bound {
	case "upper":
		return "< " + fmtSeconds(b.Seconds)
	case "lower":
		return "> " + fmtSeconds(b.Seconds)
	}
	return fmtSeconds(b.Seconds)
}
