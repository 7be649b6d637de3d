package metrics

import (
	"fmt"
	"testing"
	"time"
)

// judgedStream is one stream of TestGoodputExact and the verdict it must get.
type judgedStream struct {
	class, tenant string
	outcome       string
	ttft          time.Duration // < 0: no token
	gaps          []time.Duration
	tpot          time.Duration
	tokens        int64
	want          string // verdict, "" not judged
}

// judgedStreams are TestGoodputExact's streams.
var judgedStreams = []judgedStream{
	{"", "a", OutcomeCompleted, 500 * ms, []time.Duration{10 * ms}, 40 * ms, 7, VerdictMet},              // at every objective: met
	{"", "a", OutcomeCompleted, 501 * ms, []time.Duration{10 * ms}, 10 * ms, 5, VerdictMissed},           // TTFT over
	{"", "a", OutcomeCompleted, 100 * ms, []time.Duration{10 * ms}, 41 * ms, 5, VerdictMissed},           // TPOT over
	{"", "a", OutcomeCompleted, 100 * ms, []time.Duration{1001 * ms}, 30 * ms, 5, VerdictMissed},         // longest gap over
	{"", "a", OutcomeCompleted, 100 * ms, nil, -1, 1, VerdictMet},                                        // one token: no TPOT, met
	{"", "b", OutcomeCompleted, -1, nil, -1, 0, VerdictMissed},                                           // no token
	{"", "b", OutcomeUpstreamError, 100 * ms, []time.Duration{10 * ms}, 10 * ms, 3, VerdictMissed},       // cut
	{"", "b", OutcomeIdleTimeout, 100 * ms, nil, -1, 1, VerdictMissed},                                   // went silent
	{"", "b", OutcomeRejected, -1, nil, -1, -1, VerdictMissed},                                           // 429
	{"", "b", OutcomeClientCanceled, 900 * ms, nil, -1, 1, ""},                                           // not judged
	{"", "b", OutcomeIncomplete, 100 * ms, []time.Duration{10 * ms}, 10 * ms, 2, VerdictMet},             // ended early, on time
	{"batch", "a", OutcomeCompleted, 9 * time.Second, []time.Duration{10 * ms}, 500 * ms, 9, VerdictMet}, // batch: slow TTFT fine, no TPOT objective
	{"batch", "a", OutcomeCompleted, 11 * time.Second, nil, -1, 1, VerdictMissed},
	{"nope", "a", OutcomeCompleted, 600 * ms, nil, -1, 1, VerdictMissed}, // unknown class: default objectives
}

// TestGoodputExact judges streams of known timing and expects every count:
// the verdict of each, its tokens when met, the observations and breaches
// of each kind, by class and tenant.
func TestGoodputExact(t *testing.T) {
	m, reg := newTestMetrics(t, Options{
		MaxModels: 4, MaxTenants: 4,
		SLOs: SLOs{
			Default: Objectives{TTFT: 500 * ms, TPOT: 40 * ms, MaxGap: time.Second},
			Classes: map[string]Class{
				"batch": {Default: Override{Objectives: Objectives{TTFT: 10 * time.Second, TPOT: 0}, Set: 1 | 4}},
			},
		},
	})
	want := map[[3]string]float64{} // class, tenant, verdict
	good := map[[2]string]float64{}
	for _, s := range judgedStreams {
		l := m.RequestLabels("m", "chat_completions", s.class, s.tenant)
		st := m.StartStream(l, IDs{})
		if s.ttft >= 0 {
			st.FirstToken(s.ttft)
		}
		for _, g := range s.gaps {
			st.Gap(g, 0)
		}
		st.End(StreamEnd{Outcome: s.outcome, TPOT: s.tpot, OutputTokens: s.tokens})
		if s.want != "" {
			want[[3]string{l.Class, l.Tenant, s.want}]++
		}
		if s.want == VerdictMet {
			good[[2]string{l.Class, l.Tenant}] += float64(s.tokens)
		}
	}
	fs := gather(t, reg)
	for _, class := range []string{ClassDefault, "batch"} {
		for _, tenant := range []string{"a", "b"} {
			for _, v := range []string{VerdictMet, VerdictMissed} {
				got := fs.Value("itlproxy_streams_judged_total", "model", "m", "class", class, "tenant", tenant, "verdict", v)
				if w := want[[3]string{class, tenant, v}]; got != w {
					t.Errorf("judged %s/%s/%s = %v, want %v", class, tenant, v, got, w)
				}
			}
			if got, w := fs.Value("itlproxy_goodput_tokens_total", "class", class, "tenant", tenant), good[[2]string{class, tenant}]; got != w {
				t.Errorf("goodput tokens %s/%s = %v, want %v", class, tenant, got, w)
			}
		}
	}
	// Hand-counted from the table: default class (the unknown class's
	// stream too), tenant a: 6 streams with a token (501ms and 600ms over
	// the TTFT objective), 4 TPOTs (41ms over), 4 streams with a gap
	// (1001ms over the longest-gap objective).
	for _, c := range []struct {
		slo            string
		observed, over float64
	}{{SLOTTFT, 6, 2}, {SLOTPOT, 4, 1}, {SLOMaxGap, 4, 1}} {
		got := fs.Value("itlproxy_slo_observations_total", "class", ClassDefault, "tenant", "a", "slo", c.slo)
		over := fs.Value("itlproxy_slo_breaches_total", "class", ClassDefault, "tenant", "a", "slo", c.slo)
		if got != c.observed || over != c.over {
			t.Errorf("%s: %v observed, %v breaches; want %v, %v", c.slo, got, over, c.observed, c.over)
		}
	}
	if n := len(fs.Series("itlproxy_slo_observations_total", "slo", SLOITL)); n != 0 {
		t.Errorf("no ITL objective, yet %d ITL observation series", n)
	}
	if got := fs.Value("itlproxy_slo_objective_seconds", "model", "m", "class", "batch", "slo", SLOTTFT); got != 10 {
		t.Errorf("batch TTFT objective = %v, want 10", got)
	}
	if n := len(fs.Series("itlproxy_slo_objective_seconds", "model", "m", "class", "batch", "slo", SLOTPOT)); n != 0 {
		t.Error("batch sets no TPOT objective, yet one is exported")
	}
}

