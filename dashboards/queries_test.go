package dashboards_test

import (
	"fmt"
	"math/rand/v2"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/itlproxy/itlproxy/internal/e2e"
)

const ms = time.Millisecond

// sessionGap is 8-14 ms, slower by 60% of that with every turn of a
// session.
func sessionGap(turn int) time.Duration {
	return time.Duration(float64(8*ms+rand.N(6*ms)) * (1 + 0.6*float64(turn-1)))
}

// models are the upstream's: a fast model, a spiky one (stalls), a flaky
// one (503s and a malformed event), the fast and flaky ones slowing down
// with every turn of a session, a steady one, well within its ITL
// objective at the load it gets, so that it has a capacity, and one whose
// events carry three tokens each and say so (speculative decoding).
var models = map[string]e2e.Model{
	"llama-fast": {TTFT: 40 * ms, Tokens: 30, Gap: sessionGap},
	"qwen-spiky": {TTFT: 80 * ms, Tokens: 30, Gap: func(int) time.Duration {
		if rand.N(100) < 8 {
			return 250 * ms
		}
		return 15*ms + rand.N(10*ms)
	}},
	"mixtral-flaky": {TTFT: 40 * ms, Tokens: 20, Gap: sessionGap, FailEvery: 4, Malformed: true},
	"phi-steady":    {TTFT: 20 * ms, Tokens: 40, Gap: e2e.Uniform(4*ms, 8*ms)},
	"qwen-spec":     {TTFT: 30 * ms, Tokens: 20, Gap: e2e.Uniform(15*ms, 25*ms), TokensPerEvent: 3},
}

