package main

import (
	"slices"
	"strconv"
	"strings"
)

// bench is one Go benchmark's metrics, by unit ("ns/op", "ns/event", ...):
// the median of its runs when -count ran it more than once.
type bench struct {
	name    string // without the -GOMAXPROCS suffix
	runs    int
	metrics map[string]float64
}

// parseBenchmarks reads `go test -bench` output.
func parseBenchmarks(text string) []bench {
	samples := map[string]map[string][]float64{}
	var order []string
	for line := range strings.Lines(text) {
		f := strings.Fields(line)
		if len(f) < 4 || !strings.HasPrefix(f[0], "Benchmark") {
			continue
		}
		if _, err := strconv.Atoi(f[1]); err != nil {
			continue // a log line that starts with a benchmark's name
		}
		name := f[0]
		if i := strings.LastIndexByte(name, '-'); i > 0 {
			if _, err := strconv.Atoi(name[i+1:]); err == nil {
				name = name[:i]
			}
		}
		if samples[name] == nil {
			samples[name] = map[string][]float64{}
			order = append(order, name)
		}
		for i := 2; i+1 < len(f); i += 2 {
			if v, err := strconv.ParseFloat(f[i], 64); err == nil {
				samples[name][f[i+1]] = append(samples[name][f[i+1]], v)
			}
		}
	}
	var out []bench
	for _, name := range order {
		b := bench{name: name, metrics: map[string]float64{}}
		for unit, vs := range samples[name] {
			b.metrics[unit] = median(vs)
			b.runs = max(b.runs, len(vs))
		}
		out = append(out, b)
	}
	return out
}

func median(vs []float64) float64 {
	s := slices.Sorted(slices.Values(vs))
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

// perEvent returns a benchmark's cost per event: its per-event metrics, or
// its per-op ones for the benchmarks whose op is one event.
func (b bench) perEvent() (ns, bytes, allocs, cpuNS float64, ok bool) {
	if ns, ok = b.metrics["ns/event"]; ok {
		cpuNS, hasCPU := b.metrics["cpu-ns/event"]
		if !hasCPU {
			cpuNS = -1
		}
		return ns, b.metrics["B/event"], b.metrics["allocs/event"], cpuNS, true
	}
	ns, ok = b.metrics["ns/op"]
	return ns, b.metrics["B/op"], b.metrics["allocs/op"], -1, ok
}

func (res *results) benchmark(name string) (bench, bool) {
	for _, b := range res.micro {
		if b.name == name {
			return b, true
		}
	}
	return bench{}, false
}
