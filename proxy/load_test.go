package proxy

import (
	"fmt"
	"io"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/itlproxy/itlproxy/internal/e2e"
	"github.com/itlproxy/itlproxy/metrics"
	"github.com/itlproxy/itlproxy/metrics/scrape"
)

// waitIdle waits until no stream of model is in flight: the proxy records
// a stream's end after its client has read the last byte.
func (h *harness) waitIdle(model string) {
	h.t.Helper()
	e2e.WaitFor(h.t, "the streams of "+model+" to end", 10*time.Second, func() bool {
		return h.counter("itlproxy_active_streams", "model", model) == 0
	})
}

// bucketIndex is the classic bucket v falls in.
func bucketIndex(bounds []float64, v float64) int {
	return sort.SearchFloat64s(bounds, v)
}

// TestGapsByLoadBand drives an upstream whose gaps grow with the streams
// in flight (base + k x streams) at 1, 4 and 16 concurrent streams, each
// round's streams in flight together for every gap: every gap lands in the
// band of its round, exactly; each stream's TTFT in the band of the streams
// in flight when it arrived; and each band's median gap is within one
// bucket of the upstream's gap at that load.
func TestGapsByLoadBand(t *testing.T) {
	up := &e2e.LoadUpstream{Base: 4 * time.Millisecond, PerStream: time.Millisecond, Tokens: 12}
	h := newHarness(t, up)
	rounds := map[int]string{1: "1", 4: "3-4", 16: "9-16"}
	for _, n := range []int{1, 4, 16} {
		up.Round(t, h.proxy.URL, "m", n)
		h.waitIdle("m")
	}
	fs := h.metrics()
	wantGaps := map[string]uint64{}
	for n, band := range rounds {
		wantGaps[band] = uint64(n * (up.Tokens - 1))
	}
	// TTFT: the k-th stream of a round to arrive sees k streams in flight.
	wantTTFT := map[string]uint64{"1": 3, "2": 2, "3-4": 4, "5-8": 4, "9-16": 8}
	for _, band := range []string{"1", "2", "3-4", "5-8", "9-16", "17-32", "33-64", "65-128", "129-256", "257-512", "513+"} {
		if got, _ := fs.Histogram("itlproxy_inter_token_latency_by_load_seconds", "model", "m", "load", band); got != wantGaps[band] {
			t.Errorf("gaps in load band %s: %d, want %d", band, got, wantGaps[band])
		}
		if got, _ := fs.Histogram("itlproxy_time_to_first_token_by_load_seconds", "model", "m", "load", band); got != wantTTFT[band] {
			t.Errorf("TTFTs in load band %s: %d, want %d", band, got, wantTTFT[band])
		}
	}
	all, _ := fs.Histogram("itlproxy_inter_token_latency_seconds", "model", "m")
	if want := uint64(21 * (up.Tokens - 1)); all != want {
		t.Errorf("gaps in all: %d, want %d", all, want)
	}
	for n, band := range rounds {
		b := fs.Buckets("itlproxy_inter_token_latency_by_load_seconds", "model", "m", "load", band)
		p50, want := scrape.HistogramQuantile(0.5, b), up.Gap(n).Seconds()
		if d := bucketIndex(b.Bounds, p50) - bucketIndex(b.Bounds, want); d < -1 || d > 1 {
			t.Errorf("load %s: p50 gap %.4fs, %d buckets from the upstream's %.4fs", band, p50, d, want)
		}
	}
}

// judgedUpstream answers each stream with the timing its request headers
// ask for: X-Test-TTFT before the first token, X-Test-Gaps (comma-separated
// durations) between tokens, X-Test-Status instead of a stream.
func judgedUpstream(w http.ResponseWriter, r *http.Request) {
	if code, _ := strconv.Atoi(r.Header.Get("X-Test-Status")); code != 0 {
		http.Error(w, "refused", code)
		return
	}
	ttft, _ := time.ParseDuration(r.Header.Get("X-Test-TTFT"))
	gaps := []time.Duration{ttft}
	for _, g := range strings.FieldsFunc(r.Header.Get("X-Test-Gaps"), func(c rune) bool { return c == ',' }) {
		d, _ := time.ParseDuration(g)
		gaps = append(gaps, d)
	}
	var chunks [][]byte
	for range gaps {
		chunks = append(chunks, []byte(`data: {"choices":[{"index":0,"delta":{"content":"x"}}]}`+"\n\n"))
	}
	chunks = append(chunks, fmt.Appendf(nil, "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":2,\"completion_tokens\":%d}}\n\ndata: [DONE]\n\n", len(gaps)))
	writeChunks(w, r, chunks, gaps)
}

