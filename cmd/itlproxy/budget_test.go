package main

import (
	"bufio"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"

	"github.com/itlproxy/itlproxy/internal/e2e"
)

// budgetModel is the one model of the budget's scenario.
const budgetModel = "budget-model"

// sessionPrompts are the input tokens of the session's turns, growing as a
// conversation does, through every context band; turn 9 reports none (the
// metrics package records the same in its TestSeriesBudget).
var sessionPrompts = []prompt{
	{tokens: 300}, {tokens: 900}, {tokens: 1500}, {tokens: 2600}, {tokens: 3800}, {tokens: 5000},
	{tokens: 9000}, {tokens: 14000}, {none: true}, {tokens: 20000}, {tokens: 33000}, {tokens: 50000},
	{tokens: 70000}, {tokens: 110000}, {tokens: 160000}, {tokens: 230000}, {tokens: 270000}, {tokens: 300000},
}

// seriesByFamily counts the samples of each itlproxy_ family in a text
// exposition: each line that is not a comment belongs to the family its
// last TYPE line named.
func seriesByFamily(t *testing.T, r io.Reader) map[string]int {
	t.Helper()
	out := map[string]int{}
	family := ""
	sc := bufio.NewScanner(r)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if fields := strings.Fields(line); len(fields) == 4 && fields[0] == "#" && fields[1] == "TYPE" {
			family = fields[2]
			continue
		}
		if line == "" || strings.HasPrefix(line, "#") || !strings.HasPrefix(family, "itlproxy_") {
			continue
		}
		if !strings.HasPrefix(line, family) {
			t.Fatalf("sample %q outside its family %s", line, family)
		}
		out[family]++
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// scrapeText reads /metrics as a scraper that asks for nothing but the
// text format does.
func scrapeText(t *testing.T, admin string) map[string]int {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, "http://"+admin+"/metrics", nil)
	req.Header.Set("Accept", "text/plain;version=0.0.4")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/plain") {
		t.Fatalf("Content-Type %q, want the text format", ct)
	}
	return seriesByFamily(t, resp.Body)
}

// runBudgetScenario drives the proxy at proxyAddr as the series budget is
// measured: with objectives on, rounds of 1, 2, 4, ..., 64 concurrent
// streams (every load band to 33-64), one stream of 2,100 tokens (every
// position band) and a session of 18 turns (every turn band) whose
// prompts cross every context band, all of one model on one endpoint.
func runBudgetScenario(t *testing.T, load *e2e.LoadUpstream, proxyAddr string) {
	t.Helper()
	base := "http://" + proxyAddr
	load.Tokens = 3
	for n := 1; n <= 64; n *= 2 {
		load.Round(t, base, budgetModel, n)
	}
	load.Tokens, load.Base = 2100, 0
	load.Round(t, base, budgetModel, 1)
	for turn := range sessionPrompts {
		streamTurn(t, proxyAddr, budgetModel, fmt.Sprintf("turn-%d", turn+1), turn+1, "X-Session-Id", "budget-session")
	}
}

// budgetUpstream serves the scenario: the session's streams (those with a
// session id), each turn with the next of sessionPrompts, and the load's
// rounds.
func budgetUpstream(load *e2e.LoadUpstream) http.Handler {
	var turn atomic.Int64
	session := scheduledUpstream{
		schedule: fixedSchedule(2*ms, 2*ms, 2*ms, 2*ms, 2*ms, 2*ms, 2*ms, 2*ms),
		prompt: func(string) prompt {
			return sessionPrompts[min(int(turn.Add(1)), len(sessionPrompts))-1]
		},
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("X-Session-Id") != "" {
			session.ServeHTTP(w, r)
			return
		}
		load.ServeHTTP(w, r)
	})
}

// budgetEnv is the scenario's configuration: every objective, none of
// them a bucket bound already, so that each adds its bound.
var budgetEnv = map[string]string{
	"ITLPROXY_SLO_TTFT":    "700ms",
	"ITLPROXY_SLO_ITL":     "45ms",
	"ITLPROXY_SLO_TPOT":    "33ms",
	"ITLPROXY_SLO_MAX_GAP": "1800ms",
}

// budgetDoc is the document whose family table the binary must match.
const budgetDoc = "../../docs/series-budget.md"

// docSeries reads the family table of docs/series-budget.md: the series of
// each family after the scenario in the text exposition, by default and
// with native breakdowns, and the native histograms a native scraper
// stores.
func docSeries(t *testing.T) (classic, native, stored map[string]int) {
	t.Helper()
	doc, err := os.ReadFile(budgetDoc)
	if err != nil {
		t.Fatal(err)
	}
	_, table, ok := strings.Cut(string(doc), "<!-- generated: families -->\n")
	table, _, ok2 := strings.Cut(table, "<!-- end: families -->")
	if !ok || !ok2 {
		t.Fatalf("%s has no family table", budgetDoc)
	}
	classic, native, stored = map[string]int{}, map[string]int{}, map[string]int{}
	for line := range strings.Lines(table) {
		cells := strings.Split(line, "|")
		if len(cells) != 8 || !strings.HasPrefix(strings.TrimSpace(cells[1]), "`") {
			continue
		}
		name := strings.Trim(strings.TrimSpace(cells[1]), "`")
		for i, into := range []map[string]int{classic, native, stored} {
			var n int
			if _, err := fmt.Sscan(cells[4+i], &n); err != nil {
				t.Fatalf("%s: %q: %v", budgetDoc, line, err)
			}
			into[name] = n
		}
	}
	if len(classic) == 0 {
		t.Fatalf("%s: no family in the table", budgetDoc)
	}
	return classic, native, stored
}

