package main

import (
	"bufio"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sort"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/itlproxy/itlproxy/internal/e2e"
)

// budgetModel is the one model of the budget's scenario.
const budgetModel = "budget-model"

// sessionPrompts are the input tokens of the session's turns, growing as a
// conversation does, through every context band; turn 9 reports none.
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
		stream(t, proxyAddr, budgetModel, fmt.Sprintf("turn-%d", turn+1), "X-Session-Id", "budget-session")
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

// TestSeriesBudget measures the series one model on one endpoint exports
// in the text exposition after the budget's scenario.
func TestSeriesBudget(t *testing.T) {
	load := &e2e.LoadUpstream{Base: time.Millisecond}
	up := httptest.NewServer(budgetUpstream(load))
	defer up.Close()
	env := map[string]string{"ITLPROXY_UPSTREAM_URL": up.URL}
	for k, v := range budgetEnv {
		env[k] = v
	}
	in := start(t, nil, env)
	runBudgetScenario(t, load, in.proxy)
	recordedStreams(t, in, 127+1+len(sessionPrompts))
	counts := scrapeText(t, in.admin)
	total := 0
	names := make([]string, 0, len(counts))
	for name, n := range counts {
		total += n
		names = append(names, name)
	}
	sort.Slice(names, func(i, j int) bool { return counts[names[i]] > counts[names[j]] })
	for _, name := range names {
		t.Logf("%5d %s", counts[name], name)
	}
	t.Logf("%5d in all", total)
}
