package metrics

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"

	"github.com/itlproxy/itlproxy/metrics/scrape"
)

func TestModelLabels(t *testing.T) {
	cases := []struct {
		name  string
		allow []string
		max   int
		in    []string
		want  []string
	}{
		{"cap keeps the first", nil, 2, []string{"a", "b", "c", "a", "d", "b"}, []string{"a", "b", "_other", "a", "_other", "b"}},
		{"allow-list", []string{"x", "meta-llama/Llama-3.1-8B-Instruct"}, 1, []string{"meta-llama/Llama-3.1-8B-Instruct", "y", "x"},
			[]string{"meta-llama/Llama-3.1-8B-Instruct", "_other", "x"}},
		{"no model", nil, 2, []string{""}, []string{"_unknown"}},
		{"too long", nil, 2, []string{strings.Repeat("m", 257), strings.Repeat("m", 256)}, []string{"_other", strings.Repeat("m", 256)}},
		{"invalid UTF-8", nil, 2, []string{"bad\xff"}, []string{"_other"}},
		{"odd but valid names", nil, 4, []string{"qwen2.5:7b-instruct-q4_K_M", "org/model@rev", "모델"}, []string{"qwen2.5:7b-instruct-q4_K_M", "org/model@rev", "모델"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			l := newBoundedLabels(tc.allow, nil, tc.max)
			for i, in := range tc.in {
				if got := l.label(in); got != tc.want[i] {
					t.Errorf("label(%q) = %q, want %q", in, got, tc.want[i])
				}
			}
		})
	}
}

