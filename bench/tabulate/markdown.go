package main

import (
	"fmt"
	"strconv"
	"strings"
)

func (res *results) markdown() string {
	var b strings.Builder
	res.header(&b)
	if res.env["mode"] == "parts" {
		// bench/run.sh --parts: the attribution alone.
		res.partsTable(&b)
		return b.String()
	}
	res.targetsTable(&b)
	res.latencyTable(&b, "load")
	res.latencyTable(&b, "paced")
	res.transitTable(&b)
	res.ownTable(&b)
	res.costTable(&b)
	res.partsTable(&b)
	res.bigTable(&b)
	res.memoryTable(&b)
	res.microTable(&b)
	res.profileBlock(&b)
	return b.String()
}

func (res *results) header(b *strings.Builder) {
	e := res.env
	fmt.Fprintf(b, "Mode `%s`: %s streams, %s measured per run after a warm-up; upstream %s. ",
		e["mode"], strings.Join(strings.Fields(e["streams"]), ", "), e["duration"], e["upstream"])
	fmt.Fprintf(b, "Run %s at revision `%s` with %s on %s, %s cores, Linux %s, open-file limit %s; ",
		e["date"], e["revision"], e["go"], e["cpu"], e["cores"], e["kernel"], e["nofile"])
	var versions []string
	for _, k := range []string{"nginx", "haproxy", "caddy"} {
		if v := e[k]; v != "" {
			versions = append(versions, targetNames[k]+" "+v)
		}
	}
	if len(versions) > 0 {
		fmt.Fprintf(b, "%s; ", strings.Join(versions, ", "))
	}
	fmt.Fprintf(b, "niceness %s; load average %s at the start, %s at the end.",
		e["nice"], first(e["load_start"]), first(e["load_end"]))
	if s := strings.TrimSpace(e["skipped"]); s != "" {
		fmt.Fprintf(b, " Not run: %s.", s)
	}
	b.WriteString("\n\n")
}

func first(s string) string {
	if f := strings.Fields(s); len(f) > 0 {
		return f[0]
	}
	return "?"
}

const notMeasured = "not measured"

// series formats a figure of itlproxy at each number of streams of the
// comparison.
func (res *results) series(format func(r *row) (string, bool)) (text string, all bool) {
	var parts []string
	all = true
	for _, n := range res.streams("load") {
		r := res.find("load", n, "itlproxy")
		if r == nil {
			continue
		}
		s, ok := format(r)
		if !ok {
			all = false
			continue
		}
		parts = append(parts, fmt.Sprintf("%s at %s", s, count(n)))
	}
	if len(parts) == 0 {
		return notMeasured, false
	}
	return strings.Join(parts, ", "), all
}

var runTitles = map[string]string{
	"load":  "#### Latency the client sees\n\n",
	"paced": "#### Latency the client sees, paced\n\nThe same targets, each stream's tokens 100 ms apart (`paced_upstream` in `env.txt`): a tenth of the comparison's events per stream, so that the two cores keep up with client, upstream and proxy together and the added gaps are the proxy's, not the machine's. ",
}

func (res *results) latencyTable(b *strings.Builder, run string) {
	rows := res.of(run)
	if len(rows) == 0 {
		return
	}
	b.WriteString(runTitles[run])
	b.WriteString("Milliseconds; *added* = through the target − direct, at the same number of streams. ")
	b.WriteString("*Cut cleanly*: streams counted ok whose body ended between two events without `[DONE]` (the upstream always sends it).\n\n")
	b.WriteString("| streams | target | requests ok | failed | cut cleanly | token events | TTFT p50 | TTFT p99 | ITL p50 | ITL p99 | added TTFT p50 | added TTFT p99 | added ITL p50 | added ITL p99 |\n")
	b.WriteString("|--:|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|\n")
	for _, r := range rows {
		t := r.rep.Total
		fmt.Fprintf(b, "| %s | %s | %d | %d | %s | %d | %s | %s | %s | %s |", count(r.streams), targetNames[r.target],
			t.Requests.OK, r.errors(), flagged(t.EndedWithoutDone), t.TokenEvents, ms(t.TTFT.P50), ms(t.TTFT.P99), ms(t.ITL.P50), ms(t.ITL.P99))
		d := res.find(run, r.streams, "direct")
		if d == nil || r.target == "direct" {
			b.WriteString(" — | — | — | — |\n")
			continue
		}
		dt := d.rep.Total
		fmt.Fprintf(b, " %s | %s | %s | %s |\n", added(t.TTFT.P50-dt.TTFT.P50), added(t.TTFT.P99-dt.TTFT.P99),
			added(t.ITL.P50-dt.ITL.P50), added(t.ITL.P99-dt.ITL.P99))
	}
	b.WriteString("\n")
}

