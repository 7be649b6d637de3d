package main

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
)

// partsResults are the attribution's figures at each number of streams:
// itlproxy's, the plain Go proxy's, traced itlproxy's and pushing
// itlproxy's CPU ms per 1,000 token events, and each part's share of itlproxy's CPU profile, in the
// order of bench/parts.txt.
type partsResults struct {
	cpu    map[int]map[string]float64 // streams → itlproxy, plain, traced, pushed
	shares map[int][]partShare
	failed int64
}

type partShare struct {
	part  string
	share float64 // of the profile's samples
}

// loadParts reads parts-<streams>-<config>.json and
// parts-<streams>-shares.tsv (part, focused samples, all samples, as pprof
// prints them).
func loadParts(dir string) (*partsResults, error) {
	files, err := filepath.Glob(filepath.Join(dir, "parts-*.json"))
	if err != nil || len(files) == 0 {
		return nil, err
	}
	p := &partsResults{cpu: map[int]map[string]float64{}, shares: map[int][]partShare{}}
	for _, f := range files {
		fields := strings.Split(strings.TrimSuffix(filepath.Base(f), ".json"), "-")
		if len(fields) != 3 {
			return nil, fmt.Errorf("%s: want parts-<streams>-<config>.json", f)
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
			p.cpu[streams] = map[string]float64{}
			if p.shares[streams], err = readShares(filepath.Join(dir, fmt.Sprintf("parts-%s-shares.tsv", fields[1]))); err != nil {
				return nil, err
			}
		}
		p.cpu[streams][fields[2]] = x
	}
	return p, nil
}

// readShares reads a shares file; none (the profile failed) is no shares.
func readShares(file string) ([]partShare, error) {
	f, err := os.Open(file)
	if os.IsNotExist(err) {
		return nil, nil
	} else if err != nil {
		return nil, err
	}
	defer f.Close()
	var shares []partShare
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Split(sc.Text(), "\t")
		if len(fields) != 3 {
			return nil, fmt.Errorf("%s: %q: want part, focused samples, all samples", file, sc.Text())
		}
		focused, err1 := time.ParseDuration(fields[1])
		all, err2 := time.ParseDuration(fields[2])
		if err1 != nil || err2 != nil || all <= 0 {
			return nil, fmt.Errorf("%s: %q: the samples are not durations", file, sc.Text())
		}
		shares = append(shares, partShare{part: fields[0], share: float64(focused) / float64(all)})
	}
	return shares, sc.Err()
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
	b.WriteString("CPU ms per 1,000 token events. A part's cost is its share of a CPU profile of itlproxy under the same load (the samples whose stack holds one of its functions, `go tool pprof -focus`, `bench/parts.txt`) times itlproxy's CPU per 1,000 events; *share* is that over itlproxy − the plain Go proxy. What no part claims is the relay itself: Go's server, the transport, the system calls.\n\n")
	b.WriteString("| part |")
	sep := "|---|"
	for _, s := range sizes {
		fmt.Fprintf(b, " %s streams: CPU | over plain |", count(s))
		sep += "--:|--:|"
	}
	b.WriteString("\n" + sep + "\n")
	b.WriteString("| itlproxy, every default on |")
	for _, s := range sizes {
		b.WriteString(p.cpuCell(s, "itlproxy"))
	}
	b.WriteString("\n| the plain Go proxy |")
	for _, s := range sizes {
		b.WriteString(p.cpuCell(s, "plain"))
	}
	b.WriteString("\n")
	for _, part := range p.partNames(sizes) {
		fmt.Fprintf(b, "| %s |", part)
		for _, s := range sizes {
			b.WriteString(p.partCell(s, part))
		}
		b.WriteString("\n")
	}
	b.WriteString("\n")
	for _, s := range sizes {
		all, ok := p.cpu[s]["itlproxy"]
		if !ok {
			continue
		}
		if traced, ok := p.cpu[s]["traced"]; ok {
			fmt.Fprintf(b, "Tracing on (every request a span, sampler 1.0, exported over OTLP/HTTP to `itlbench otlpsink`) at %s streams: %.1f CPU ms per 1,000 events, %+.1f (%+.0f%%) over tracing off.\n",
				count(s), traced, traced-all, 100*(traced/all-1))
		}
		if pushed, ok := p.cpu[s]["pushed"]; ok {
			fmt.Fprintf(b, "Metrics pushed over OTLP/HTTP every second as well (to `itlbench otlpsink`) at %s streams: %.1f CPU ms per 1,000 events, %+.1f (%+.0f%%) over /metrics alone.\n",
				count(s), pushed, pushed-all, 100*(pushed/all-1))
		}
	}
	if p.failed > 0 {
		fmt.Fprintf(b, "\n**%d requests failed** in these runs.\n", p.failed)
	}
	b.WriteString("\n")
}

// partNames are the parts in the order the first size's shares list them.
func (p *partsResults) partNames(sizes []int) []string {
	var names []string
	for _, s := range sizes {
		for _, sh := range p.shares[s] {
			if !slices.Contains(names, sh.part) {
				names = append(names, sh.part)
			}
		}
	}
	return names
}

func (p *partsResults) cpuCell(s int, config string) string {
	x, ok := p.cpu[s][config]
	if !ok {
		return " — | |"
	}
	if config == "plain" {
		return fmt.Sprintf(" %.1f | |", x)
	}
	plain, ok := p.cpu[s]["plain"]
	if !ok {
		return fmt.Sprintf(" %.1f | |", x)
	}
	return fmt.Sprintf(" %.1f | %+.1f |", x, x-plain)
}

// partCell is the part's CPU at s streams and its share of itlproxy's
// cost over the plain Go proxy.
func (p *partsResults) partCell(s int, part string) string {
	all, ok := p.cpu[s]["itlproxy"]
	i := slices.IndexFunc(p.shares[s], func(sh partShare) bool { return sh.part == part })
	if !ok || i < 0 {
		return " — | — |"
	}
	x := p.shares[s][i].share * all
	over := "—"
	if plain, ok := p.cpu[s]["plain"]; ok && all > plain {
		over = fmt.Sprintf("%.0f%%", 100*x/(all-plain))
	}
	return fmt.Sprintf(" %.1f | %s |", x, over)
}