// runBudgetProxy runs the binary's run() with the scenario's configuration
// (and native breakdowns when native), drives the scenario through it and
// returns it once every stream is recorded.
func runBudgetProxy(t *testing.T, native bool) *instance {
	t.Helper()
	load := &e2e.LoadUpstream{Base: time.Millisecond}
	up := httptest.NewServer(budgetUpstream(load))
	t.Cleanup(up.Close)
	env := map[string]string{"ITLPROXY_UPSTREAM_URL": up.URL, "ITLPROXY_NATIVE_BREAKDOWNS": strconv.FormatBool(native)}
	maps.Copy(env, budgetEnv)
	in := start(t, nil, env)
	runBudgetScenario(t, load, in.proxy)
	recordedStreams(t, in, 127+1+len(sessionPrompts))
	return in
}

// TestSeriesBudget runs the series budget's scenario through the binary:
// one model on one endpoint must export at most 500 itlproxy_ series in
// the text exposition, exactly as many, family by family, as the table of
// docs/series-budget.md (which the metrics package's TestSeriesBudget
// generates from the registry) says.
func TestSeriesBudget(t *testing.T) {
	want, _, _ := docSeries(t)
	got := scrapeText(t, runBudgetProxy(t, false).admin)
	total := 0
	for name, n := range got {
		total += n
		if n != want[name] {
			t.Errorf("%s: %d series, %s says %d", name, n, budgetDoc, want[name])
		}
	}
	for name := range want {
		if _, ok := got[name]; !ok {
			t.Errorf("%s: not exported, %s says %d series", name, budgetDoc, want[name])
		}
	}
	t.Logf("%d itlproxy_ series", total)
	if total > 500 {
		t.Errorf("one model on one endpoint exports %d series, over the budget of 500", total)
	}
}

// nativeAccept is the Accept header of a Prometheus that scrapes native
// histograms: the protobuf exposition first.
const nativeAccept = "application/vnd.google.protobuf;proto=io.prometheus.client.MetricFamily;encoding=delimited;q=0.5," +
	"application/openmetrics-text;version=1.0.0;q=0.4,text/plain;version=0.0.4;q=0.3,*/*;q=0.1"

// mainHistograms keep their classic buckets with ITLPROXY_NATIVE_BREAKDOWNS.
var mainHistograms = []string{
	"itlproxy_time_to_first_token_seconds", "itlproxy_inter_token_latency_seconds",
	"itlproxy_time_per_output_token_seconds", "itlproxy_request_duration_seconds",
}

// TestNativeBreakdownsExposition runs the budget's scenario through the
// binary with ITLPROXY_NATIVE_BREAKDOWNS=true and reads /metrics as a
// native scraper does, in the protobuf exposition it negotiates: every
// histogram has native buckets; the main four keep their classic buckets
// beside them, every other one has none. The text exposition and the
// histograms a native scraper stores are counted as docs/series-budget.md
// says.
func TestNativeBreakdownsExposition(t *testing.T) {
	_, wantText, wantStored := docSeries(t)
	in := runBudgetProxy(t, true)
	for name, n := range scrapeText(t, in.admin) {
		if n != wantText[name] {
			t.Errorf("text exposition, %s: %d series, %s says %d", name, n, budgetDoc, wantText[name])
		}
	}

	req, _ := http.NewRequest(http.MethodGet, "http://"+in.admin+"/metrics", nil)
	req.Header.Set("Accept", nativeAccept)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	format := expfmt.ResponseFormat(resp.Header)
	if format.FormatType() != expfmt.TypeProtoDelim {
		t.Fatalf("a native scraper got %q, not the protobuf exposition", resp.Header.Get("Content-Type"))
	}
	dec := expfmt.NewDecoder(resp.Body, format)
	histograms := 0
	for {
		var mf dto.MetricFamily
		if err := dec.Decode(&mf); err == io.EOF {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		name := mf.GetName()
		if !strings.HasPrefix(name, "itlproxy_") {
			continue
		}
		if got := len(mf.GetMetric()); got != wantStored[name] {
			t.Errorf("%s: %d series stored as native histograms, %s says %d", name, got, budgetDoc, wantStored[name])
		}
		if mf.GetType() != dto.MetricType_HISTOGRAM {
			continue
		}
		histograms++
		main := slices.Contains(mainHistograms, name)
		for _, m := range mf.GetMetric() {
			h := m.GetHistogram()
			if h.Schema == nil || h.GetZeroThreshold() <= 0 {
				t.Errorf("%s: no native buckets", name)
			}
			if classic := len(h.GetBucket()); main != (classic > 0) {
				t.Errorf("%s: %d classic buckets (a main histogram: %v)", name, classic, main)
			}
		}
	}
	if histograms < 10 {
		t.Errorf("%d histogram families in the protobuf exposition", histograms)
	}
}
