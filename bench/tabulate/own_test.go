package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// part is one of the own account's histograms in a fixture: its mean,
// and its p50 and p99 as JSON quantiles.
type part struct {
	mean     float64
	p50, p99 string
}

func est(seconds float64) string   { return fmt.Sprintf(`{"seconds":%g}`, seconds) }
func under(seconds float64) string { return fmt.Sprintf(`{"seconds":%g,"bound":"upper"}`, seconds) }
func over(seconds float64) string  { return fmt.Sprintf(`{"seconds":%g,"bound":"lower"}`, seconds) }

// ownJSON is itlbench's compare field with an own account of a run.
func ownJSON(events int, delay, wait, write part, legP99 string) string {
	f := func(count int, p part) string {
		return fmt.Sprintf(`{"count":%d,"mean":%g,"p50":%s,"p99":%s}`, count, p.mean, p.p50, p.p99)
	}
	return fmt.Sprintf(`"compare":{"sets":[],"own":{"event_delay":%s,"client_write":%s,"scheduler_latency":%s,`+
		`"request_forward":{"count":100,"mean":0.0001,"p50":{"seconds":0.0001},"p99":%s}}}`,
		f(events, delay), f(events, write), f(900, wait), legP99)
}

// writeOwnRun writes a quick run's reports: direct and itlproxy at 100
// and 400 streams, nginx at 100 (no account), and a paced itlproxy
// without direct.
func writeOwnRun(t *testing.T, dir string) {
	t.Helper()
	write := func(name, text string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("env.txt", "mode=quick\nstreams=100 400\n")
	rep := func(mean, p50, p99 float64, own string) string {
		if own != "" {
			own = "," + own
		}
		return fmt.Sprintf(`{"concurrency":1,"total":{"requests":{"ok":10},"token_events":6400,`+
			`"transit":{"count":6400,"mean":%g,"p50":%g,"p99":%g}}%s}`, mean, p50, p99, own)
	}
	write("load-00100-direct.json", rep(0.00028, 0.00016, 0.00204, ""))
	write("load-00100-itlproxy.json", rep(0.0006, 0.00085, 0.00448, ownJSON(6400,
		part{1.2e-6, under(1e-5), under(1e-5)}, part{1.5e-4, est(3.2e-5), est(0.0042)}, part{1.75e-5, under(1e-5), est(0.00046)}, est(0.00097))))
	write("load-00100-nginx.json", rep(0.0005, 0.0008, 0.004, ""))
	write("load-00400-direct.json", rep(0.0018, 0.0002, 0.004, ""))
	write("load-00400-itlproxy.json", rep(0.0037, 0.005, 0.026, ownJSON(25600,
		part{2.5e-5, est(2e-5), est(9e-5)}, part{0.001, est(0.0012), est(0.024)}, part{2e-5, est(4e-5), est(0.003)}, est(0.004))))
	write("paced-01000-itlproxy.json", rep(0.001, 0.0012, 0.007, ownJSON(1000,
		part{1e-6, under(1e-5), under(1e-5)}, part{2e-5, est(2e-5), over(1)}, part{5e-6, under(1e-5), est(5e-5)}, est(0.0002))))
}

// TestOwnTable: itlproxy's own account sits next to the transit it added
// in the same run; the kernel's share is the added transit less the own
// delay, the wait to run and the client write, by the means and by the
// p50s (marked "at least" where a p50 is only below the first bound);
// the CSV has the same columns, empty for the other targets.
func TestOwnTable(t *testing.T) {
	dir := t.TempDir()
	writeOwnRun(t, dir)
	res, err := load(dir)
	if err != nil {
		t.Fatal(err)
	}
	md := res.markdown()
	for _, want := range []string{
		"#### What itlproxy measures of itself\n",
		"| load | 100 | 6400 | 1.2 | < 10.0 | < 10.0 | 32.0 | 4200 | < 10.0 | 460 | 970 | +690 | +2440 |\n",
		"| load | 400 | 25600 | 25.0 | 20.0 | 90.0 | 1200 | 24000 | 40.0 | 3000 | 4000 | +4800 | +22000 |\n",
		"| paced | 1,000 | 1000 | 1.0 | < 10.0 | < 10.0 | 20.0 | > 1000000 | < 10.0 | 50.0 | 200 | — | — |\n",
		// Means: 320 − (1.2 + 150 + 17.5) = 151.3; p50s: 690 − (10 + 32 + 10).
		"| load | 100 | +320 | 1.2 | 150 | 17.5 | 151 (47%) | +690 | ≤ 52.0 | ≥ 638 (92%) |\n",
		// Means: 1900 − (25 + 1000 + 20); p50s: 4800 − (20 + 1200 + 40).
		"| load | 400 | +1900 | 25.0 | 1000 | 20.0 | 855 (45%) | +4800 | 1260 | 3540 (74%) |\n",
		"| paced | 1,000 | — | — | — | — | — | — | — | — |\n",
		"no clock inside the process can see",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("the tables lack %q:\n%s", want, md)
		}
	}
	csv := res.csv()
	header, _, _ := strings.Cut(csv, "\n")
	columns := strings.Count(header, ",")
	for _, want := range []string{
		",1.2,<10.0,<10.0,150,32.0,4200,17.5,<10.0,460,970,151,>=638\n",
		",25.0,20.0,90.0,1000,1200,24000,20.0,40.0,3000,4000,855,3540\n",
		",1.0,<10.0,<10.0,20.0,20.0,>1000000,5.0,<10.0,50.0,200,,\n",
		"load,100,direct,", "load,100,nginx,",
	} {
		if !strings.Contains(csv, want) {
			t.Errorf("the CSV lacks %q:\n%s", want, csv)
		}
	}
	for line := range strings.Lines(csv) {
		if n := strings.Count(line, ","); n != columns {
			t.Errorf("%d commas, the header has %d: %s", n, columns, line)
		}
		if strings.HasPrefix(line, "load,100,direct,") && !strings.HasSuffix(line, strings.Repeat(",", ownCSVColumns)+"\n") {
			t.Errorf("direct has own columns: %s", line)
		}
	}
}

