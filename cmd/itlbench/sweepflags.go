package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// sweepConfig is a sweep's command line, checked: a load run's, but for
// the concurrency, which each level sets.
type sweepConfig struct {
	config
	levels []int
	report string // -report: the HTML page's file, "" for none
}

// objectives are what each level (and each request, for goodput) is
// judged against; zero: none of that kind.
type objectives struct {
	ttft, itl time.Duration // p99 TTFT and p99 ITL
}

// defaultLevelDuration is a level's measured window without -duration:
// long enough for a few hundred streams of a few seconds at the usual
// levels, and a p99 over tens of thousands of gaps.
const defaultLevelDuration = 30 * time.Second

const sweepUsageHead = `itlbench sweep steps the load over concurrency levels, judges each level
against objectives on p99 TTFT and p99 ITL, and finds the capacity: the
highest level that met them, and which objective bound it. It measures as a
load run does (itlbench -h), on the client's clock, with itlproxy's own
event reader.

Each level runs its streams in a closed loop (each request starts when one
ends). It first settles: until as many requests as it has streams have
ended (the burst of the level's start is then behind) and any -ramp is
over. It then measures the requests that start within -duration, keeping
the load at the level until the last of them has ended, and lets the
requests still in flight drain before the next level starts. A level's
rates are its requests' output over the time they took per stream
(their summed durations over the level's streams): what its streams
sustain. Ctrl-C stops at once and reports the levels done.

usage:
  itlbench sweep -levels 1,2,4,8,16,32 [flags]

`

const sweepUsageTail = `
A level meets the objectives when its p99 TTFT is within -slo-ttft, its
p99 ITL (every gap between token-bearing events) within -slo-itl, and at most
1% of its requests failed (the tail a p99 leaves); a level with no sample of
a kind misses that kind. The capacity is the highest level that met them
(one that met them above one that missed still counts, as itlproxy's
capacity rule counts a band); it is bound by what the level above it
missed: ttft, itl or errors. Goodput is the share of a level's requests
that met every objective each: succeeded with tokens, TTFT within -slo-ttft,
and a mean gap within -slo-itl (a request's ITL as vLLM's and AIPerf's
goodput judge it).

With -compare-metrics, each level's requests (settle, fill and drain included:
the proxy cannot tell them apart) are compared with what itlproxy measured
of them, and, at the end, itlproxy's own capacity estimate for each model
(model:itlproxy_capacity_streams, computed as the rule computes it, over the
sweep's scrapes) is shown beside the sweep's.

Pick levels up to 3 to 5 times the expected peak of streams in flight per
server, denser where the capacity is expected (docs/load-testing.md).

Examples:
  itlbench sweep -url http://127.0.0.1:8000/v1 -levels 1,2,4,8,16,32,64 -slo-itl 50ms -slo-ttft 2s
  itlbench sweep -levels 8,16,24,32,48,64 -duration 60s -slo-itl 40ms -report capacity.html -json > capacity.json
  itlbench sweep -url http://127.0.0.1:8080/v1 -levels 1,4,16,64 -slo-itl 50ms \
      -compare-metrics http://127.0.0.1:9090/metrics
`

// refusedInSweep are a load run's flags a sweep does not take, and why.
var refusedInSweep = []struct{ name, why string }{
	{"c", "a sweep's concurrency is each of -levels"},
	{"requests", "each level measures for -duration"},
	{"rate", "a sweep steps the concurrency; each level is a closed loop"},
	{"warmup", "each level settles before it measures"},
	{"watch-pid", "it is for a load run: a sweep's levels settle and fill around what they measure"},
}