func (res *results) costTable(b *strings.Builder) {
	b.WriteString("#### What the proxy costs\n\n")
	b.WriteString("CPU: the proxy's user + system time over the measured run (its workers' for nginx), per 1,000 token events delivered. ")
	b.WriteString("RSS: the peak during the run less the idle process's, per concurrent stream. × = ratio to the same figure of nginx or of the plain Go proxy at the same number of streams.\n\n")
	b.WriteString("| run | streams | target | CPU s | CPU ms per 1,000 events | × nginx | × plain Go | idle RSS MiB | peak RSS MiB | RSS KiB per stream | × nginx | × plain Go |\n")
	b.WriteString("|---|--:|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|\n")
	for i := range res.rows {
		r := &res.rows[i]
		p := r.rep.Processes
		if p == nil {
			continue // direct: nothing in between
		}
		cpu, _ := r.cpuPer1k()
		kib, _ := r.rssPerStream()
		fmt.Fprintf(b, "| %s | %s | %s | %.2f | %.1f | %s | %s | %.1f | %.1f | %.1f | %s | %s |\n", r.run, count(r.streams), targetNames[r.target],
			p.CPUSeconds, cpu, res.times(r, "nginx", (*row).cpuPer1k), res.times(r, "plain", (*row).cpuPer1k),
			mib(p.RSSBeforeBytes), mib(p.RSSPeakBytes), kib,
			res.times(r, "nginx", (*row).rssPerStream), res.times(r, "plain", (*row).rssPerStream))
	}
	b.WriteString("\n")
}

func (res *results) times(r *row, other string, figure func(*row) (float64, bool)) string {
	if x, ok := res.ratio(r, other, figure); ok {
		return fmt.Sprintf("%.2f", x)
	}
	return "—"
}

func bigKiB(r *report) float64 {
	return float64(r.Processes.RSSPeakBytes-r.Processes.RSSBeforeBytes) / 1024 / float64(r.Concurrency)
}

func (res *results) bigTable(b *strings.Builder) {
	r := res.big
	if r == nil {
		return
	}
	e := res.env
	fmt.Fprintf(b, "#### %s concurrent streams through itlproxy\n\n", count(r.Concurrency))
	fmt.Fprintf(b, "One request per stream, upstream %s, to the upstream over %s.\n\n", e["big_upstream"], linkName(e["big_link"]))
	b.WriteString("| streams | most in flight | requests ok | failed | token events | TTFT p50 ms | TTFT p99 ms | ITL p50 ms | ITL p99 ms | idle RSS MiB | peak RSS MiB | VmHWM MiB | RSS KiB per stream | CPU ms per 1,000 events |\n")
	b.WriteString("|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|\n")
	t := r.Total
	fmt.Fprintf(b, "| %s | %s | %d | %d | %d | %s | %s | %s | %s |", count(r.Concurrency), count(int(r.PeakInFlight)),
		t.Requests.OK, t.Requests.Failed, t.TokenEvents, ms(t.TTFT.P50), ms(t.TTFT.P99), ms(t.ITL.P50), ms(t.ITL.P99))
	if p := r.Processes; p != nil && t.TokenEvents > 0 {
		fmt.Fprintf(b, " %.1f | %.1f | %.1f | %.1f | %.1f |\n\n", mib(p.RSSBeforeBytes), mib(p.RSSPeakBytes), mib(p.HWMBytes),
			bigKiB(r), 1e6*p.CPUSeconds/float64(t.TokenEvents))
	} else {
		b.WriteString(" — | — | — | — | — |\n\n")
	}
	if len(t.Errors.Messages) > 0 {
		b.WriteString("First errors:")
		for kind, msg := range t.Errors.Messages {
			fmt.Fprintf(b, " %s: `%s`;", kind, msg)
		}
		b.WriteString("\n\n")
	}
}

