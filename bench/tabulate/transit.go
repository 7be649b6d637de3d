package main

import (
	"fmt"
	"strings"
)

// addedTransit is target's transit p50 and p99 less direct's, in seconds,
// in the run at streams; ok is false when either did not run or carried
// no stamps.
func (res *results) addedTransit(run string, streams int, target string) (p50, p99 float64, ok bool) {
	r, d := res.find(run, streams, target), res.find(run, streams, "direct")
	if r == nil || d == nil || r.rep.Total.Transit.Count == 0 || d.rep.Total.Transit.Count == 0 {
		return 0, 0, false
	}
	t, dt := r.rep.Total.Transit, d.rep.Total.Transit
	return t.P50 - dt.P50, t.P99 - dt.P99, true
}

// transitTable writes each run's transit per event, and what each target
// adds to direct's; nothing when no run's upstream stamped its events.
func (res *results) transitTable(b *strings.Builder) {
	var lines []string
	for i := range res.rows {
		r := &res.rows[i]
		t := r.rep.Total.Transit
		if t.Count == 0 {
			continue
		}
		line := fmt.Sprintf("| %s | %s | %s | %d | %s | %s |", r.run, count(r.streams), targetNames[r.target], t.Count, ms(t.P50), ms(t.P99))
		if p50, p99, ok := res.addedTransit(r.run, r.streams, r.target); ok && r.target != "direct" {
			line += fmt.Sprintf(" %s | %s |", added(p50), added(p99))
		} else {
			line += " — | — |"
		}
		lines = append(lines, line)
	}
	if big := res.big; big != nil && big.Total.Transit.Count > 0 {
		t := big.Total.Transit
		lines = append(lines, fmt.Sprintf("| big | %s | itlproxy | %d | %s | %s | — | — |", count(big.Concurrency), t.Count, ms(t.P50), ms(t.P99)))
	}
	if len(lines) == 0 {
		return
	}
	b.WriteString("#### Transit per event\n\n")
	b.WriteString("Milliseconds from the upstream's write of each token event (its send time, stamped into the event) to its arrival at the client, both on this machine's clock; ")
	b.WriteString("*added* = through the target − direct, in the same run at the same number of streams.\n\n")
	b.WriteString("| run | streams | target | token events stamped | transit p50 | transit p99 | added p50 | added p99 |\n")
	b.WriteString("|---|--:|---|--:|--:|--:|--:|--:|\n")
	b.WriteString(strings.Join(lines, "\n"))
	b.WriteString("\n\n")
}

// addedGapNote gives the added p99 gap at gapReferenceStreams streams
// (or the nearest run below), for reference: no longer a target, it still
// shows how much a proxy stretches the gaps. The paced run's figure is
// the proxy's own; at the comparison's rate 1,000 streams and more keep
// two cores busy, and every proxy's gaps stretch with the machine's.
func (res *results) addedGapNote(b *strings.Builder) {
	var parts []string
	if at, gap := res.addedGapAt("load"); at > 0 {
		parts = append(parts, fmt.Sprintf("%+.3f ms at %s streams at the comparison's rate%s", gap, count(at), res.othersAddedGap("load", at)))
	}
	if at, gap := res.addedGapAt("paced"); at > 0 {
		parts = append(parts, fmt.Sprintf("**%+.3f ms** at %s streams paced%s", gap, count(at), res.othersAddedGap("paced", at)))
	}
	if len(parts) == 0 {
		return
	}
	fmt.Fprintf(b, "For reference, not a target: itlproxy's added ITL p99 (through it − direct) %s.\n\n", strings.Join(parts, "; "))
}

// addedGap is target's ITL p99 less direct's, in milliseconds, in the run
// at streams; ok is false when either did not run.
func (res *results) addedGap(run string, streams int, target string) (float64, bool) {
	r, d := res.find(run, streams, target), res.find(run, streams, "direct")
	if r == nil || d == nil {
		return 0, false
	}
	return 1e3 * (r.rep.Total.ITL.P99 - d.rep.Total.ITL.P99), true
}

// addedGapAt is itlproxy's added p99 gap in run at gapReferenceStreams
// streams, or at the largest number below it that was run; streams is 0
// when there is none.
func (res *results) addedGapAt(run string) (streams int, gap float64) {
	for _, n := range res.streams(run) {
		if x, ok := res.addedGap(run, n, "itlproxy"); ok && n <= gapReferenceStreams {
			streams, gap = n, x
		}
	}
	return streams, gap
}

// othersAddedGap is " (plain Go proxy +x, nginx +y)": the same figure for
// the baselines that ran, or "".
func (res *results) othersAddedGap(run string, streams int) string {
	var others []string
	for _, t := range []string{"plain", "nginx"} {
		if x, ok := res.addedGap(run, streams, t); ok {
			others = append(others, fmt.Sprintf("%s %+.3f", targetNames[t], x))
		}
	}
	if len(others) == 0 {
		return ""
	}
	return " (" + strings.Join(others, ", ") + ")"
}