// TestLabelsBounded: a flood of tenant and class values leaves a bounded
// set of label values; credentials never become one.
func TestLabelsBounded(t *testing.T) {
	m, reg := newTestMetrics(t, Options{MaxModels: 2, MaxTenants: 3,
		SLOs: SLOs{Default: Objectives{TTFT: time.Second}, Classes: map[string]Class{"interactive": {}}}})
	for _, secret := range []string{"Bearer abc", "sk-proj-123", "eyJhbGciOi", "AKIAIOSFODNN7EXAMPLE", "a=b"} {
		if l := m.RequestLabels("m", "chat_completions", "", secret); l.Tenant != TenantOther {
			t.Errorf("tenant %q labelled %q, want %s", secret, l.Tenant, TenantOther)
		}
	}
	for i := range 10000 {
		l := m.RequestLabels(fmt.Sprint("model-", i), "chat_completions", fmt.Sprint("class-", i), fmt.Sprint("tenant-", i))
		s := m.StartStream(l, IDs{})
		s.FirstToken(time.Millisecond)
		s.End(StreamEnd{Outcome: OutcomeCompleted, TPOT: -1, OutputTokens: 1})
		m.Request(l, true, 200, time.Millisecond)
	}
	fs := gather(t, reg)
	values := func(name, label string) map[string]bool {
		out := map[string]bool{}
		for _, s := range fs.Series(name) {
			for _, p := range s.GetLabel() {
				if p.GetName() == label {
					out[p.GetValue()] = true
				}
			}
		}
		return out
	}
	if got := values("itlproxy_streams_judged_total", "tenant"); len(got) != 4 { // tenant-0..2 and _other
		t.Errorf("tenants after the flood: %v", got)
	}
	if got := values("itlproxy_streams_judged_total", "class"); len(got) != 1 || !got[ClassDefault] {
		t.Errorf("classes after the flood: %v, want only default", got)
	}
	if got := len(fs.Series("itlproxy_requests_total")); got > 3*4 {
		t.Errorf("%d request series after the flood", got)
	}
	if l := m.RequestLabels("m", "chat_completions", "interactive", ""); l.Class != "interactive" || l.Tenant != TenantNone {
		t.Errorf("labels %+v, want class interactive, tenant %s", l, TenantNone)
	}
}

// TestGapsByLoad: each gap lands in the band of the model's streams in
// flight when it ends, the stream itself included; TTFT in the band when
// the stream started; other models do not count.
func TestGapsByLoad(t *testing.T) {
	m, reg := newTestMetrics(t, Options{MaxModels: 4})
	l := m.RequestLabels("m", "chat_completions", "", "")
	other := m.StartStream(m.RequestLabels("other", "chat_completions", "", ""), IDs{})
	var open []*Stream
	for range 5 { // TTFT bands 1, 2, 3-4, 3-4, 5-8
		s := m.StartStream(l, IDs{})
		s.FirstToken(time.Millisecond)
		open = append(open, s)
	}
	open[0].Gap(time.Millisecond, 0) // 5 in flight
	open[0].Gap(time.Millisecond, 0)
	open[4].End(StreamEnd{Outcome: OutcomeCompleted, TPOT: -1})
	open[3].End(StreamEnd{Outcome: OutcomeCompleted, TPOT: -1})
	open[0].Gap(time.Millisecond, 0) // 3
	open[2].End(StreamEnd{Outcome: OutcomeCompleted, TPOT: -1})
	open[1].Gap(time.Millisecond, 0) // 2
	open[1].End(StreamEnd{Outcome: OutcomeCompleted, TPOT: -1})
	open[0].Gap(time.Millisecond, 0) // 1
	open[0].End(StreamEnd{Outcome: OutcomeCompleted, TPOT: -1})
	other.End(StreamEnd{Outcome: OutcomeCompleted, TPOT: -1})

	fs := gather(t, reg)
	for name, want := range map[string]map[string]uint64{
		"itlproxy_inter_token_latency_by_load_seconds": {"1": 1, "2": 1, "3-4": 1, "5-8": 2},
		"itlproxy_time_to_first_token_by_load_seconds": {"1": 1, "2": 1, "3-4": 2, "5-8": 1},
	} {
		for _, band := range loadBandLabels {
			if got, _ := fs.Histogram(name, "model", "m", "load", band); got != want[band] {
				t.Errorf("%s load=%s: %d, want %d", name, band, got, want[band])
			}
		}
	}
	if got := fs.Value("itlproxy_load_band_upper_streams", "load", "5-8"); got != 8 {
		t.Errorf("upper bound of 5-8 = %v", got)
	}
}
