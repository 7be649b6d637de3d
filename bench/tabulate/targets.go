package main

import (
	"fmt"
	"strings"
)

func (res *results) targetsTable(b *strings.Builder) {
	b.WriteString("#### Targets\n\n| target | itlproxy measured | verdict |\n|---|---|---|\n")
	ratioRow := func(name, other string, limit float64) {
		worst := 0.0
		text, ok := res.series(func(r *row) (string, bool) {
			x, ok := res.ratio(r, other, (*row).cpuPer1k)
			worst = max(worst, x)
			return fmt.Sprintf("%.2f×", x), ok
		})
		if text == notMeasured {
			fmt.Fprintf(b, "| CPU per event within %.1f× %s's | %s | %s |\n", limit, name, text, text)
			return
		}
		fmt.Fprintf(b, "| CPU per event within %.1f× %s's | %s streams | %s |\n", limit, name, text, verdict(ok, worst <= limit, fmt.Sprintf("up to %.2f×", worst)))
	}
	ratioRow(targetNames["nginx"], "nginx", targetVsNginx)
	ratioRow("the "+targetNames["plain"], "plain", targetVsPlain)

	res.addedGapRow(b)

	worst := 0.0
	text, ok := res.series(func(r *row) (string, bool) {
		k, ok := r.rssPerStream()
		worst = max(worst, k)
		return fmt.Sprintf("%.1f KiB", k), ok
	})
	if res.big != nil && res.big.Processes != nil {
		k := bigKiB(res.big)
		worst = max(worst, k)
		text += fmt.Sprintf("; %.1f KiB at %s (big run)", k, count(res.big.Concurrency))
	}
	rssVerdict := verdict(ok, worst <= targetKiBPerStream, fmt.Sprintf("up to %.1f KiB", worst))
	if text == notMeasured {
		rssVerdict = notMeasured
	}
	fmt.Fprintf(b, "| at most %d KiB of RSS per active stream | %s | %s |\n", targetKiBPerStream, text, rssVerdict)

	var parts []string
	okAll, met := true, true
	for _, name := range []string{"BenchmarkMeasureEvent", "BenchmarkPassthroughRead"} {
		bm, found := res.benchmark(name)
		ns, _, allocs, _, ok := bm.perEvent()
		if !found || !ok {
			okAll = false
			continue
		}
		parts = append(parts, fmt.Sprintf("`%s` %.0f ns, %g allocs per event", strings.TrimPrefix(name, "Benchmark"), ns, allocs))
		met = met && allocs == 0 && ns < targetNsPerEvent
	}
	microVerdict := verdict(okAll, met, "see the microbenchmarks")
	if len(parts) == 0 {
		parts, microVerdict = []string{notMeasured}, notMeasured
	}
	fmt.Fprintf(b, "| zero allocations and well under 1 µs per event (microbenchmarks) | %s | %s |\n\n",
		strings.Join(parts, "; "), microVerdict)
	if res.env["mode"] != "full" {
		b.WriteString("This is not the full run: the verdicts show that the harness computes them, not where itlproxy stands.\n\n")
	}
}

// verdict words a target's outcome; measured is false when the figure is
// missing or not the one the target names.
func verdict(measured, met bool, missedBy string) string {
	switch {
	case !measured && met:
		return "met where measured"
	case !measured:
		return "missed where measured: " + missedBy
	case met:
		return "met"
	}
	return "**missed**: " + missedBy
}

// addedGap is itlproxy's ITL p99 less direct's, in milliseconds, in the
// run at streams; ok is false when either did not run.
func (res *results) addedGap(run string, streams int, target string) (float64, bool) {
	r, d := res.find(run, streams, target), res.find(run, streams, "direct")
	if r == nil || d == nil {
		return 0, false
	}
	return 1e3 * (r.rep.Total.ITL.P99 - d.rep.Total.ITL.P99), true
}

// addedGapRow judges the added p99 gap at 1,000 streams by the paced run
// where there is one: at the comparison's rate, 1,000 streams and more
// keep two cores busy, and every proxy's gaps stretch with the machine's.
// Both figures are shown.
func (res *results) addedGapRow(b *strings.Builder) {
	head := fmt.Sprintf("| added p99 gap under %g ms at %s streams |", targetAddedP99Ms, count(targetAddedStreams))
	// Each run's figure at 1,000 streams, or at the nearest run below.
	var parts []string
	at, added := res.addedGapAtTarget("load")
	if at > 0 {
		parts = append(parts, fmt.Sprintf("%+.3f ms at %s streams at the comparison's rate%s", added, count(at), res.othersAddedGap("load", at)))
	}
	pacedAt, paced := res.addedGapAtTarget("paced")
	hasPaced := pacedAt > 0
	if hasPaced {
		parts = append(parts, fmt.Sprintf("**%+.3f ms** at %s streams paced%s", paced, count(pacedAt), res.othersAddedGap("paced", pacedAt)))
	}
	switch {
	case hasPaced:
		fmt.Fprintf(b, "%s %s | %s |\n", head, strings.Join(parts, "; "),
			verdict(pacedAt == targetAddedStreams, paced < targetAddedP99Ms, fmt.Sprintf("%+.3f ms paced", paced)))
	case at > 0:
		if at != targetAddedStreams {
			parts[0] += fmt.Sprintf(" (no %s-stream run in this mode)", count(targetAddedStreams))
		}
		fmt.Fprintf(b, "%s %s | %s |\n", head, parts[0], verdict(at == targetAddedStreams, added < targetAddedP99Ms, fmt.Sprintf("%+.3f ms", added)))
	default:
		fmt.Fprintf(b, "%s not measured | not measured |\n", head)
	}
}

// addedGapAtTarget is itlproxy's added p99 gap in run at the target's
// number of streams, or at the largest number below it that was run;
// streams is 0 when there is none.
func (res *results) addedGapAtTarget(run string) (streams int, added float64) {
	for _, n := range res.streams(run) {
		if x, ok := res.addedGap(run, n, "itlproxy"); ok && n <= targetAddedStreams {
			streams, added = n, x
		}
	}
	return streams, added
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
