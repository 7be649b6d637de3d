package metrics

import (
	"slices"
	"strings"
	"testing"
	"time"
)

const ms = time.Millisecond

// sloBase is the environment's objectives in parseCases.
var sloBase = Objectives{TTFT: time.Second, ITL: 100 * ms}

// parseCases are SLO files and what each must read as, or be refused with,
// over sloBase.
var parseCases = []struct {
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
			Default: sloBase,
			Models: map[string]Objectives{
				"org/m:7b.q4":  {ITL: 100 * ms},
				"quoted: name": sloBase,
				"plain":        sloBase,
			},
		},
	},
	{
		name: "max_gap at every level",
		yaml: "default: {max_gap: 5s}\nmodels:\n  a: {max_gap: 2s}\n",
		want: SLOs{
			Default: Objectives{TTFT: time.Second, ITL: 100 * ms, MaxGap: 5 * time.Second},
			Models:  map[string]Objectives{"a": {TTFT: time.Second, ITL: 100 * ms, MaxGap: 2 * time.Second}},
		},
	},
	{name: "empty file", yaml: "", want: SLOs{Default: sloBase, Models: map[string]Objectives{}}},
	{name: "comments only", yaml: "# nothing yet\n", want: SLOs{Default: sloBase, Models: map[string]Objectives{}}},
	{
		name:    "unknown key in objectives",
		yaml:    "models:\n  a: {ttft: 1s, p99: 2s}\n",
		wantErr: `slo.yaml:2:17: models["a"]: unknown key "p99" (want ttft, itl, tpot or max_gap)`,
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
	{name: "unknown top-level key", yaml: "tenants: {}\n", wantErr: `slo.yaml:1:1: unknown key "tenants" (want default, models or classes)`},
	{name: "class named default", yaml: "classes:\n  default: {ttft: 1s}\n", wantErr: `slo.yaml:2:3: class "default": is the class of requests that name none: set its objectives under the top-level default`},
	{name: "class name not a label", yaml: "classes:\n  \"a b\": {}\n", wantErr: `slo.yaml:2:3: class "a b": may hold only letters, digits, '-', '_' and '.'`},
	{name: "class twice", yaml: "classes:\n  a: {}\n  a: {}\n", wantErr: `slo.yaml:3:3: class "a" is listed twice`},
	{name: "unknown key in a class", yaml: "classes:\n  a: {p99: 1s}\n", wantErr: `slo.yaml:2:7: classes["a"]: unknown key "p99" (want ttft, itl, tpot, max_gap or models)`},
	{name: "class model twice", yaml: "classes:\n  a:\n    models:\n      m: {}\n      m: {}\n", wantErr: `slo.yaml:5:7: classes["a"]: model "m" is listed twice`},
	{name: "bad duration in a class model", yaml: "classes:\n  a:\n    models:\n      m: {itl: fast}\n", wantErr: `slo.yaml:4:16: classes["a"].models["m"].itl: "fast" is not a duration (e.g. 40ms, 1.5s)`},
	{name: "top level not a mapping", yaml: "- a\n", wantErr: "slo.yaml:1:1: the file must be a mapping"},
}

