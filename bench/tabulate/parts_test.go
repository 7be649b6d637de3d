package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestPartsTable: each step's cost is the step before's CPU less its own,
// averaged over the rounds, and its share is over itlproxy − plain.
func TestPartsTable(t *testing.T) {
	dir := t.TempDir()
	// CPU seconds for 100,000 events: x ms per 1,000 events = x/10 s.
	cpu := map[string][2]float64{
		"all": {30, 32}, "recorder": {30, 30}, "sessions": {30, 30}, "observations": {28, 28},
		"split": {26, 26}, "exchange": {25, 25}, "routing": {24, 24}, "plain": {21, 21}, "traced": {40, 42},
	}
	for cfg, rounds := range cpu {
		for i, x := range rounds {
			rep := fmt.Sprintf(`{"concurrency":100,"total":{"requests":{"OK":10},"token_events":100000},"processes":{"cpu_seconds":%g}}`, x/10)
			if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("parts-00100-%s-%d.json", cfg, i+1)), []byte(rep), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "env.txt"), []byte("mode=parts\nstreams=\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	md := tablesContain(t, dir,
		"| itlproxy, every part on | 31.0 | | |",
		"| − stream recorder | 30.0 | 1.0 | 10% |",
		"| − session tracker | 30.0 | 0.0 | 0% |",
		"| − metric observations", "| 28.0 | 2.0 | 20% |",
		"| 24.0 | 1.0 | 10% |",
		"plain Go proxy", "| 21.0 | 3.0 | 30% |",
		"at 100 streams: 41.0 CPU ms per 1,000 events, +10.0 (+32%) over every part on")
	if strings.Contains(md, "#### Targets") {
		t.Error("a --parts run has no comparison: no verdicts")
	}
}

// tablesContain makes the tables of the results in dir and checks that
// they hold each of wants; it returns them.
func tablesContain(t *testing.T, dir string, wants ...string) string {
	t.Helper()
	res, err := load(dir)
	if err != nil {
		t.Fatal(err)
	}
	md := res.markdown()
	for _, want := range wants {
		if !strings.Contains(md, want) {
			t.Errorf("no %q in\n%s", want, md)
		}
	}
	return md
}