// TestSplitByMedians: a part past the last finite bound leaves no
// estimate; one within the first bucket counts as its bound.
func TestSplitByMedians(t *testing.T) {
	dir := t.TempDir()
	writeOwnRun(t, dir)
	res, err := load(dir)
	if err != nil {
		t.Fatal(err)
	}
	r := res.find("load", 100, "itlproxy")
	if s, ok := res.splitByMedians(r); !ok || !s.seenAtMost || s.kernelText() != "≥ 638 (92%)" {
		t.Errorf("split %+v, %v; want at least 638 µs (92%%) left", s, ok)
	}
	r.own().SchedulerLatency.P50 = bounded{Seconds: ptrTo(1.0), Bound: "lower"}
	if s, ok := res.splitByMedians(r); ok {
		t.Errorf("a p50 past the last bound gave %+v", s)
	}
}

func ptrTo(v float64) *float64 { return &v }

// TestNoOwnTable: runs without -compare-metrics (the full run's of
// before, other targets) leave the table out.
func TestNoOwnTable(t *testing.T) {
	dir := t.TempDir()
	writeRun(t, dir, []int{100}, map[string]figures{
		"direct":   {transitP50: 0.0002, transitP99: 0.001},
		"itlproxy": {cpu: 1, kib: 40, transitP50: 0.0003, transitP99: 0.002},
	})
	res, err := load(dir)
	if err != nil {
		t.Fatal(err)
	}
	if md := res.markdown(); strings.Contains(md, "measures of itself") || strings.Contains(md, "kernel's share") {
		t.Errorf("a table without an account:\n%s", md)
	}
	if csv := res.csv(); !strings.Contains(csv, "load,100,itlproxy,") || !strings.HasSuffix(csv, strings.Repeat(",", ownCSVColumns)+"\n") {
		t.Errorf("the CSV's own columns are not empty:\n%s", csv)
	}
}
