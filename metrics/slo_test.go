package metrics

import (
	"strings"
	"testing"
	"time"
)

const ms = time.Millisecond

func TestParseSLOs(t *testing.T) {
	base := Objectives{TTFT: time.Second, ITL: 100 * ms}
	cases := []struct {
		name    string
		yaml    string
		want    SLOs
		wantErr string
	}{
		{
			name: "the issue's example",
			yaml: "default: {ttft: 2s, itl: 100ms, tpot: 80ms}\nmodels:\n  meta-llama/Llama-3.1-8B-Instruct: {ttft: 500ms, itl: 40ms}\n",
			want: SLOs{
				Default: Objectives{TTFT: 2 * time.Second, ITL: 100 * ms, TPOT: 80 * ms},
				Models:  map[string]Objectives{"meta-llama/Llama-3.1-8B-Instruct": {TTFT: 500 * ms, ITL: 40 * ms, TPOT: 80 * ms}},
			},
		},
		{
			name: "models before default still inherit it",
			yaml: "models:\n  a: {itl: 10ms}\ndefault: {tpot: 30ms}\n",
			want: SLOs{
				Default: Objectives{TTFT: time.Second, ITL: 100 * ms, TPOT: 30 * ms},
				Models:  map[string]Objectives{"a": {TTFT: time.Second, ITL: 10 * ms, TPOT: 30 * ms}},
			},
		},
		{
			name: "names with slash colon dot, zero switches off, empty entry inherits",
			yaml: "models:\n  org/m:7b.q4: {ttft: 0}\n  \"quoted: name\": {}\n  plain:\n",
			want: SLOs{
				Default: base,
				Models: map[string]Objectives{
					"org/m:7b.q4":  {ITL: 100 * ms},
					"quoted: name": base,
					"plain":        base,
				},
			},
		},
		{name: "empty file", yaml: "", want: SLOs{Default: base, Models: map[string]Objectives{}}},
		{name: "comments only", yaml: "# nothing yet\n", want: SLOs{Default: base, Models: map[string]Objectives{}}},
		{
			name:    "unknown key in objectives",
			yaml:    "models:\n  a: {ttft: 1s, p99: 2s}\n",
			wantErr: `slo.yaml:2:17: models["a"]: unknown key "p99" (want ttft, itl or tpot)`,
		},
		{
			name:    "bad and negative durations, all reported",
			yaml:    "default:\n  itl: 40\nmodels:\n  a:\n    ttft: -1s\n    tpot: soon\n",
			wantErr: "slo.yaml:2:8: default.itl: \"40\" is not a duration (e.g. 40ms, 1.5s)\nslo.yaml:5:11: models[\"a\"].ttft: -1s is negative\nslo.yaml:6:11: models[\"a\"].tpot: \"soon\" is not a duration (e.g. 40ms, 1.5s)",
		},
		{name: "model twice", yaml: "models:\n  a: {}\n  a: {}\n", wantErr: `slo.yaml:3:3: model "a" is listed twice`},
		{name: "key twice", yaml: "models:\n  a: {itl: 1s, itl: 2s}\n", wantErr: `slo.yaml:2:16: models["a"].itl is given twice`},
		{name: "models not a mapping", yaml: "models: [a, b]\n", wantErr: "slo.yaml:1:9: models must be a mapping"},
		{name: "objective not a scalar", yaml: "default: {itl: [1s]}\n", wantErr: `slo.yaml:1:16: default.itl: "" is not a duration (e.g. 40ms, 1.5s)`},
		{name: "not YAML", yaml: "default: {itl: 1s\n", wantErr: "slo.yaml:1: did not find expected ',' or '}'"},
		{name: "top level not a mapping", yaml: "- a\n", wantErr: "slo.yaml:1:1: the file must be a mapping"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseSLOs("slo.yaml", []byte(tc.yaml), base)
			if tc.wantErr != "" {
				if err == nil || err.Error() != tc.wantErr {
					t.Errorf("got error:\n%v\nwant:\n%s", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got.Default != tc.want.Default || len(got.Models) != len(tc.want.Models) {
				t.Fatalf("got %+v, want %+v", got, tc.want)
			}
			for m, o := range tc.want.Models {
				if got.Models[m] != o {
					t.Errorf("%s: %+v, want %+v", m, got.Models[m], o)
				}
			}
		})
	}
}

// TestBreachesExact feeds known schedules and expects exact breach counts:
// strictly over the objective counts, equal does not.
func TestBreachesExact(t *testing.T) {
	m, reg := newTestMetrics(t, Options{
		MaxModels: 4,
		SLOs: SLOs{
			Default: Objectives{TTFT: 500 * ms, ITL: 50 * ms, TPOT: 40 * ms},
			Models:  map[string]Objectives{"strict": {TTFT: 200 * ms, ITL: 20 * ms}},
		},
		StallThreshold: 2 * time.Second,
	})
	type stream struct {
		model string
		ttft  time.Duration
		gaps  []time.Duration
		tpot  time.Duration
	}
	for _, s := range []stream{
		{"loose", 499 * ms, []time.Duration{10 * ms, 50 * ms, 51 * ms, 3 * time.Second}, 40 * ms},
		{"loose", 501 * ms, []time.Duration{49 * ms, 2 * time.Second, 2001 * ms}, 41 * ms},
		{"strict", 200 * ms, []time.Duration{21 * ms, 20 * ms, 19 * ms, 50 * ms}, 90 * ms},
		{"strict", 201 * ms, nil, -1},
	} {
		st := m.StartStream(m.Labels(s.model, EndpointChatCompletions), IDs{})
		st.FirstToken(s.ttft)
		for _, g := range s.gaps {
			st.Gap(g, 0)
		}
		st.End(StreamEnd{Outcome: OutcomeCompleted, TPOT: s.tpot})
	}
	fs := gather(t, reg)
	for _, c := range []struct {
		model, slo string
		want       float64
	}{
		{"loose", SLOTTFT, 1},  // 501ms
		{"loose", SLOITL, 4},   // 51ms, 3s, 2s, 2.001s
		{"loose", SLOTPOT, 1},  // 41ms
		{"strict", SLOTTFT, 1}, // 201ms
		{"strict", SLOITL, 2},  // 21ms, 50ms
	} {
		if got := fs.Value("itlproxy_slo_breaches_total", "model", c.model, "slo", c.slo); got != c.want {
			t.Errorf("%s %s breaches = %v, want %v", c.model, c.slo, got, c.want)
		}
	}
	if n := len(fs.Series("itlproxy_slo_breaches_total", "model", "strict", "slo", SLOTPOT)); n != 0 {
		t.Errorf("strict has no TPOT objective but %d breach series", n)
	}
	if got := fs.Value("itlproxy_stalls_total", "model", "loose"); got != 2 { // 3s, 2.001s; 2s is not over
		t.Errorf("stalls = %v, want 2", got)
	}
}

func TestObjectiveGaugesAndBounds(t *testing.T) {
	slos := SLOs{
		Default: Objectives{ITL: 45 * ms},
		Models:  map[string]Objectives{"with/slo:7b": {TTFT: 777 * ms, ITL: 33 * ms}},
	}
	m, reg := newTestMetrics(t, Options{MaxModels: 2, SLOs: slos, StallThreshold: 1500 * ms})
	m.Labels("dynamic", EndpointCompletions) // admitted under the cap
	m.Labels("overflow", EndpointCompletions)

	fs := gather(t, reg)
	for _, c := range []struct {
		model, slo string
		want       float64
	}{
		{"with/slo:7b", SLOTTFT, 0.777},
		{"with/slo:7b", SLOITL, 0.033},
		{"dynamic", SLOITL, 0.045},
		{ModelOther, SLOITL, 0.045},
		{ModelUnknown, SLOITL, 0.045},
	} {
		if got := fs.Value("itlproxy_slo_objective_seconds", "model", c.model, "slo", c.slo); got != c.want {
			t.Errorf("objective %s %s = %v, want %v", c.model, c.slo, got, c.want)
		}
		if n := len(fs.Series("itlproxy_slo_breaches_total", "model", c.model, "slo", c.slo)); n != 1 {
			t.Errorf("breach counter %s %s: %d series, want 1 (at zero)", c.model, c.slo, n)
		}
	}
	if n := len(fs.Series("itlproxy_slo_objective_seconds", "model", "overflow")); n != 0 {
		t.Error("a model past the cap got its own objective series")
	}
	if n := len(fs.Series("itlproxy_slo_objective_seconds", "slo", SLOTPOT)); n != 0 {
		t.Error("TPOT objective exported, but none is configured")
	}

	// Each objective and the stall threshold is a bucket bound.
	st := m.StartStream(m.Labels("with/slo:7b", EndpointChatCompletions), IDs{})
	st.FirstToken(time.Second)
	st.Gap(time.Millisecond, 0)
	fs = gather(t, reg)
	for name, want := range map[string][]float64{
		"itlproxy_time_to_first_token_seconds": {0.777},
		"itlproxy_inter_token_latency_seconds": {0.033, 0.045, 1.5},
	} {
		bounds := map[float64]bool{}
		for _, b := range fs.Series(name)[0].GetHistogram().GetBucket() {
			bounds[b.GetUpperBound()] = true
		}
		for _, w := range want {
			if !bounds[w] {
				t.Errorf("%s has no bucket bound %v", name, w)
			}
		}
	}
}

// FuzzSLOFile: any file is either refused with errors that name it and a
// line, or read into objectives that are never negative; it never panics.
func FuzzSLOFile(f *testing.F) {
	f.Add([]byte("default: {ttft: 2s, itl: 100ms, tpot: 80ms}\nmodels:\n  meta-llama/Llama-3.1-8B-Instruct: {ttft: 500ms, itl: 40ms}\n"))
	f.Add([]byte("models:\n  a: {itl: 0}\n  a: {}\n"))
	f.Add([]byte("default: [1, 2]\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		slos, err := parseSLOs("slo.yaml", data, Objectives{ITL: 50 * ms})
		if err != nil {
			for _, line := range strings.Split(err.Error(), "\n") {
				if !strings.HasPrefix(line, "slo.yaml") {
					t.Fatalf("error line does not name the file: %q", line)
				}
			}
			return
		}
		check := func(o Objectives) {
			if o.TTFT < 0 || o.ITL < 0 || o.TPOT < 0 {
				t.Fatalf("negative objective %+v from %q", o, data)
			}
		}
		check(slos.Default)
		for _, o := range slos.Models {
			check(o)
		}
	})
}