// TestGoodputByClassAndTenant sends streams of known timing in two service
// classes for three tenants and expects every goodput count exactly.
func TestGoodputByClassAndTenant(t *testing.T) {
	h := newHarness(t, http.HandlerFunc(judgedUpstream), func(c *Config, o *metrics.Options) {
		c.ClassHeader, c.TenantHeader = "X-SLO-Class", "X-Team"
		o.Tenants = []string{"a", "b"}
		o.SLOs = metrics.SLOs{
			Default: metrics.Objectives{TTFT: 100 * time.Millisecond, TPOT: 40 * time.Millisecond, MaxGap: 250 * time.Millisecond},
			Classes: map[string]metrics.Class{"batch": {Default: metrics.Override{
				Objectives: metrics.Objectives{TTFT: 2 * time.Second}, Set: 1 | 4}}}, // TTFT 2s, no TPOT
		}
	})
	type stream struct {
		class, team, ttft, gaps, status string
		verdict                         string
		tokens                          int
	}
	streams := []stream{
		{"", "a", "0s", "5ms,5ms,5ms,5ms,5ms", "", metrics.VerdictMet, 6},
		{"", "a", "300ms", "", "", metrics.VerdictMissed, 1},              // TTFT over 100ms
		{"batch", "b", "300ms", "5ms,5ms,5ms", "", metrics.VerdictMet, 4}, // batch allows 2s
		{"batch", "b", "0s", "600ms", "", metrics.VerdictMissed, 2},       // longest gap over 250ms
		{"", "b", "", "", "503", metrics.VerdictMissed, 0},                // upstream_error
		{"", "c", "0s", "5ms", "", metrics.VerdictMet, 2},                 // c is not allowed: _other
		{"bogus", "a", "300ms", "", "", metrics.VerdictMissed, 1},         // unknown class: default
	}
	want := map[string]float64{}
	good := map[string]float64{}
	for _, s := range streams {
		resp := h.post("/v1/chat/completions", `{"model":"m","stream":true}`,
			"X-SLO-Class", s.class, "X-Team", s.team, "X-Test-TTFT", s.ttft, "X-Test-Gaps", s.gaps, "X-Test-Status", s.status)
		drain(resp)
		h.waitServed(1)
		class, team := s.class, s.team
		if class != "batch" {
			class = metrics.ClassDefault
		}
		if team == "c" {
			team = metrics.TenantOther
		}
		want[class+"/"+team+"/"+s.verdict]++
		if s.verdict == metrics.VerdictMet {
			good[class+"/"+team] += float64(s.tokens)
		}
	}
	fs := h.metrics()
	for _, class := range []string{metrics.ClassDefault, "batch"} {
		for _, team := range []string{"a", "b", metrics.TenantOther} {
			for _, v := range []string{metrics.VerdictMet, metrics.VerdictMissed} {
				got := fs.Value("itlproxy_streams_judged_total", "model", "m", "class", class, "tenant", team, "verdict", v)
				if w := want[class+"/"+team+"/"+v]; got != w {
					t.Errorf("judged %s/%s/%s = %v, want %v", class, team, v, got, w)
				}
			}
			if got, w := fs.Value("itlproxy_goodput_tokens_total", "class", class, "tenant", team), good[class+"/"+team]; got != w {
				t.Errorf("goodput tokens %s/%s = %v, want %v", class, team, got, w)
			}
		}
	}
	for team, n := range map[string]float64{"a": 3, "b": 3, metrics.TenantOther: 1} {
		if got := fs.Value("itlproxy_streams_total", "model", "m", "tenant", team); got != n {
			t.Errorf("streams of tenant %s = %v, want %v", team, got, n)
		}
		if got := fs.Value("itlproxy_requests_total", "model", "m", "tenant", team); got != n {
			t.Errorf("requests of tenant %s = %v, want %v", team, got, n)
		}
	}
}

// TestTenantFloodBounded: clients sending a new tenant and class on every
// request leave at most ITLPROXY_MAX_TENANTS tenants (plus _none and
// _other) and only the classes the SLO file defines.
func TestTenantFloodBounded(t *testing.T) {
	h := newHarness(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"choices":[],"usage":{"prompt_tokens":1,"completion_tokens":1}}`))
	}), func(c *Config, o *metrics.Options) {
		c.ClassHeader, c.TenantHeader = "X-SLO-Class", "X-Team"
		o.MaxTenants = 8
		o.SLOs = metrics.SLOs{Default: metrics.Objectives{TTFT: time.Second}, Classes: map[string]metrics.Class{"batch": {}}}
	})
	const requests = 2000
	var wg sync.WaitGroup
	work := make(chan int)
	for range 8 {
		wg.Go(func() {
			for i := range work {
				drain(h.post("/v1/chat/completions", `{"model":"m"}`, "X-SLO-Class", fmt.Sprint("class-", i), "X-Team", fmt.Sprint("team-", i)))
			}
		})
	}
	for i := range requests {
		work <- i
	}
	close(work)
	wg.Wait()
	h.waitServed(requests)
	tenants, classes := map[string]bool{}, map[string]bool{}
	fs := h.metrics()
	for _, s := range fs.Series("itlproxy_requests_total") {
		tenants[scrape.Label(s, "tenant")] = true
	}
	for _, s := range fs.Series("itlproxy_slo_objective_seconds") {
		classes[scrape.Label(s, "class")] = true
	}
	if len(tenants) != 9 || !tenants[metrics.TenantOther] { // 8 teams and _other
		t.Errorf("%d tenant label values after %d requests: %v", len(tenants), requests, tenants)
	}
	if len(classes) != 2 || !classes["batch"] || !classes[metrics.ClassDefault] {
		t.Errorf("class label values %v, want default and batch", classes)
	}
	if got := fs.Value("itlproxy_requests_total"); got != requests {
		t.Errorf("requests counted %v, want %d", got, requests)
	}
}

// drain reads a response to its end and closes it.
func drain(resp *http.Response) {
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
}
