package metrics

import (
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// TestReloadSLOs: a stream in flight across a reload is judged against the
// objectives it started with, a stream started after against the new
// ones; the objective gauge follows, a removed class's series go, and a
// model the new objectives name keeps its label even outside the
// allow-list.
func TestReloadSLOs(t *testing.T) {
	m, reg := newTestMetrics(t, Options{
		Models: []string{"strict"},
		SLOs: SLOs{
			Default: Objectives{ITL: 50 * ms},
			Models:  map[string]Objectives{"strict": {ITL: 20 * ms}},
			Classes: map[string]Class{"batch": {Default: Override{Objectives: Objectives{TTFT: 30 * time.Second}, Set: 1}}},
		},
	})
	before := m.StartStream(m.RequestLabels("strict", "chat_completions", "", ""), IDs{})
	if l := m.RequestLabels("fresh", "chat_completions", "batch", ""); l.Model != ModelOther || l.Class != "batch" {
		t.Fatalf("before the reload: labels %+v, want _other in class batch", l)
	}

	m.ReloadSLOs(SLOs{
		Default: Objectives{ITL: 50 * ms},
		Models: map[string]Objectives{
			"strict": {ITL: 100 * ms},
			"fresh":  {TTFT: time.Second, ITL: 50 * ms},
		},
	})
	after := m.StartStream(m.RequestLabels("strict", "chat_completions", "", ""), IDs{})
	for _, s := range []*Stream{before, after} {
		s.FirstToken(10 * ms)
		s.Gap(60*ms, 0) // over the old 20ms, within the new 100ms
		s.End(StreamEnd{Outcome: OutcomeCompleted, TPOT: -1})
	}

	fs := gather(t, reg)
	if got := fs.Value("itlproxy_slo_breaches_total", "model", "strict", "slo", SLOITL); got != 1 {
		t.Errorf("strict ITL breaches = %v, want 1 (the stream started before the reload)", got)
	}
	if got := fs.Value("itlproxy_slo_observations_total", "model", "strict", "slo", SLOITL); got != 2 {
		t.Errorf("strict ITL observations = %v, want 2", got)
	}
	for _, c := range []struct {
		model, slo string
		want       float64
	}{
		{"strict", SLOITL, 0.1},
		{"fresh", SLOTTFT, 1},
		{"fresh", SLOITL, 0.05},
		{ModelOther, SLOITL, 0.05},
	} {
		if got := fs.Series("itlproxy_slo_objective_seconds", "model", c.model, "slo", c.slo); len(got) != 1 || got[0].GetGauge().GetValue() != c.want {
			t.Errorf("objective %s %s: %v, want one series at %v", c.model, c.slo, got, c.want)
		}
	}
	if n := len(fs.Series("itlproxy_slo_objective_seconds", "class", "batch")); n != 0 {
		t.Errorf("%d objective series of the removed class batch, want none", n)
	}
	if l := m.RequestLabels("fresh", "chat_completions", "batch", ""); l.Model != "fresh" || l.Class != ClassDefault {
		t.Errorf("after the reload: labels %+v, want fresh in the default class", l)
	}
}

// TestReloadSLOsConcurrent: reloads while streams start and labels are
// admitted leave every admitted model with the objectives in effect (run
// with -race).
func TestReloadSLOsConcurrent(t *testing.T) {
	m, reg := newTestMetrics(t, Options{MaxModels: 64, SLOs: SLOs{Default: Objectives{ITL: 50 * ms}}})
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			for i := range 50 {
				s := m.StartStream(m.RequestLabels(string(rune('a'+g))+string(rune('a'+i%26)), "chat_completions", "", ""), IDs{})
				s.FirstToken(ms)
				s.End(StreamEnd{Outcome: OutcomeCompleted, TPOT: -1})
			}
		})
	}
	for i := range 20 {
		m.ReloadSLOs(SLOs{Default: Objectives{ITL: time.Duration(i+1) * ms}})
	}
	wg.Wait()
	fs := gather(t, reg)
	series := fs.Series("itlproxy_slo_objective_seconds", "slo", SLOITL)
	if len(series) < 2 {
		t.Fatalf("%d ITL objective series", len(series))
	}
	for _, s := range series {
		if v := s.GetGauge().GetValue(); v != 0.02 {
			t.Errorf("objective of %v = %v, want the last reload's 0.02", s.GetLabel(), v)
		}
	}
}

func TestReloadsMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	r, err := NewReloads(reg)
	if err != nil {
		t.Fatal(err)
	}
	at := time.Unix(1_700_000_000, 500_000_000)
	r.Config(true, at)
	r.Config(false, at.Add(time.Hour))
	r.TLSFailed("listener_cert")
	fs := gather(t, reg)
	if got := fs.Value("itlproxy_config_last_reload_successful"); got != 0 {
		t.Errorf("last reload successful = %v, want 0", got)
	}
	if got := fs.Value("itlproxy_config_last_reload_success_timestamp_seconds"); got != 1_700_000_000.5 {
		t.Errorf("last success = %v, want the successful reload's time", got)
	}
	if got := fs.Value("itlproxy_tls_reload_failures_total", "file", "listener_cert"); got != 1 {
		t.Errorf("TLS reload failures = %v, want 1", got)
	}
	if problems, err := testutil.GatherAndLint(reg); err != nil || len(problems) > 0 {
		t.Errorf("lint: %v %v", problems, err)
	}
}
