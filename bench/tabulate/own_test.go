package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// ownJSON is an itlbench -compare-metrics account of a run, with the
// p50s given as JSON quantiles.
func ownJSON(events int, mean float64, delayP50, delayP99, waitP50, waitP99, writeP50, writeP99, legP99 string) string {
	return fmt.Sprintf(`"compare":{"sets":[],"own":{`+
		`"event_delay":{"count":%d,"mean":%g,"p50":%s,"p99":%s},`+
		`"client_write":{"count":%d,"p50":%s,"p99":%s},`+
		`"scheduler_latency":{"count":900,"p50":%s,"p99":%s},`+
		`"request_forward":{"count":100,"p50":{"seconds":0.0001},"p99":%s}}}`,
		events, mean, delayP50, delayP99, events, writeP50, writeP99, waitP50, waitP99, legP99)
}

func est(seconds float64) string   { return fmt.Sprintf(`{"seconds":%g}`, seconds) }
func under(seconds float64) string { return fmt.Sprintf(`{"seconds":%g,"bound":"upper"}`, seconds) }

// TestOwnTable: itlproxy's own account sits next to the transit it added
// in the same run; the kernel's share is the added p50 less the own
// delay's, the wait to run's and the write's p50s, marked "at least"
// where one of them is only below the first bound; the CSV has the same
// columns, empty for the other targets.
func TestOwnTable(t *testing.T) {
	dir := t.TempDir()
	write := func(name, text string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("env.txt", "mode=quick\nstreams=100 400\n")
	rep := func(p50, p99 float64, own string) string {
		if own != "" {
			own = "," + own
		}
		return fmt.Sprintf(`{"concurrency":1,"total":{"requests":{"ok":10},"token_events":6400,"transit":{"count":6400,"p50":%g,"p99":%g}}%s}`, p50, p99, own)
	}
	write("load-00100-direct.json", rep(0.00016, 0.00204, ""))
	write("load-00100-itlproxy.json", rep(0.00085, 0.00448,
		ownJSON(6400, 1.2e-6, under(1e-5), under(1e-5), est(3.2e-5), est(0.0042), under(1e-5), est(0.00046), est(0.00097))))
	write("load-00400-direct.json", rep(0.0002, 0.004, ""))
	write("load-00400-itlproxy.json", rep(0.005, 0.026,
		ownJSON(25600, 2.5e-5, est(2e-5), est(9e-5), est(0.0012), est(0.024), est(4e-5), est(0.003), est(0.004))))
	// Without direct at this size: no added transit, no share.
	write("paced-01000-itlproxy.json", rep(0.0012, 0.007,
		ownJSON(1000, 1e-6, under(1e-5), under(1e-5), est(2e-5), est(0.001), under(1e-5), est(5e-5), est(0.0002))))
	write("load-00100-nginx.json", rep(0.0008, 0.004, ""))
	res, err := load(dir)
	if err != nil {
		t.Fatal(err)
	}
	md := res.markdown()
	for _, want := range []string{
		"#### What itlproxy measures of itself\n",
		"| load | 100 | 6400 | 1.2 | < 10.0 | < 10.0 | 32.0 | 4200 | < 10.0 | 460 | 970 | +690 | +2440 | ≥ 638 (92%) |\n",
		"| load | 400 | 25600 | 25.0 | 20.0 | 90.0 | 1200 | 24000 | 40.0 | 3000 | 4000 | +4800 | +22000 | 3540 (74%) |\n",
		"| paced | 1,000 | 1000 | 1.0 | < 10.0 | < 10.0 | 20.0 | 1000 | < 10.0 | 50.0 | 200 | — | — | — |\n",
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
		",1.2,<10.0,<10.0,32.0,4200,<10.0,460,970,>=638\n",
		",25.0,20.0,90.0,1200,24000,40.0,3000,4000,3540\n",
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
		if strings.HasPrefix(line, "load,100,direct,") && !strings.HasSuffix(line, ",,,,,,,,,\n") {
			t.Errorf("direct has own columns: %s", line)
		}
	}
}

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
	if md := res.markdown(); strings.Contains(md, "measures of itself") {
		t.Errorf("a table without an account:\n%s", md)
	}
}