func linkName(link string) string {
	if link == "h2-tls" {
		return "HTTP/2 with TLS (this machine's open-file limit cannot hold two HTTP/1.1 sockets per stream)"
	}
	return "HTTP/1.1, a connection per stream"
}

func (res *results) microTable(b *strings.Builder) {
	if len(res.micro) == 0 {
		return
	}
	b.WriteString("#### Microbenchmarks\n\n")
	b.WriteString("`go test ./proxy/... -bench .`; per event (per op for the benchmarks whose op is one event); the median of the runs. ")
	b.WriteString("`cpu-ns/event` is the process's CPU time, where other goroutines share the work.\n\n")
	b.WriteString("| benchmark | ns/event | cpu-ns/event | B/event | allocs/event |\n|---|--:|--:|--:|--:|\n")
	for _, bm := range res.micro {
		ns, bytes, allocs, cpu, ok := bm.perEvent()
		if !ok {
			continue
		}
		cpuText := "—"
		if cpu >= 0 {
			cpuText = num(cpu)
		}
		fmt.Fprintf(b, "| `%s` | %s | %s | %s | %s |\n", strings.TrimPrefix(bm.name, "Benchmark"), num(ns), cpuText, num(bytes), num(allocs))
	}
	b.WriteString("\n")
	for _, mode := range []string{"lockstep", "burst"} {
		get := func(via string) (float64, bool) {
			bm, ok := res.benchmark("BenchmarkProxyStream/" + mode + "/" + via)
			v, has := bm.metrics["cpu-ns/event"]
			return v, ok && has
		}
		itl, ok1 := get("itlproxy")
		plain, ok2 := get("plain")
		direct, ok3 := get("direct")
		if !ok1 || !ok2 || !ok3 || plain <= direct {
			continue
		}
		note := ""
		if itl < plain {
			note = " (below zero: within the run-to-run noise)"
		}
		fmt.Fprintf(b, "`ProxyStream/%s`: over direct, itlproxy adds %s ns of CPU per event and the plain proxy %s: measuring costs %s ns per event%s, itlproxy/plain = %.2f× of the proxying cost.\n",
			mode, num(itl-direct), num(plain-direct), num(itl-plain), note, (itl-direct)/(plain-direct))
	}
	b.WriteString("\n")
}

func (res *results) profileBlock(b *strings.Builder) {
	if res.profile == "" {
		return
	}
	// The flat top: its title line, then from the column headers up to
	// the blank line before the cumulative view.
	flat, _, _ := strings.Cut(res.profile, "\n\n")
	lines := strings.Split(flat, "\n")
	var kept []string
	for i, l := range lines {
		if i == 0 || strings.HasPrefix(l, "Duration:") {
			kept = append(kept, l)
		}
		if strings.Contains(l, "flat%") {
			lines = append(kept, lines[i:min(len(lines), i+21)]...)
			break
		}
	}
	b.WriteString("#### Where itlproxy's CPU goes\n\n")
	b.WriteString("The top of its CPU profile under load (`profile-top.txt` in the results has the cumulative view too):\n\n```text\n")
	b.WriteString(strings.Join(lines, "\n"))
	b.WriteString("\n```\n")
}

// count writes n with thousands separators: 10,000.
func count(n int) string {
	s := strconv.Itoa(n)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}

// flagged prints a count that should be zero, in bold when it is not.
func flagged(n int64) string {
	if n == 0 {
		return "0"
	}
	return fmt.Sprintf("**%d**", n)
}

func ms(seconds float64) string { return fmt.Sprintf("%.2f", seconds*1e3) }

func added(seconds float64) string { return fmt.Sprintf("%+.2f", seconds*1e3) }

func mib(bytes int64) float64 { return float64(bytes) / (1 << 20) }

// num prints a microbenchmark figure with about three significant digits.
func num(v float64) string {
	switch {
	case v == 0:
		return "0"
	case v >= 100 || v <= -100:
		return fmt.Sprintf("%.0f", v)
	case v >= 1 || v <= -1:
		return fmt.Sprintf("%.1f", v)
	}
	return fmt.Sprintf("%.3g", v)
}
