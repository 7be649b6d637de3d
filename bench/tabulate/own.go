package main

import (
	"fmt"
	"strings"
)

// ownAccount is what itlproxy measured of itself over a run, as itlbench
// -compare-metrics reports it (compare.own), in seconds.
type ownAccount struct {
	EventDelay       ownFigures `json:"event_delay"`
	ClientWrite      ownFigures `json:"client_write"`
	SchedulerLatency ownFigures `json:"scheduler_latency"`
	RequestForward   ownFigures `json:"request_forward"`
}

type ownFigures struct {
	Count uint64   `json:"count"`
	Mean  *float64 `json:"mean"`
	P50   bounded  `json:"p50"`
	P99   bounded  `json:"p99"`
}

// bounded is a quantile from classic buckets: an estimate, or with Bound
// "upper" below Seconds (within the first bucket), with "lower" at least
// Seconds (past the last finite bound).
type bounded struct {
	Seconds *float64 `json:"seconds"`
	Bound   string   `json:"bound"`
}

// own returns itlproxy's account of the run, nil when it was not read.
func (r *row) own() *ownAccount {
	if r.rep.Compare == nil {
		return nil
	}
	return r.rep.Compare.Own
}

// micros formats a quantile in microseconds: "< 10" within the first bucket,
// "—" when there is none.
func (q bounded) micros() string {
	if q.Seconds == nil {
		return "—"
	}
	switch q.Bound {
	case "upper":
		return "< " + micro(*q.Seconds)
	case "lower":
		return "> " + micro(*q.Seconds)
	}
	return micro(*q.Seconds)
}

// meanMicros formats a mean in microseconds.
func meanMicros(v *float64) string {
	if v == nil {
		return "—"
	}
	return micro(*v)
}

// micro formats seconds as microseconds: a decimal under 100 µs, where
// the proxy's own figures are.
func micro(seconds float64) string {
	us := seconds * 1e6
	if us < 100 && us > -100 {
		return fmt.Sprintf("%.1f", us)
	}
	return fmt.Sprintf("%.0f", us)
}

// ownTable writes, for each run of itlproxy whose own account was read,
// what it measured of itself next to the transit it added, then the
// split of that transit; nothing when no run has an account.
func (res *results) ownTable(b *strings.Builder) {
	var lines []string
	for i := range res.rows {
		r := &res.rows[i]
		own := r.own()
		if own == nil {
			continue
		}
		addedP50, addedP99 := "—", "—"
		if p50, p99, ok := res.addedTransit(r.run, r.streams, r.target); ok {
			addedP50, addedP99 = signedMicro(p50), signedMicro(p99)
		}
		e, s, w := own.EventDelay, own.SchedulerLatency, own.ClientWrite
		lines = append(lines, fmt.Sprintf("| %s | %s | %d | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |",
			r.run, count(r.streams), e.Count, meanMicros(e.Mean), e.P50.micros(), e.P99.micros(), s.P50.micros(), s.P99.micros(),
			w.P50.micros(), w.P99.micros(), own.RequestForward.P99.micros(), addedP50, addedP99))
	}
	if len(lines) == 0 {
		return
	}
	b.WriteString("#### What itlproxy measures of itself\n\n")
	b.WriteString("Microseconds, from itlproxy's own histograms over the same measured run (`itlbench -compare-metrics`: its `/metrics` after the run less before), ")
	b.WriteString("next to the transit it added in that run as the client measured it (the transit table's *added*: through itlproxy − direct). ")
	b.WriteString("*Own delay*: each token event from its bytes being available to the proxy to the start of their write to the client; ")
	b.WriteString("*wait to run*: the Go runtime's sample of the time the process's goroutines waited for a core once ready, which comes before a read returns; ")
	b.WriteString("*client write*: each write of a stream's bytes to the client; *request leg*: each request from its first bytes to its write to the upstream. ")
	b.WriteString("Quantiles are interpolated within the proxy's classic buckets; `< 10` is within the first bucket, below 10 µs.\n\n")
	b.WriteString("| run | streams | events observed | own delay mean | own delay p50 | own delay p99 | wait to run p50 | wait to run p99 | client write p50 | client write p99 | request leg p99 | added transit p50 | added transit p99 |\n")
	b.WriteString("|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|\n")
	b.WriteString(strings.Join(lines, "\n"))
	b.WriteString("\n\n")
	res.splitTable(b)
}

// signedMicro formats seconds as signed microseconds.
func signedMicro(seconds float64) string { return fmt.Sprintf("%+.0f", seconds*1e6) }
