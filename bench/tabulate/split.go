package main

import (
	"fmt"
	"strings"
)

// split is one estimate of how the transit itlproxy added divides: the
// added transit, the part its clocks see (its own delay, its wait to
// run, its client write), and the rest, which is the kernel's: the extra
// hop through the network stack, and the time until a thread of the
// proxy's, woken from its network poll, has the bytes, which comes
// before the runtime's wait to run starts.
type split struct {
	added, seen float64 // seconds
	// seenAtMost: a part was only known to be under a bound, which was
	// counted: the seen part is at most this, the kernel's at least.
	seenAtMost bool
}

func (s split) kernel() float64 { return s.added - s.seen }

// splitByMeans splits the added transit's mean, the difference of the
// two targets' exact means, with the parts' means. Means add, so this is
// the sounder split; it is still an estimate, since the wait to run is
// the mean of every wait the runtime sampled, not of the streams' reads
// alone, and its sum is estimated from the runtime's buckets.
func (res *results) splitByMeans(r *row) (split, bool) {
	own := r.own()
	d := res.find(r.run, r.streams, "direct")
	if own == nil || d == nil || r.rep.Total.Transit.Count == 0 || d.rep.Total.Transit.Count == 0 {
		return split{}, false
	}
	s := split{added: r.rep.Total.Transit.Mean - d.rep.Total.Transit.Mean}
	for _, m := range []*float64{own.EventDelay.Mean, own.SchedulerLatency.Mean, own.ClientWrite.Mean} {
		if m == nil {
			return split{}, false
		}
		s.seen += *m
	}
	return s, true
}

// splitByMedians splits the added transit's p50 with the parts' p50s: a
// rough split, since quantiles of different distributions do not add. A
// part within the first bucket counts as its bound; one past the last
// finite bound leaves no estimate.
func (res *results) splitByMedians(r *row) (split, bool) {
	own := r.own()
	added, _, ok := res.addedTransit(r.run, r.streams, r.target)
	if own == nil || !ok {
		return split{}, false
	}
	s := split{added: added}
	for _, q := range []bounded{own.EventDelay.P50, own.SchedulerLatency.P50, own.ClientWrite.P50} {
		if q.Seconds == nil || q.Bound == "lower" {
			return split{}, false
		}
		s.seen += *q.Seconds
		s.seenAtMost = s.seenAtMost || q.Bound == "upper"
	}
	return s, true
}

// seenText is the seen part in microseconds, "≤ " when it is a bound.
func (s split) seenText() string {
	if s.seenAtMost {
		return "≤ " + micro(s.seen)
	}
	return micro(s.seen)
}

// kernelText is the kernel's part in microseconds and its share of the
// added transit: "≥ 294 (78%)".
func (s split) kernelText() string {
	text := micro(s.kernel())
	if s.seenAtMost {
		text = "≥ " + text
	}
	if s.added > 0 {
		text += fmt.Sprintf(" (%.0f%%)", 100*s.kernel()/s.added)
	}
	return text
}

// splitTable writes each split of the transit itlproxy added, for the
// runs the own table has.
func (res *results) splitTable(b *strings.Builder) {
	var lines []string
	for i := range res.rows {
		r := &res.rows[i]
		own := r.own()
		if own == nil {
			continue
		}
		line := fmt.Sprintf("| %s | %s |", r.run, count(r.streams))
		if s, ok := res.splitByMeans(r); ok {
			line += fmt.Sprintf(" %s | %s | %s | %s | %s |", signedMicro(s.added), meanMicros(own.EventDelay.Mean),
				meanMicros(own.SchedulerLatency.Mean), meanMicros(own.ClientWrite.Mean), s.kernelText())
		} else {
			line += " — | — | — | — | — |"
		}
		if s, ok := res.splitByMedians(r); ok {
			line += fmt.Sprintf(" %s | %s | %s |", signedMicro(s.added), s.seenText(), s.kernelText())
		} else {
			line += " — | — | — |"
		}
		lines = append(lines, line)
	}
	if len(lines) == 0 {
		return
	}
	b.WriteString("Where the added transit goes, an estimate: the added transit less what itlproxy's clocks see (its own delay, its wait to run, its client write) ")
	b.WriteString("is the kernel's share, which no clock inside the process can see: the bytes' extra way through the network stack and the proxy's two sockets, ")
	b.WriteString("the kernel waking a thread of the proxy's from its network poll (on a busy machine, once that thread has a core) and the read system call; ")
	b.WriteString("the runtime's wait to run starts only when the poll has found the bytes. ")
	b.WriteString("By the means, which add (the added mean is the difference of the two targets' exact means), with the wait to run's mean over every wait the runtime sampled, ")
	b.WriteString("not only the streams' reads, and its sum estimated from the runtime's buckets; ")
	b.WriteString("by the p50s, a rough split, since quantiles of different distributions do not add (a p50 known only to be under 10 µs counts as 10: the kernel's share is then at least the figure).\n\n")
	b.WriteString("| run | streams | added transit mean | own delay mean | wait to run mean | client write mean | kernel's share, by the means | added transit p50 | own delay + wait to run + client write, p50s | kernel's share, by the p50s |\n")
	b.WriteString("|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|\n")
	b.WriteString(strings.Join(lines, "\n"))
	b.WriteString("\n\n")
}