// TestModelLabelsConcurrentCap floods the labeler with distinct names from
// many goroutines: exactly max names keep their label.
func TestModelLabelsConcurrentCap(t *testing.T) {
	const max = 10
	l := newBoundedLabels(nil, nil, max)
	var mu sync.Mutex
	kept := map[string]bool{}
	var wg sync.WaitGroup
	for g := range 16 {
		wg.Go(func() {
			for i := range 1000 {
				name := fmt.Sprintf("m-%d-%d", g, i)
				if got := l.label(name); got != ModelOther {
					mu.Lock()
					kept[got] = true
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	if len(kept) != max {
		t.Fatalf("%d names kept their label, want %d", len(kept), max)
	}
}

func TestBuckets(t *testing.T) {
	for name, b := range map[string][]float64{"gap": gapBuckets, "ttft": ttftBuckets, "duration": durationBuckets} {
		for i := 1; i < len(b); i++ {
			if b[i] <= b[i-1] {
				t.Errorf("%s buckets not increasing at %d: %v", name, i, b)
			}
		}
	}
	// ITL must resolve from about 1 ms to seconds; at least 15 bounds
	// between 1 and 100 ms, where decode steps fall.
	n := 0
	for _, v := range gapBuckets {
		if v >= 0.001 && v <= 0.1 {
			n++
		}
	}
	if gapBuckets[0] > 0.001 || gapBuckets[len(gapBuckets)-1] < 5 || n < 15 {
		t.Errorf("gap buckets %v: want ≤1ms to ≥5s with ≥15 bounds in 1-100ms (have %d)", gapBuckets, n)
	}
}

func newTestMetrics(t *testing.T, opts Options) (*Metrics, *prometheus.Registry) {
	t.Helper()
	reg := prometheus.NewRegistry()
	m, err := New(reg, opts)
	if err != nil {
		t.Fatal(err)
	}
	return m, reg
}

func TestRecordsAStream(t *testing.T) {
	m, reg := newTestMetrics(t, Options{MaxModels: 4, Version: "1.2.3", Revision: "abc", GoVersion: "go1.26"})
	l := m.RequestLabels("m", "chat_completions", "", "")
	s := m.StartStream(l, IDs{})
	if v := testutil.ToFloat64(m.active.WithLabelValues("m", "chat_completions")); v != 1 {
		t.Errorf("active during the stream = %v", v)
	}
	s.FirstToken(250 * time.Millisecond)
	s.Gap(20*time.Millisecond, 0)
	s.Gap(30*time.Millisecond, 0)
	s.End(StreamEnd{Outcome: OutcomeCompleted, TPOT: 25 * time.Millisecond})
	m.Tokens(l, 10, 3)
	m.Tokens(l, -1, -1)
	m.Request(l, true, 200, time.Second)
	m.ParseFailure(l, ParseInvalidJSON)

	want := `
# HELP itlproxy_active_streams Streams in flight, each from t0 (or the upstream's event-stream headers) to the end of its response.
# TYPE itlproxy_active_streams gauge
itlproxy_active_streams{endpoint="chat_completions",model="m"} 0
# HELP itlproxy_build_info Always 1; the labels name the running build.
# TYPE itlproxy_build_info gauge
itlproxy_build_info{goversion="go1.26",revision="abc",version="1.2.3"} 1
# HELP itlproxy_input_tokens_total Input (prompt) tokens, cached or not, from the usage the upstream reported, counted when a response that reported usage ends.
# TYPE itlproxy_input_tokens_total counter
itlproxy_input_tokens_total{endpoint="chat_completions",model="m",tenant="_none"} 10
# HELP itlproxy_output_tokens_total Output tokens, counted when a response ends, from the usage the upstream reported, else, for streams, the number of token-bearing events.
# TYPE itlproxy_output_tokens_total counter
itlproxy_output_tokens_total{endpoint="chat_completions",model="m",tenant="_none"} 3
# HELP itlproxy_streams_total Streams ended, by outcome, counted once per stream when its response ends.
# TYPE itlproxy_streams_total counter
itlproxy_streams_total{endpoint="chat_completions",model="m",outcome="completed",tenant="_none"} 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want),
		"itlproxy_active_streams", "itlproxy_build_info", "itlproxy_input_tokens_total",
		"itlproxy_output_tokens_total", "itlproxy_streams_total"); err != nil {
		t.Error(err)
	}
	fs := gather(t, reg)
	for name, want := range map[string]struct {
		count int
		sum   float64
	}{
		"itlproxy_time_to_first_token_seconds":   {1, 0.25},
		"itlproxy_inter_token_latency_seconds":   {2, 0.05},
		"itlproxy_time_per_output_token_seconds": {1, 0.025},
		"itlproxy_request_duration_seconds":      {1, 1},
	} {
		f := fs[name]
		if f == nil || f.GetType() != dto.MetricType_HISTOGRAM || len(f.GetMetric()) != 1 {
			t.Errorf("%s: %v, want one histogram series", name, f)
			continue
		}
		h := f.GetMetric()[0].GetHistogram()
		if int(h.GetSampleCount()) != want.count || h.GetSampleSum() < want.sum-1e-9 || h.GetSampleSum() > want.sum+1e-9 {
			t.Errorf("%s: count %d sum %v, want %d and %v", name, h.GetSampleCount(), h.GetSampleSum(), want.count, want.sum)
		}
		if h.GetSchema() != 3 || len(h.GetBucket()) == 0 {
			t.Errorf("%s: want classic buckets and native schema 3, got %d buckets, schema %d", name, len(h.GetBucket()), h.GetSchema())
		}
	}
}

func TestLint(t *testing.T) {
	m, reg := newTestMetrics(t, Options{MaxModels: 4})
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	l := m.RequestLabels("m", "completions", "", "")
	s := m.StartStream(l, IDs{})
	s.FirstToken(time.Millisecond)
	s.End(StreamEnd{Outcome: OutcomeClientCanceled, TPOT: -1})
	m.Request(l, false, 499, time.Millisecond)
	problems, err := testutil.GatherAndLint(reg)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("%s: %s", p.Metric, p.Text)
	}
}

func TestNewRefusesDoubleRegistration(t *testing.T) {
	reg := prometheus.NewRegistry()
	if _, err := New(reg, Options{MaxModels: 1}); err != nil {
		t.Fatal(err)
	}
	if _, err := New(reg, Options{MaxModels: 1}); err == nil {
		t.Fatal("registering twice on one registry succeeded")
	}
}

func gather(t *testing.T, reg *prometheus.Registry) scrape.Families {
	t.Helper()
	fs, err := scrape.Gather(reg)
	if err != nil {
		t.Fatal(err)
	}
	return fs
}

// TestGapExemplars: a stream's first gap carries the exemplar, and so does
// each gap over 1.1× the longest before it; jitter just above the longest
// does not.
func TestGapExemplars(t *testing.T) {
	m, reg := newTestMetrics(t, Options{})
	s := m.StartStream(m.RequestLabels("m", "chat_completions", "", ""), IDs{Request: "r1"})
	for _, ms := range []float64{10, 10.5, 10.9, 30, 31, 12, 200, 215} {
		s.Gap(time.Duration(ms*float64(time.Millisecond)), 0)
	}
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var got []float64
	for _, f := range families {
		if f.GetName() != "itlproxy_inter_token_latency_seconds" {
			continue
		}
		for _, e := range f.GetMetric()[0].GetHistogram().GetExemplars() {
			if e.GetLabel()[0].GetValue() != "r1" {
				t.Errorf("exemplar labels %v, want request_id r1", e.GetLabel())
			}
			got = append(got, e.GetValue())
		}
	}
	want := []float64{0.010, 0.030, 0.200}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("native exemplars at %v s, want %v", got, want)
	}
}
