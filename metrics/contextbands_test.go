package metrics

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

func TestContextBand(t *testing.T) {
	for _, c := range []struct {
		input int64
		want  string
	}{
		{-1, "unknown"},
		{0, "0-1k"},
		{1023, "0-1k"},
		{1024, "1k-4k"},
		{4095, "1k-4k"},
		{4096, "4k-16k"},
		{16383, "4k-16k"},
		{16384, "16k-64k"},
		{65535, "16k-64k"},
		{65536, "64k-256k"},
		{262143, "64k-256k"},
		{262144, "256k+"},
		{999_999_999_999_999, "256k+"},
	} {
		if got := contextBand(c.input); got != c.want {
			t.Errorf("contextBand(%d) = %q, want %q", c.input, got, c.want)
		}
	}
	if got, want := contextBandsDoc(), "0-1k: fewer than 1,024 input tokens; 1k-4k: fewer than 4,096; 4k-16k: fewer than 16,384; "+
		"16k-64k: fewer than 65,536; 64k-256k: fewer than 262,144; 256k+: more"; got != want {
		t.Errorf("bands as docs/metrics.md says them:\n%s\nwant\n%s", got, want)
	}
}

// TestTPOTByContext: every stream with a TPOT is observed once, in the
// band of its input tokens, with the value the TPOT histogram gets; a
// stream without a TPOT is in no band.
func TestTPOTByContext(t *testing.T) {
	m, reg := newTestMetrics(t, Options{MaxModels: 2})
	l := m.RequestLabels("m", "chat_completions", "", "")
	streams := []struct {
		input int64
		tpot  time.Duration
	}{
		{500, 10 * time.Millisecond}, {900, 12 * time.Millisecond}, {3000, 20 * time.Millisecond},
		{100_000, 80 * time.Millisecond}, {-1, 15 * time.Millisecond}, {2000, -1},
	}
	for _, s := range streams {
		st := m.StartStream(l, IDs{})
		st.FirstToken(time.Millisecond)
		st.End(StreamEnd{Outcome: OutcomeCompleted, TPOT: s.tpot, InputTokens: s.input, OutputTokens: 2})
	}
	fs := gather(t, reg)
	for _, c := range []struct {
		band  string
		count uint64
		sum   float64
	}{
		{"0-1k", 2, 0.022}, {"1k-4k", 1, 0.020}, {"64k-256k", 1, 0.080}, {"unknown", 1, 0.015},
		{"4k-16k", 0, 0}, {"16k-64k", 0, 0}, {"256k+", 0, 0},
	} {
		n, sum := fs.Histogram("itlproxy_time_per_output_token_by_context_seconds", "model", "m", "endpoint", "chat_completions", "context", c.band)
		if n != c.count || !near(sum, c.sum) {
			t.Errorf("context %s: %d observations summing to %gs, want %d and %gs", c.band, n, sum, c.count, c.sum)
		}
	}
	banded, bandedSum := fs.Histogram("itlproxy_time_per_output_token_by_context_seconds")
	all, allSum := fs.Histogram("itlproxy_time_per_output_token_seconds")
	if banded != all || all != 5 || !near(bandedSum, allSum) {
		t.Errorf("banded %d (%gs), TPOT %d (%gs): want the same 5", banded, bandedSum, all, allSum)
	}
}

func near(a, b float64) bool { return a-b < 1e-9 && b-a < 1e-9 }

// contextBandsDoc says what each context band holds, as docs/metrics.md
// does: "0-1k: fewer than 1,024 input tokens; 1k-4k: fewer than 4,096; ...".
func contextBandsDoc() string {
	var parts []string
	for i, b := range contextBands {
		switch {
		case i == len(contextBands)-1:
			parts = append(parts, b.label+": more")
		case i == 0:
			parts = append(parts, fmt.Sprintf("%s: fewer than %s input tokens", b.label, thousands(b.upTo+1)))
		default:
			parts = append(parts, fmt.Sprintf("%s: fewer than %s", b.label, thousands(b.upTo+1)))
		}
	}
	return strings.Join(parts, "; ")
}

// thousands writes n with commas between groups of three digits.
func thousands(n int) string {
	s := fmt.Sprint(n)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}
