package main

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// partSteps are the attribution's configurations in the order bench/run.sh
// runs them: itlproxy's benchmark build with every part on, then with one
// more part switched off at each step (ITLPROXY_PARTS_OFF, proxy/parts.go),
// down to the plain Go proxy. What a step saves is what its part costs
// with the parts below it still on.
var partSteps = []struct{ config, label string }{
	{"all", "itlproxy, every part on"},
	{"recorder", "stream recorder"},
	{"sessions", "session tracker"},
	{"observations", "metric observations (TTFT, gaps, load bands, exemplars, SLOs, tokens per event)"},
	{"split", "split and classify (SSE splitter, JSON reader, tally)"},
	{"exchange", "exchange and ids (request id, labels, request and stream counters, idle timer)"},
	{"routing", "routing and request inspection (router, request body read for the model)"},
	{"plain", "the plain Go proxy (its *costs*: what is left, the framing guard and the listener's, server's and transport's settings)"},
}

// partsResults are the attribution's CPU figures: per number of streams
// and configuration, CPU ms per 1,000 token events of each round.
type partsResults struct {
	cpu    map[int]map[string][]float64
	failed int64
}

// loadParts reads parts-<streams>-<config>-<round>.json.
func loadParts(dir string) (*partsResults, error) {
	files, err := filepath.Glob(filepath.Join(dir, "parts-*.json"))
	if err != nil || len(files) == 0 {
		return nil, err
	}
	p := &partsResults{cpu: map[int]map[string][]float64{}}
	for _, f := range files {
		fields := strings.Split(strings.TrimSuffix(filepath.Base(f), ".json"), "-")
		if len(fields) != 4 {
			return nil, fmt.Errorf("%s: want parts-<streams>-<config>-<round>.json", f)
		}
		streams, err := strconv.Atoi(fields[1])
		if err != nil {
			return nil, fmt.Errorf("%s: %w", f, err)
		}
		var r report
		if err := readJSON(f, &r); err != nil {
			return nil, err
		}
		p.failed += r.Total.Requests.Failed
		x, ok := (&row{rep: r}).cpuPer1k()
		if !ok {
			fmt.Fprintf(os.Stderr, "tabulate: %s has no CPU reading\n", f)
			continue
		}
		if p.cpu[streams] == nil {
			p.cpu[streams] = map[string][]float64{}
		}
		p.cpu[streams][fields[2]] = append(p.cpu[streams][fields[2]], x)
	}
	return p, nil
}

func mean(xs []float64) float64 {
	s := 0.0
	for _, x := range xs {
		s += x
	}
	return s / float64(len(xs))
}

// partsTable writes where itlproxy's CPU per event goes, part by part.
func (res *results) partsTable(b *strings.Builder) {
	p := res.parts
	if p == nil {
		return
	}
	sizes := make([]int, 0, len(p.cpu))
	for s := range p.cpu {
		sizes = append(sizes, s)
	}
	slices.Sort(sizes)
	b.WriteString("#### Where the cost goes\n\n")
	b.WriteString("CPU ms per 1,000 token events, the mean of the rounds (each round runs every configuration once, the second in reverse order). Each row switches one more part off in itlproxy's benchmark build (`go build -tags itlproxy_parts`, `ITLPROXY_PARTS_OFF`), so that a row's *costs* (the row above's CPU − its own) is what its part costs with the parts above it off and those below it on; *share* is that over itlproxy (every part on) − the plain Go proxy. A negative cost is within the runs' noise (a few percent).\n\n")
	b.WriteString("| part switched off |")
	sep := "|---|"
	for _, s := range sizes {
		fmt.Fprintf(b, " %s streams: CPU | costs | share |", count(s))
		sep += "--:|--:|--:|"
	}
	b.WriteString("\n" + sep + "\n")
	for i, step := range partSteps {
		label := "− " + step.label
		if i == 0 || step.config == "plain" {
			label = step.label
		}
		fmt.Fprintf(b, "| %s |", label)
		for _, s := range sizes {
			b.WriteString(p.cell(s, i))
		}
		b.WriteString("\n")
	}
	b.WriteString("\n")
	for _, s := range sizes {
		all, traced := p.cpu[s]["all"], p.cpu[s]["traced"]
		if len(all) == 0 || len(traced) == 0 {
			continue
		}
		fmt.Fprintf(b, "Tracing on (every request a span, sampler 1.0, exported over OTLP/HTTP to `itlbench otlpsink`) at %s streams: %.1f CPU ms per 1,000 events, %+.1f (%+.0f%%) over every part on.\n",
			count(s), mean(traced), mean(traced)-mean(all), 100*(mean(traced)/mean(all)-1))
	}
	if p.failed > 0 {
		fmt.Fprintf(b, "\n**%d requests failed** in these runs.\n", p.failed)
	}
	b.WriteString("\n")
}

// cell is step i's CPU, what it saves over step i-1, and that over the
// whole difference, at s streams.
func (p *partsResults) cell(s, i int) string {
	cur := p.cpu[s][partSteps[i].config]
	if len(cur) == 0 {
		return " — | — | — |"
	}
	text := fmt.Sprintf(" %.1f |", mean(cur))
	prev := p.cpu[s][partSteps[max(i-1, 0)].config]
	if i == 0 || len(prev) == 0 {
		return text + " | |"
	}
	saves := mean(prev) - mean(cur)
	return text + fmt.Sprintf(" %.1f | %s |", saves, p.share(s, saves))
}

func (p *partsResults) share(s int, d float64) string {
	all, plain := p.cpu[s]["all"], p.cpu[s]["plain"]
	if len(all) == 0 || len(plain) == 0 || mean(all) <= mean(plain) {
		return "—"
	}
	return fmt.Sprintf("%.0f%%", 100*d/(mean(all)-mean(plain)))
}
