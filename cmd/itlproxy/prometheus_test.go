package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// rulesFile is the rule file the project ships.
var rulesFile = filepath.Join("..", "..", "deploy", "prometheus", "rules.yaml")

// needTool returns the path of a program from Debian's prometheus package.
// Where it is not installed the test is skipped with a loud message; under
// CI (CI=true), whose .ci/run installs the package, it fails instead.
func needTool(t *testing.T, name string) string {
	t.Helper()
	path, err := exec.LookPath(name)
	if err == nil {
		return path
	}
	msg := fmt.Sprintf("%s NOT INSTALLED: this test runs the real Prometheus (`apt-get install prometheus`, as .ci/run does); SKIPPING IT", name)
	if os.Getenv("CI") != "" {
		t.Fatal(msg + " is not allowed under CI")
	}
	fmt.Fprintln(os.Stderr, "### "+msg)
	t.Skip(msg)
	return ""
}

func TestPromtoolCheckRules(t *testing.T) {
	promtool := needTool(t, "promtool")
	out, err := exec.Command(promtool, "check", "rules", rulesFile).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "SUCCESS") {
		t.Fatalf("promtool check rules: %v\n%s", err, out)
	}
}

func TestPromtoolTestRules(t *testing.T) {
	promtool := needTool(t, "promtool")
	cmd := exec.Command(promtool, "test", "rules", "rules_test.yaml")
	cmd.Dir = filepath.Dir(rulesFile)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("promtool test rules: %v\n%s", err, out)
	}
}

// promServer is Debian's Prometheus server, run on loopback for one test.
type promServer struct {
	t   *testing.T
	url string
}

