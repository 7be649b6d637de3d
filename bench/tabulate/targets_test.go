package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// figures is one target's numbers in a fixture report.
type figures struct {
	cpu                    float64 // seconds, over 100,000 token events
	kib                    int64   // RSS per stream
	transitP50, transitP99 float64 // seconds
}

// writeRun writes the comparison's reports at each of sizes, for the
// targets given (direct: no process watched), and env.txt.
func writeRun(t *testing.T, dir string, sizes []int, targets map[string]figures) {
	t.Helper()
	write := func(name, text string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("env.txt", "mode=full\n")
	for _, n := range sizes {
		for target, f := range targets {
			proc := ""
			if target != "direct" {
				proc = fmt.Sprintf(`,"processes":{"cpu_seconds":%g,"rss_before_bytes":%d,"rss_peak_bytes":%d}`, f.cpu, 1<<20, 1<<20+int64(n)*f.kib<<10)
			}
			write(fmt.Sprintf("load-%05d-%s.json", n, target), fmt.Sprintf(`{"concurrency":%d,"total":{"requests":{"ok":10},"token_events":100000,`+
				`"itl":{"p99":0.02},"transit":{"count":100000,"p50":%g,"p99":%g}}%s}`, n, f.transitP50, f.transitP99, proc))
		}
	}
}

// TestTargets: each verdict is computed from the run's own numbers, met
// or missed with the figure, at the sizes the run has of those the target
// names; the transit table shows what each target adds to direct's.
func TestTargets(t *testing.T) {
	base := map[string]figures{
		"direct":   {transitP50: 0.0002, transitP99: 0.0010},
		"itlproxy": {cpu: 1.0, kib: 40, transitP50: 0.0003, transitP99: 0.00204},
		"plain":    {cpu: 1.0, kib: 45, transitP50: 0.0003, transitP99: 0.0020},
		"nginx":    {cpu: 0.8, kib: 20, transitP50: 0.0004, transitP99: 0.0020},
	}
	worse := map[string]figures{}
	for k, v := range base {
		worse[k] = v
	}
	worse["itlproxy"] = figures{cpu: 1.1, kib: 70, transitP50: 0.0005, transitP99: 0.0031}
	cases := []struct {
		name    string
		sizes   []int
		targets map[string]figures
		want    []string
	}{
		{"met", []int{100, 400}, base, []string{
			"| CPU per token event within 1× the plain Go proxy's at 100, 400 and 1,000 streams | 1.00× at 100; 1.00× at 400 | met |",
			"| CPU per token event within 1.3× nginx's at 400 and 1,000 streams | 1.25× at 400 | met |",
			"| added transit per event: p50 and p99 no worse than the plain Go proxy's + 0.05 ms | p50 +0.10 ms (plain Go proxy +0.10), p99 +1.04 ms (plain Go proxy +1.00) at 100; " +
				"p50 +0.10 ms (plain Go proxy +0.10), p99 +1.04 ms (plain Go proxy +1.00) at 400 | met |",
			"| added transit p99 within 0.5 ms of nginx's at 100 and 400 streams | p50 +0.10 ms (nginx +0.20), p99 +1.04 ms (nginx +1.00) at 100; " +
				"p50 +0.10 ms (nginx +0.20), p99 +1.04 ms (nginx +1.00) at 400 | met |",
			"| RSS per stream in flight at most the plain Go proxy's | 0.89× at 100; 0.89× at 400 | met |",
			"| RSS per stream in flight at most 48 KiB at 400 and 1,000 streams | 40.0 KiB at 400 | met |",
			"| load | 400 | itlproxy | 100000 | 0.30 | 2.04 | +0.10 | +1.04 |",
			"| load | 400 | direct | 100000 | 0.20 | 1.00 | — | — |",
		}},
		{"missed", []int{100, 400}, worse, []string{
			"| 1.10× at 100; 1.10× at 400 | **missed**: 1.10× at 100; 1.10× at 400 |",
			"| 1.38× at 400 | **missed**: 1.38× at 400 |",
			"| **missed**: p50 +0.30 ms (plain Go proxy +0.10), p99 +2.10 ms (plain Go proxy +1.00) at 100; p50 +0.30 ms (plain Go proxy +0.10), p99 +2.10 ms (plain Go proxy +1.00) at 400 |",
			"| **missed**: p50 +0.30 ms (nginx +0.20), p99 +2.10 ms (nginx +1.00) at 100; p50 +0.30 ms (nginx +0.20), p99 +2.10 ms (nginx +1.00) at 400 |",
			"| 1.56× at 100; 1.56× at 400 | **missed**: 1.56× at 100; 1.56× at 400 |",
			"| 70.0 KiB at 400 | **missed**: 70.0 KiB at 400 |",
		}},
		{"sizes the targets do not name", []int{20}, base, []string{
			"| CPU per token event within 1× the plain Go proxy's at 100, 400 and 1,000 streams | no run at these numbers of streams | not measured |",
			"| RSS per stream in flight at most the plain Go proxy's | 0.89× at 20 | met |",
			"| RSS per stream in flight at most 48 KiB at 400 and 1,000 streams | no run at these numbers of streams | not measured |",
			"| added transit p99 within 0.5 ms of nginx's at 100 and 400 streams | no run at these numbers of streams | not measured |",
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			writeRun(t, dir, c.sizes, c.targets)
			res, err := load(dir)
			if err != nil {
				t.Fatal(err)
			}
			md := res.markdown()
			for _, want := range c.want {
				if !strings.Contains(md, want) {
					t.Errorf("the tables lack %q:\n%s", want, md)
				}
			}
		})
	}
}

// TestTransitTargetNeedsNginx: without nginx's and the plain Go proxy's
// transit in the run, the transit targets are not measured rather than
// met.
func TestTransitTargetNeedsNginx(t *testing.T) {
	dir := t.TempDir()
	writeRun(t, dir, []int{100}, map[string]figures{
		"direct":   {transitP50: 0.0002, transitP99: 0.001},
		"itlproxy": {cpu: 1, kib: 40, transitP50: 0.0003, transitP99: 0.002},
	})
	res, err := load(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"| added transit per event: p50 and p99 no worse than the plain Go proxy's + 0.05 ms | not measured | not measured |",
		"| added transit p99 within 0.5 ms of nginx's at 100 and 400 streams | not measured | not measured |",
	} {
		if md := res.markdown(); !strings.Contains(md, want) {
			t.Errorf("the tables lack %q:\n%s", want, md)
		}
	}
}

// TestTransitTargetPaced: the paced run's transit is judged in a row of
// its own, from the paced reports only.
func TestTransitTargetPaced(t *testing.T) {
	dir := t.TempDir()
	writeRun(t, dir, []int{400}, map[string]figures{
		"direct":   {transitP50: 0.0002, transitP99: 0.0010},
		"itlproxy": {cpu: 1.0, kib: 40, transitP50: 0.0009, transitP99: 0.0060},
		"plain":    {cpu: 1.0, kib: 45, transitP50: 0.0004, transitP99: 0.0020},
	})
	for target, p := range map[string][2]float64{"direct": {0.0001, 0.0020}, "itlproxy": {0.0009, 0.0040}, "plain": {0.0009, 0.0045}} {
		rep := fmt.Sprintf(`{"concurrency":1000,"total":{"requests":{"ok":10},"token_events":100000,"transit":{"count":100000,"p50":%g,"p99":%g}}}`, p[0], p[1])
		if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("paced-01000-%s.json", target)), []byte(rep), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	tablesContain(t, dir,
		"| added transit per event: p50 and p99 no worse than the plain Go proxy's + 0.05 ms | p50 +0.70 ms (plain Go proxy +0.20), p99 +5.00 ms (plain Go proxy +1.00) at 400 | **missed**",
		"| added transit per event: p50 and p99 no worse than the plain Go proxy's + 0.05 ms, paced run | p50 +0.80 ms (plain Go proxy +0.80), p99 +2.00 ms (plain Go proxy +2.50) at 1,000 | met |")
}
