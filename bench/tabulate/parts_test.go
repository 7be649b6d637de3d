package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestPartsTable: a part's CPU is its share of the profile times
// itlproxy's CPU per 1,000 events, and its share of the cost is that over
// itlproxy − plain.
func TestPartsTable(t *testing.T) {
	dir := t.TempDir()
	// CPU seconds for 100,000 events: x ms per 1,000 events = x/10 s.
	for cfg, x := range map[string]float64{"itlproxy": 30, "plain": 20, "traced": 33, "pushed": 30.6} {
		rep := fmt.Sprintf(`{"concurrency":100,"total":{"requests":{"OK":10},"token_events":100000},"processes":{"cpu_seconds":%g}}`, x/10)
		if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("parts-00100-%s.json", cfg)), []byte(rep), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	shares := "split and classify\t300ms\t3s\nstream recorder\t0.15s\t3s\n"
	if err := os.WriteFile(filepath.Join(dir, "parts-00100-shares.tsv"), []byte(shares), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "env.txt"), []byte("mode=parts\nstreams=\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	md := tablesContain(t, dir,
		"| itlproxy, every default on | 30.0 | +10.0 |",
		"| the plain Go proxy | 20.0 | |",
		"| split and classify | 3.0 | 30% |",
		"| stream recorder | 1.5 | 15% |",
		"at 100 streams: 33.0 CPU ms per 1,000 events, +3.0 (+10%) over tracing off",
		"at 100 streams: 30.6 CPU ms per 1,000 events, +0.6 (+2%) over /metrics alone")
	if strings.Contains(md, "#### Targets") {
		t.Error("a --parts run has no comparison: no verdicts")
	}
}

// TestPartsSharesRefused: a shares file that does not read is an error,
// not a table of zeros.
func TestPartsSharesRefused(t *testing.T) {
	dir := t.TempDir()
	rep := `{"concurrency":100,"total":{"requests":{"OK":10},"token_events":100000},"processes":{"cpu_seconds":3}}`
	if err := os.WriteFile(filepath.Join(dir, "parts-00100-itlproxy.json"), []byte(rep), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "parts-00100-shares.tsv"), []byte("split\tmany\t3s\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := loadParts(dir); err == nil || !strings.Contains(err.Error(), "not durations") {
		t.Errorf("loadParts: %v, want an error about the durations", err)
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
