package demo

import (
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/itlproxy/itlproxy/metrics"
)

// TestDemoTable reads a real registry after known streams: counts,
// outcomes, tokens per second, quantiles interpolated in the classic
// buckets as histogram_quantile does, and the share of judged streams
// that met their objectives (the canceled one is not judged).
func TestDemoTable(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := metrics.New(reg, metrics.Options{MaxModels: 4, StallThreshold: time.Second,
		SLOs: metrics.SLOs{Default: metrics.Objectives{TTFT: 300 * time.Millisecond}}})
	if err != nil {
		t.Fatal(err)
	}
	l := m.RequestLabels("m1", "chat_completions", "", "")
	s := m.StartStream(l, metrics.IDs{})
	s.FirstToken(250 * time.Millisecond) // in (0.2, 0.25]
	s.Gap(20*time.Millisecond, 0)        // in (0.0175, 0.02]
	s.Gap(30*time.Millisecond, 0)        // in (0.025, 0.03]
	s.End(metrics.StreamEnd{Outcome: metrics.OutcomeCompleted, TPOT: -1})
	m.Tokens(l, 5, 3)
	m.Request(l, true, 200, time.Second)
	canceled := m.StartStream(l, metrics.IDs{})
	canceled.End(metrics.StreamEnd{Outcome: metrics.OutcomeClientCanceled, TPOT: -1})
	m.Request(l, true, 499, time.Second)

	// A stream that stalled twice on its own (no other stream of its
	// server was waiting): the upstream's.
	stalled := m.StartStream(m.RequestLabels("stalled", "chat_completions", "", ""), metrics.IDs{})
	stalled.FirstToken(time.Second)
	stalled.Gap(2*time.Second, 0)
	stalled.Gap(3*time.Second, 0)
	stalled.End(metrics.StreamEnd{Outcome: metrics.OutcomeCompleted, TPOT: -1})

	snap, err := snapshotOf(reg)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(snap.table([]string{"m1", "idle", "stalled"}, 2*time.Second)), "\n")
	if len(lines) != 4 || !strings.Contains(lines[0], "after 2s") || !strings.Contains(lines[0], "ITL p50") ||
		!strings.Contains(lines[0], "stalls prefill/client/upstream") {
		t.Fatalf("table:\n%s", strings.Join(lines, "\n"))
	}
	// TTFT: rank 0.5 of 1 is half-way through (0.2, 0.25]; rank 0.99
	// almost at its end. ITL: rank 1 of 2 closes (0.0175, 0.02]; rank
	// 1.98 is 98% through (0.025, 0.03].
	for i, want := range [][]string{
		{"m1", "2", "1/1/0", "1.5", "225ms", "249.5ms", "20ms", "29.9ms", "2", "0/0/0", "100%", "of", "1"},
		{"idle", "0", "0/0/0", "0.0", "-", "-", "-", "-", "0", "0/0/0", "-"},
	} {
		if got := strings.Fields(lines[i+1]); strings.Join(got, " ") != strings.Join(want, " ") {
			t.Errorf("row %d: %q, want %q", i+1, got, want)
		}
	}
	if got := strings.Fields(lines[3]); len(got) < 10 || got[0] != "stalled" || got[9] != "0/0/2" {
		t.Errorf("the stalled stream's row: %q, want its two stalls counted as the upstream's", got)
	}
}