// startPrometheus runs Prometheus scraping target every second and
// evaluating ruleFiles every second, and waits until it is ready.
func startPrometheus(t *testing.T, target string, ruleFiles ...string) *promServer {
	t.Helper()
	bin := needTool(t, "prometheus")
	dir := t.TempDir()
	var rules strings.Builder
	for _, f := range ruleFiles {
		abs, err := filepath.Abs(f)
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(&rules, "  - %q\n", abs)
	}
	config := fmt.Sprintf(`global:
  scrape_interval: 1s
  evaluation_interval: 1s
rule_files:
%sscrape_configs:
  - job_name: itlproxy
    static_configs:
      - targets: [%q]
`, rules.String(), target)
	if err := os.WriteFile(filepath.Join(dir, "prometheus.yml"), []byte(config), 0o600); err != nil {
		t.Fatal(err)
	}
	addr := freeAddr(t)
	ctx, cancel := context.WithCancel(context.Background())
	cmd := exec.CommandContext(ctx, bin,
		"--config.file="+filepath.Join(dir, "prometheus.yml"),
		"--storage.tsdb.path="+filepath.Join(dir, "data"),
		"--web.listen-address="+addr,
		"--log.level=warn")
	log := &lockedBuffer{}
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cancel()
		_ = cmd.Wait()
		if t.Failed() {
			t.Logf("prometheus log:\n%s", log)
		}
	})
	p := &promServer{t: t, url: "http://" + addr}
	waitFor(t, "prometheus to be ready", 20*time.Second, func() bool {
		resp, err := http.Get(p.url + "/-/ready")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
	return p
}

// api calls a Prometheus HTTP API endpoint and decodes its data.
func (p *promServer) api(path string, params url.Values, data any) {
	p.t.Helper()
	resp, err := http.Get(p.url + path + "?" + params.Encode())
	if err != nil {
		p.t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	var envelope struct {
		Status string          `json:"status"`
		Error  string          `json:"error"`
		Data   json.RawMessage `json:"data"`
	}
	if err := json.Unmarshal(body, &envelope); err != nil || envelope.Status != "success" {
		p.t.Fatalf("%s %v: %s %s", path, params, envelope.Error, body)
	}
	if err := json.Unmarshal(envelope.Data, data); err != nil {
		p.t.Fatal(err)
	}
}

// promSample is one element of an instant vector.
type promSample struct {
	Metric map[string]string `json:"metric"`
	Value  [2]any            `json:"value"`
}

// query runs an instant query.
func (p *promServer) query(expr string) []promSample {
	p.t.Helper()
	var data struct {
		ResultType string       `json:"resultType"`
		Result     []promSample `json:"result"`
	}
	p.api("/api/v1/query", url.Values{"query": {expr}}, &data)
	return data.Result
}

type promRule struct {
	Name           string    `json:"name"`
	Type           string    `json:"type"`
	Health         string    `json:"health"`
	LastError      string    `json:"lastError"`
	LastEvaluation time.Time `json:"lastEvaluation"`
}

func (p *promServer) rules() []promRule {
	p.t.Helper()
	var data struct {
		Groups []struct {
			Rules []promRule `json:"rules"`
		} `json:"groups"`
	}
	p.api("/api/v1/rules", nil, &data)
	var out []promRule
	for _, g := range data.Groups {
		out = append(out, g.Rules...)
	}
	return out
}

type promAlert struct {
	Labels map[string]string `json:"labels"`
	State  string            `json:"state"`
}

func (p *promServer) alerts() []promAlert {
	p.t.Helper()
	var data struct {
		Alerts []promAlert `json:"alerts"`
	}
	p.api("/api/v1/alerts", nil, &data)
	return data.Alerts
}

// jitteredSchedule gives every stream tokens tokens, a TTFT of ttft and
// gaps drawn uniformly from [lo, hi).
func jitteredSchedule(tokens int, ttft, lo, hi time.Duration) func(string) (time.Duration, []time.Duration) {
	return func(string) (time.Duration, []time.Duration) {
		gaps := make([]time.Duration, tokens-1)
		for i := range gaps {
			gaps[i] = lo + rand.N(hi-lo)
		}
		return ttft, gaps
	}
}

// loadStreams runs clients per model, each streaming a chat completion
// through proxy, then more, one after another, until d has passed (d = 0:
// one stream per client).
func loadStreams(t *testing.T, proxy string, clients int, d time.Duration, models ...string) {
	t.Helper()
	deadline := time.Now().Add(d)
	var wg sync.WaitGroup
	for _, model := range models {
		for range clients {
			wg.Go(func() {
				for first := true; first || time.Now().Before(deadline); first = false {
					resp, err := http.Post("http://"+proxy+"/v1/chat/completions", "application/json",
						strings.NewReader(fmt.Sprintf(`{"model":%q,"stream":true}`, model)))
					if err != nil {
						t.Error(err)
						return
					}
					_, _ = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
				}
			})
		}
	}
	wg.Wait()
}

// TestRulesInRealPrometheus loads deploy/prometheus/rules.yaml into a real
// Prometheus scraping a running proxy: one model well inside its ITL
// objective, one outside. Every rule must evaluate without error, and the
// ITL alert's condition must hold for the slow model only.
func TestRulesInRealPrometheus(t *testing.T) {
	schedules := map[string]func(string) (time.Duration, []time.Duration){
		"fast-model": jitteredSchedule(20, 50*ms, 8*ms, 20*ms),
		"slow-model": jitteredSchedule(12, 50*ms, 80*ms, 140*ms),
	}
	up := httptest.NewServer(scheduledUpstream{func(model string) (time.Duration, []time.Duration) {
		return schedules[model](model)
	}})
	defer up.Close()
	sloFile := filepath.Join(t.TempDir(), "slo.yaml")
	// fast-model's objective is far above its 8-20 ms gaps: on a busy
	// machine a stall of the proxy under -race delays every fast stream at
	// once, and a handful of such stalls would move a 1% tail set at 60 ms.
	if err := os.WriteFile(sloFile, []byte("models:\n  fast-model: {itl: 150ms}\n  slow-model: {itl: 60ms}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	in := start(t, nil, map[string]string{
		"ITLPROXY_UPSTREAM_URL": up.URL,
		"ITLPROXY_SLO_ITL":      "200ms", // the file overrides it for both models
		"ITLPROXY_SLO_TTFT":     "1s",
		"ITLPROXY_SLO_FILE":     sloFile,
	})
	prom := startPrometheus(t, in.admin, rulesFile)
	loadStreams(t, in.proxy, 4, 8*time.Second, "fast-model", "slow-model")

	var slowAlert bool
	waitFor(t, "the ITL alert's condition to hold for slow-model", 30*time.Second, func() bool {
		for _, a := range prom.alerts() {
			if a.Labels["alertname"] == "ItlproxyITLP99AboveObjective" && a.Labels["model"] == "slow-model" {
				slowAlert = true
			}
		}
		return slowAlert
	})
	for _, a := range prom.alerts() {
		if a.Labels["model"] == "fast-model" || a.Labels["alertname"] == "ItlproxyMetricsAbsent" {
			t.Errorf("unexpected alert %v (%s)", a.Labels, a.State)
		}
	}

	rules := prom.rules()
	if len(rules) < 40 {
		t.Fatalf("Prometheus loaded %d rules", len(rules))
	}
	for _, r := range rules {
		if r.Health != "ok" || r.LastError != "" || r.LastEvaluation.IsZero() {
			t.Errorf("rule %s: health %q, error %q, last evaluated %v", r.Name, r.Health, r.LastError, r.LastEvaluation)
		}
	}
	for _, c := range []struct {
		expr string
		want bool
	}{
		{`model:itlproxy_inter_token_latency_seconds:p99_rate5m{model="slow-model"} > 0.06`, true},
		{`model:itlproxy_inter_token_latency_seconds:p99_rate5m{model="fast-model"} < 0.15`, true},
		{`itlproxy_slo_objective_seconds{model="fast-model",slo="itl"} == 0.15`, true},
		{`itlproxy_slo_objective_seconds{model="slow-model",slo="itl"} == 0.06`, true},
		{`itlproxy_slo_objective_seconds{model="_other",slo="itl"} == 0.2`, true},
		{`model_slo:itlproxy_slo_breaches:ratio_rate5m{model="slow-model",slo="itl"} > 0.9`, true},
		// A fast gap rarely passes 150ms, but a busy machine can delay one.
		{`model_slo:itlproxy_slo_breaches:ratio_rate5m{model="fast-model",slo="itl"} < 0.02`, true},
	} {
		if got := len(prom.query(c.expr)) > 0; got != c.want {
			t.Errorf("%s: got a result %v, want %v", c.expr, got, c.want)
		}
	}
}