// parseSweepFlags reads a sweep's command line. help is true when it
// asked for the usage, which is then written to stdout.
func parseSweepFlags(args []string, stdout io.Writer) (sc sweepConfig, help bool, err error) {
	fs := flag.NewFlagSet("itlbench sweep", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	check := defineLoadFlags(fs, &sc.config)
	for name, usage := range map[string]string{
		"duration":        "how long each level measures, after it settles (default 30s)",
		"ramp":            "start each level's workers evenly over this time instead of at once; over about\none request's length, its streams also end out of step, as a server's usually do",
		"json":            "print the sweep as JSON on stdout",
		"compare-metrics": "itlproxy's /metrics `URL`: scrape before and after each level, compare its TTFT,\nITL and TPOT with the client's, and show itlproxy's capacity estimate beside\nthe sweep's",
	} {
		fs.Lookup(name).Usage = usage
	}
	levels := fs.String("levels", "", "the concurrency `levels`, comma-separated and increasing, e.g. 1,2,4,8,16,32")
	sloTTFT := fs.String("slo-ttft", "", "objective on each level's p99 time to first token, a `duration`; none if not given")
	sloITL := fs.String("slo-itl", "", "objective on each level's p99 inter-token latency (every gap between token\nevents), a `duration`; none if not given")
	fs.StringVar(&sc.report, "report", "", "write the sweep as one self-contained HTML page with its charts to `file`")
	if help, err = parseFlags(fs, args, io.Discard, "", ""); help {
		writeUsage(stdout, shownInSweep(fs), sweepUsageHead, sweepUsageTail)
	}
	if help || err != nil {
		return sc, help, err
	}
	if fs.NArg() > 0 {
		return sc, false, &usageError{fmt.Errorf("unexpected argument %q (flags come first; the target is -url)", fs.Arg(0))}
	}
	set, errs := check()
	bad := func(format string, a ...any) { errs = append(errs, fmt.Errorf(format, a...)) }
	for _, r := range refusedInSweep {
		if set[r.name] {
			bad("-%s: %s", r.name, r.why)
		}
	}
	if !sc.stream {
		bad("-stream=false: a sweep judges streams' TTFT and ITL")
	}
	if !set["duration"] {
		sc.duration = defaultLevelDuration
	}
	if sc.levels, err = parseLevels(*levels); err != nil {
		errs = append(errs, err)
	} else {
		sc.concurrency = sc.levels[len(sc.levels)-1]
	}
	if sc.objectives.ttft, err = parseObjective("slo-ttft", *sloTTFT); err != nil {
		errs = append(errs, err)
	}
	if sc.objectives.itl, err = parseObjective("slo-itl", *sloITL); err != nil {
		errs = append(errs, err)
	}
	if sc.report != "" {
		if fi, err := os.Stat(filepath.Dir(sc.report)); err != nil || !fi.IsDir() {
			bad("-report %q: its directory does not exist", sc.report)
		} else if fi, err := os.Stat(sc.report); err == nil && fi.IsDir() {
			bad("-report %q: is a directory; want a file", sc.report)
		}
	}
	if len(errs) > 0 {
		return sc, false, &usageError{errors.Join(errs...)}
	}
	return sc, false, nil
}

// shownInSweep is fs without the flags a sweep refuses, for its usage.
func shownInSweep(fs *flag.FlagSet) *flag.FlagSet {
	shown := flag.NewFlagSet(fs.Name(), flag.ContinueOnError)
	fs.VisitAll(func(f *flag.Flag) {
		for _, r := range refusedInSweep {
			if r.name == f.Name {
				return
			}
		}
		if f.Name == "stream" {
			return // a sweep needs streams
		}
		shown.Var(f.Value, f.Name, f.Usage)
	})
	return shown
}

// parseLevels reads -levels: whole numbers of streams, 1 or more, in
// increasing order.
func parseLevels(s string) ([]int, error) {
	if strings.TrimSpace(s) == "" {
		return nil, errors.New("-levels: want the concurrency levels, comma-separated and increasing, e.g. 1,2,4,8,16,32")
	}
	var levels []int
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		n, err := strconv.Atoi(f)
		switch {
		case err != nil:
			return nil, fmt.Errorf("-levels %q: %q is not a whole number of streams", s, f)
		case n < 1:
			return nil, fmt.Errorf("-levels %q: a level of %d: want 1 stream or more", s, n)
		case len(levels) > 0 && n <= levels[len(levels)-1]:
			return nil, fmt.Errorf("-levels %q: %d after %d: want the levels in increasing order, each once", s, n, levels[len(levels)-1])
		}
		levels = append(levels, n)
	}
	return levels, nil
}

// parseObjective reads an objective's flag: "" for none, else a positive
// duration.
func parseObjective(name, s string) (time.Duration, error) {
	if s == "" {
		return 0, nil
	}
	d, err := time.ParseDuration(s)
	switch {
	case err != nil:
		return 0, fmt.Errorf("-%s %q: want a duration such as 50ms or 2s", name, s)
	case d <= 0:
		return 0, fmt.Errorf("-%s %q: want a positive duration (leave the flag out for no objective)", name, s)
	}
	return d, nil
}
