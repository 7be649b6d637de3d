package main

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// dashboardUpstream serves the varied traffic the dashboards need: a fast
// model, a spiky one (stalls), a flaky one (503s and a malformed event),
// sessions that slow down with every turn, completions, and non-streamed
// answers.
type dashboardUpstream struct {
	mu       sync.Mutex
	turns    map[string]int // by session id
	requests atomic.Int64
}

func (u *dashboardUpstream) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	model := regexp.MustCompile(`"model":"([^"]+)"`).FindSubmatch(body)
	if model == nil {
		http.Error(w, "no model", http.StatusBadRequest)
		return
	}
	name := string(model[1])
	n := u.requests.Add(1)
	if name == "mixtral-flaky" && n%4 == 0 {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusServiceUnavailable)
		_, _ = io.WriteString(w, `{"error":{"message":"overloaded","type":"server_error"}}`)
		return
	}
	slowdown := 1.0
	if s := r.Header.Get("X-Session-Id"); s != "" {
		u.mu.Lock()
		u.turns[s]++
		slowdown += 0.6 * float64(u.turns[s]-1)
		u.mu.Unlock()
	}
	ttft, tokens := 40*ms, 30
	gap := func() time.Duration { return time.Duration(float64(8*ms+rand.N(6*ms)) * slowdown) }
	switch name {
	case "qwen-spiky":
		ttft = 80 * ms
		gap = func() time.Duration {
			if rand.N(100) < 8 {
				return 250 * ms
			}
			return 15*ms + rand.N(10*ms)
		}
	case "mixtral-flaky":
		tokens = 20
	}
	chat := strings.HasSuffix(r.URL.Path, "/chat/completions")
	if !strings.Contains(string(body), `"stream":true`) {
		time.Sleep(ttft)
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"model":%q,"choices":[{"index":0,"message":{"role":"assistant","content":"done"}}],"usage":{"prompt_tokens":9,"completion_tokens":%d}}`, name, tokens)
		return
	}
	send := eventWriter(w)
	wait := ttft
	for i := range tokens {
		select {
		case <-r.Context().Done():
			return
		case <-time.After(wait):
		}
		wait = gap()
		chunk := fmt.Sprintf(`{"choices":[{"index":0,"text":"t%d"}]}`, i)
		if chat {
			chunk = fmt.Sprintf(`{"choices":[{"index":0,"delta":{"content":"t%d"}}]}`, i)
		}
		if !send(chunk) {
			return
		}
		if name == "mixtral-flaky" && i == 0 && !send(`{"choices":[{"delta":`) {
			return
		}
	}
	send(fmt.Sprintf(`{"choices":[],"usage":{"prompt_tokens":9,"completion_tokens":%d}}`, tokens))
	send("[DONE]")
}

// dashboardLoad drives the proxy for d: session clients on every model,
// completions, non-streamed requests, and a client that abandons streams.
func dashboardLoad(t *testing.T, proxy string, d time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	var wg sync.WaitGroup
	client := func(path, body, session string, abandon bool) {
		defer wg.Done()
		for ctx.Err() == nil {
			reqCtx, stop := context.WithCancel(ctx)
			req, _ := http.NewRequestWithContext(reqCtx, http.MethodPost, "http://"+proxy+path, strings.NewReader(body))
			if session != "" {
				req.Header.Set("X-Session-Id", session)
			}
			resp, err := http.DefaultClient.Do(req)
			if err == nil {
				if abandon {
					_, _ = io.ReadFull(resp.Body, make([]byte, 64))
				} else {
					_, _ = io.Copy(io.Discard, resp.Body)
				}
				resp.Body.Close()
			}
			stop()
		}
	}
	for _, model := range []string{"llama-fast", "qwen-spiky", "mixtral-flaky"} {
		for i := range 3 {
			wg.Add(1)
			go client("/v1/chat/completions", fmt.Sprintf(`{"model":%q,"stream":true}`, model), fmt.Sprintf("%s-session-%d", model, i), false)
		}
	}
	wg.Add(3)
	go client("/v1/completions", `{"model":"llama-fast","stream":true,"prompt":"x"}`, "", false)
	go client("/v1/chat/completions", `{"model":"qwen-spiky","stream":false}`, "", false)
	go client("/v1/chat/completions", `{"model":"llama-fast","stream":true}`, "", true)
	wg.Wait()
}

// grafanaValues stands in for what Grafana puts in a query with the
// variables set to All.
var grafanaValues = strings.NewReplacer(
	"$__rate_interval", "20s",
	"$__interval", "5s",
	"${datasource}", "",
	"$model", ".*",
	"$endpoint", ".*",
	"$class", ".*",
	"$tenant", ".*",
)

// TestDashboardQueriesInRealPrometheus runs every query of every dashboard,
// with the variables set to All, against a real Prometheus that scrapes a
// proxy under varied load and evaluates the rule file: none may fail, and
// at least four fifths must return data.
func TestDashboardQueriesInRealPrometheus(t *testing.T) {
	dashboards := loadDashboards(t)
	up := httptest.NewServer(&dashboardUpstream{turns: map[string]int{}})
	defer up.Close()
	sloFile := filepath.Join(t.TempDir(), "slo.yaml")
	if err := os.WriteFile(sloFile, []byte("models:\n  qwen-spiky: {itl: 30ms}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	in := start(t, nil, map[string]string{
		"ITLPROXY_UPSTREAM_URL":    up.URL,
		"ITLPROXY_SLO_TTFT":        "100ms",
		"ITLPROXY_SLO_ITL":         "50ms",
		"ITLPROXY_SLO_TPOT":        "40ms",
		"ITLPROXY_SLO_FILE":        sloFile,
		"ITLPROXY_STALL_THRESHOLD": "200ms",
	})
	prom := startPrometheus(t, in.admin, rulesFile)
	dashboardLoad(t, in.proxy, 15*time.Second)
	// Let Prometheus scrape the last of it and evaluate the rules on it.
	waitFor(t, "the recording rules to see the load", 10*time.Second, func() bool {
		return len(prom.query(`model:itlproxy_inter_token_latency_seconds:p99_rate5m`)) >= 3
	})
	time.Sleep(2 * time.Second)

	total, withData := 0, 0
	var empty []string
	for _, d := range dashboards {
		for _, q := range d.queries() {
			expr := grafanaValues.Replace(q.expr)
			if m := labelValues.FindStringSubmatch(expr); q.variable && m != nil {
				// label_values(selector, label) is count by (label) (selector).
				args := strings.TrimSuffix(strings.TrimPrefix(expr, "label_values("), ")")
				i := strings.LastIndex(args, ",")
				expr = fmt.Sprintf("count by (%s) (%s)", strings.TrimSpace(args[i+1:]), args[:i])
			}
			total++
			if res := prom.query(expr); len(res) > 0 {
				withData++
			} else {
				empty = append(empty, q.where)
			}
		}
	}
	t.Logf("%d of %d queries returned data; empty: %v", withData, total, empty)
	if withData*5 < total*4 {
		t.Errorf("only %d of %d queries returned data (want four fifths); empty: %v", withData, total, empty)
	}
}