// clients are the load: session clients on every model, completions,
// non-streamed requests, a client that abandons its streams, two steady
// streams, a stream of several tokens per event, a stream of Ollama's
// native API (whose server reports its own decode timing), and a Realtime
// API WebSocket (voice: audio deltas with their transcript).
func clients() []e2e.Client {
	out := append(e2e.Streams(2, "phi-steady"), e2e.Streams(1, "qwen-spec")...)
	for _, model := range []string{"llama-fast", "qwen-spiky", "mixtral-flaky"} {
		for i := range 3 {
			out = append(out, e2e.Client{Path: "/v1/chat/completions", Body: fmt.Sprintf(`{"model":%q,"stream":true}`, model), Session: fmt.Sprintf("%s-session-%d", model, i)})
		}
	}
	return append(out,
		e2e.Client{Path: "/v1/completions", Body: `{"model":"llama-fast","stream":true,"prompt":"x"}`},
		e2e.Client{Path: "/v1/chat/completions", Body: `{"model":"qwen-spiky","stream":false}`},
		e2e.Client{Path: "/v1/chat/completions", Body: `{"model":"llama-fast","stream":true}`, Abandon: true},
		e2e.Client{Path: "/api/chat", Body: `{"model":"phi-steady","messages":[{"role":"user","content":"x"}]}`},
		e2e.Client{Realtime: "phi-steady"})
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

// mayBeEmpty names the queries (as "file: panel refId" or "file: variable
// name") allowed to return no data under the test's load, each with why.
// There are none: the load drives every series a dashboard reads (errors,
// malformed events, abandoned streams, stalls, sessions slowing down,
// breaches of every objective, pending alerts, upstream endpoints and one
// set aside). A query added for an event
// the load cannot make belongs here, with the reason.
var mayBeEmpty = map[string]string{}

// TestDashboardQueriesInRealPrometheus runs every query of every dashboard,
// with the variables set to All, against a real Prometheus that scrapes a
// proxy under varied load, balancing over two pods and a pod gone
// (balancedUpstream), and evaluates the rule file: none may fail, and
// every one must return data but those mayBeEmpty names. It does so twice:
// with classic histograms, and with native histograms on in Prometheus
// and ITLPROXY_NATIVE_BREAKDOWNS on in the proxy, where Prometheus 2.42
// stores every histogram as a native one only.
func TestDashboardQueriesInRealPrometheus(t *testing.T) {
	t.Run("classic", func(t *testing.T) { runDashboardQueries(t, false) })
	t.Run("native", func(t *testing.T) { runDashboardQueries(t, true) })
}

func runDashboardQueries(t *testing.T, native bool) {
	dashboards := loadDashboards(t)
	pods := balancedUpstream(t)
	sloFile := filepath.Join(t.TempDir(), "slo.yaml")
	if err := os.WriteFile(sloFile, []byte("models:\n  qwen-spiky: {itl: 30ms}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	proxy := e2e.Start(t, map[string]string{
		"ITLPROXY_UPSTREAM_URL":      pods,
		"ITLPROXY_SLO_TTFT":          "100ms",
		"ITLPROXY_SLO_ITL":           "50ms",
		"ITLPROXY_SLO_TPOT":          "40ms",
		"ITLPROXY_SLO_FILE":          sloFile,
		"ITLPROXY_STALL_THRESHOLD":   "200ms",
		"ITLPROXY_NATIVE_BREAKDOWNS": strconv.FormatBool(native),
	})
	start := e2e.StartPrometheus
	if native {
		start = e2e.StartNativePrometheus
	}
	prom := start(t, proxy.Admin, rulesFile)
	e2e.Load(t, proxy.Proxy, 15*time.Second, clients()...)
	// Let Prometheus scrape the last of it and evaluate the rules on it.
	e2e.WaitFor(t, "the recording rules to see the load", 10*time.Second, func() bool {
		return len(prom.Query(`model:itlproxy_inter_token_latency_seconds:p99_rate5m`)) >= 3
	})
	time.Sleep(2 * time.Second)
	if native {
		// Prometheus holds the histograms in native form only: the queries
		// below answer from native histograms.
		if len(prom.Query(`itlproxy_inter_token_latency_by_load_seconds`)) == 0 {
			t.Fatal("no native histogram stored")
		}
		if got := prom.Query(`count({__name__=~"itlproxy_.+_bucket"})`); len(got) > 0 {
			t.Fatalf("classic buckets stored with native histograms on: %v", got)
		}
	}

	total := 0
	seen := map[string]bool{}
	for _, d := range dashboards {
		for _, q := range d.queries() {
			total++
			seen[q.where] = true
			if len(prom.Query(promQL(q))) > 0 {
				continue
			}
			if why, ok := mayBeEmpty[q.where]; ok {
				t.Logf("%s: no data, allowed: %s", q.where, why)
			} else {
				t.Errorf("%s: no data from %s", q.where, q.expr)
			}
		}
	}
	for where := range mayBeEmpty {
		if !seen[where] {
			t.Errorf("mayBeEmpty names %q, which no dashboard has", where)
		}
	}
	t.Logf("ran %d queries", total)
}

// balancedUpstream returns the upstream URLs of the load's proxy, which
// balances over them as a gateway over a headless Service's pods: two
// listeners of one upstream, two pods of a model server that share its
// state (each session's turns, the failures of every FailEvery-th
// request), so that every query that does not split by endpoint sees what
// one upstream would give it; and an address that refuses connections, a
// pod gone, which the proxy sets aside and whose requests it sends to the
// others. The per-endpoint panels then have a pod each, and an ejection.
func balancedUpstream(t *testing.T) string {
	up := &e2e.Upstream{Models: models}
	urls := []string{"http://" + e2e.FreeAddr(t)}
	for range 2 {
		pod := httptest.NewServer(up)
		t.Cleanup(pod.Close)
		urls = append(urls, pod.URL)
	}
	return strings.Join(urls, ",")
}

// promQL is q as Grafana sends it with the variables set to All; a
// variable's label_values(selector, label) is count by (label) (selector).
func promQL(q query) string {
	expr := grafanaValues.Replace(q.expr)
	if m := labelValues.FindStringSubmatch(expr); q.variable && m != nil {
		args := strings.TrimSuffix(strings.TrimPrefix(expr, "label_values("), ")")
		i := strings.LastIndex(args, ",")
		expr = fmt.Sprintf("count by (%s) (%s)", strings.TrimSpace(args[i+1:]), args[:i])
	}
	return expr
}
