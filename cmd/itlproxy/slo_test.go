package main

import (
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/itlproxy/itlproxy/internal/e2e"
)

const ms = time.Millisecond

// fixedSchedule gives every model the same TTFT and gaps.
func fixedSchedule(ttft time.Duration, gaps ...time.Duration) func(string) (time.Duration, []time.Duration) {
	return func(string) (time.Duration, []time.Duration) { return ttft, gaps }
}

// TestSLOBreachesFromOutside runs the binary's run() with objectives from
// the environment, overridden per model by a file, streams a known
// schedule, and expects /metrics to count every breach and stall exactly
// and to export every objective. Scheduled values sit at least 19 ms from
// every threshold, and the stall threshold 35 ms from both gaps around it:
// eight streams run the same schedule at once, so on a busy machine under
// -race one late read can move a gap by several milliseconds.
func TestSLOBreachesFromOutside(t *testing.T) {
	// TTFT 200ms; gaps 10, 50, 10, 120, 5 ms (6 tokens): TPOT = 195/5 = 39ms.
	up := httptest.NewServer(scheduledUpstream{schedule: fixedSchedule(200*ms, 10*ms, 50*ms, 10*ms, 120*ms, 5*ms)})
	defer up.Close()
	sloFile := filepath.Join(t.TempDir(), "slo.yaml")
	if err := os.WriteFile(sloFile, []byte("models:\n  team/strict:v1.5: {ttft: 150ms, itl: 30ms}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	in := start(t, nil, map[string]string{
		"ITLPROXY_UPSTREAM_URL":    up.URL,
		"ITLPROXY_SLO_TTFT":        "1s",
		"ITLPROXY_SLO_ITL":         "200ms",
		"ITLPROXY_SLO_TPOT":        "20ms",
		"ITLPROXY_SLO_FILE":        sloFile,
		"ITLPROXY_STALL_THRESHOLD": "85ms",
	})
	const perModel = 4
	models := []string{"team/strict:v1.5", "loose"}
	e2e.Load(t, in.proxy, 0, e2e.Streams(perModel, models...)...)
	fs := recordedStreams(t, in, perModel*len(models))

	for _, c := range []struct {
		name, model, slo string
		want             float64
	}{
		// strict: TTFT 200 > 150; gaps 50 and 120 > 30; TPOT 39 > 20 (from the env).
		{"itlproxy_slo_breaches_total", "team/strict:v1.5", "ttft", perModel},
		{"itlproxy_slo_breaches_total", "team/strict:v1.5", "itl", 2 * perModel},
		{"itlproxy_slo_breaches_total", "team/strict:v1.5", "tpot", perModel},
		// loose, on the env defaults: TTFT 200 < 1s; no gap > 200ms; TPOT 39 > 20.
		{"itlproxy_slo_breaches_total", "loose", "ttft", 0},
		{"itlproxy_slo_breaches_total", "loose", "itl", 0},
		{"itlproxy_slo_breaches_total", "loose", "tpot", perModel},
		{"itlproxy_slo_objective_seconds", "team/strict:v1.5", "ttft", 0.15},
		{"itlproxy_slo_objective_seconds", "team/strict:v1.5", "itl", 0.03},
		{"itlproxy_slo_objective_seconds", "team/strict:v1.5", "tpot", 0.02},
		{"itlproxy_slo_objective_seconds", "loose", "ttft", 1},
		{"itlproxy_slo_objective_seconds", "loose", "itl", 0.2},
		{"itlproxy_slo_objective_seconds", "_other", "itl", 0.2},
		{"itlproxy_slo_objective_seconds", "_unknown", "tpot", 0.02},
	} {
		series := fs.Series(c.name, "model", c.model, "slo", c.slo)
		if got := fs.Value(c.name, "model", c.model, "slo", c.slo); len(series) != 1 || got != c.want {
			t.Errorf("%s{model=%q,slo=%q} = %v (%d series), want %v", c.name, c.model, c.slo, got, len(series), c.want)
		}
	}
	for _, model := range models {
		// One 120ms gap per stream is over the 85ms stall threshold.
		if got := fs.Value("itlproxy_stalls_total", "model", model); got != perModel {
			t.Errorf("stalls of %s = %v, want %d", model, got, perModel)
		}
	}
	// The breach count is exactly _count minus the bucket at the objective.
	n, _ := fs.Histogram("itlproxy_inter_token_latency_seconds", "model", "team/strict:v1.5")
	var within float64
	for _, b := range fs.Series("itlproxy_inter_token_latency_seconds", "model", "team/strict:v1.5")[0].GetHistogram().GetBucket() {
		if b.GetUpperBound() == 0.03 {
			within = float64(b.GetCumulativeCount())
		}
	}
	if breaches := fs.Value("itlproxy_slo_breaches_total", "model", "team/strict:v1.5", "slo", "itl"); float64(n)-within != breaches {
		t.Errorf("ITL _count %d - bucket{le=0.03} %v = %v, but %v breaches", n, within, float64(n)-within, breaches)
	}
}