func TestParseSLOs(t *testing.T) {
	base := sloBase
	for _, tc := range parseCases {
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
		st := m.StartStream(m.RequestLabels(s.model, "chat_completions", "", ""), IDs{})
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
	m.RequestLabels("dynamic", "completions", "", "") // admitted under the cap
	m.RequestLabels("overflow", "completions", "", "")

	fs := gather(t, reg)
	// A model's counters start at zero; the catch-alls' appear with their
	// first stream.
	for _, c := range []struct {
		model, slo string
		want       float64
		counters   int
	}{
		{"with/slo:7b", SLOTTFT, 0.777, 1},
		{"with/slo:7b", SLOITL, 0.033, 1},
		{"dynamic", SLOITL, 0.045, 1},
		{ModelOther, SLOITL, 0.045, 0},
		{ModelUnknown, SLOITL, 0.045, 0},
	} {
		if got := fs.Value("itlproxy_slo_objective_seconds", "model", c.model, "slo", c.slo); got != c.want {
			t.Errorf("objective %s %s = %v, want %v", c.model, c.slo, got, c.want)
		}
		if n := len(fs.Series("itlproxy_slo_breaches_total", "model", c.model, "slo", c.slo)); n != c.counters {
			t.Errorf("breach counter %s %s: %d series, want %d", c.model, c.slo, n, c.counters)
		}
	}
	other := m.StartStream(m.RequestLabels("overflow", "completions", "", ""), IDs{})
	other.Gap(50*ms, 0)
	other.End(StreamEnd{Outcome: OutcomeCompleted, TPOT: -1})
	fs = gather(t, reg)
	if got := fs.Value("itlproxy_slo_breaches_total", "model", ModelOther, "slo", SLOITL, "tenant", TenantNone); got != 1 {
		t.Errorf("breaches of _other after its first stream: %v, want 1", got)
	}
	if n := len(fs.Series("itlproxy_slo_objective_seconds", "model", "overflow")); n != 0 {
		t.Error("a model past the cap got its own objective series")
	}
	if n := len(fs.Series("itlproxy_slo_objective_seconds", "slo", SLOTPOT)); n != 0 {
		t.Error("TPOT objective exported, but none is configured")
	}

	// Each objective and the stall threshold is a bucket bound.
	st := m.StartStream(m.RequestLabels("with/slo:7b", "chat_completions", "", ""), IDs{})
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
	f.Add([]byte("classes:\n  interactive:\n    ttft: 1s\n    models:\n      m: {max_gap: 2s}\n  batch: {tpot: 0}\n"))
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
			if o.TTFT < 0 || o.ITL < 0 || o.TPOT < 0 || o.MaxGap < 0 {
				t.Fatalf("negative objective %+v from %q", o, data)
			}
		}
		check(slos.Default)
		for _, o := range slos.Models {
			check(o)
		}
		for _, c := range slos.ClassNames() {
			if c != ClassDefault && badClassName(c) != "" {
				t.Fatalf("class %q accepted from %q", c, data)
			}
			for _, m := range append(slos.modelNames(), "") {
				check(slos.For(m, c))
			}
		}
	})
}

// TestClassResolution: each kind comes from the most specific place that
// sets it: the class's entry for the model, the class, the model, the
// file's default, the environment.
func TestClassResolution(t *testing.T) {
	env := Objectives{TTFT: 9 * time.Second, ITL: 900 * ms, TPOT: 90 * ms, MaxGap: 9 * time.Second}
	slos, err := parseSLOs("slo.yaml", []byte(`
default: {ttft: 2s}
models:
  llama: {ttft: 500ms, itl: 40ms}
classes:
  interactive:
    ttft: 1s
    max_gap: 3s
    models:
      llama: {ttft: 300ms}
      qwen: {tpot: 0}
  batch: {ttft: 30s, tpot: 0}
`), env)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		model, class string
		want         Objectives
	}{
		{"llama", ClassDefault, Objectives{TTFT: 500 * ms, ITL: 40 * ms, TPOT: 90 * ms, MaxGap: 9 * time.Second}},
		{"llama", "interactive", Objectives{TTFT: 300 * ms, ITL: 40 * ms, TPOT: 90 * ms, MaxGap: 3 * time.Second}},
		{"llama", "batch", Objectives{TTFT: 30 * time.Second, ITL: 40 * ms, MaxGap: 9 * time.Second}},
		{"qwen", "interactive", Objectives{TTFT: time.Second, ITL: 900 * ms, MaxGap: 3 * time.Second}},
		{"qwen", ClassDefault, Objectives{TTFT: 2 * time.Second, ITL: 900 * ms, TPOT: 90 * ms, MaxGap: 9 * time.Second}},
		{"qwen", "unknown-class", Objectives{TTFT: 2 * time.Second, ITL: 900 * ms, TPOT: 90 * ms, MaxGap: 9 * time.Second}},
		{ModelOther, "interactive", Objectives{TTFT: time.Second, ITL: 900 * ms, TPOT: 90 * ms, MaxGap: 3 * time.Second}},
	} {
		if got := slos.For(c.model, c.class); got != c.want {
			t.Errorf("For(%s, %s) = %+v, want %+v", c.model, c.class, got, c.want)
		}
	}
	if got, want := slos.ClassNames(), []string{ClassDefault, "batch", "interactive"}; !slices.Equal(got, want) {
		t.Errorf("ClassNames = %v, want %v", got, want)
	}
	// qwen has objectives of its own only inside a class: it still keeps
	// its label, and every class's objectives are bucket bounds.
	if got, want := slos.modelNames(), []string{"llama", "qwen"}; !slices.Equal(got, want) {
		t.Errorf("modelNames = %v, want %v", got, want)
	}
	ttft := slos.bounds(SLOTTFT)
	for _, b := range []float64{0.3, 0.5, 1, 2, 30} {
		if !slices.Contains(ttft, b) {
			t.Errorf("TTFT bounds %v lack %v", ttft, b)
		}
	}
}
