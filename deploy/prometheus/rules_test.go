// Package prometheus_test checks the rule file of this folder with
// promtool, and loads it into a real Prometheus scraping the proxy.
package prometheus_test

import (
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/itlproxy/itlproxy/internal/e2e"
	"github.com/itlproxy/itlproxy/internal/testenv"
)

const ms = time.Millisecond

func TestPromtoolCheckRules(t *testing.T) {
	promtool := testenv.LookPath(t, "promtool", e2e.InstallPrometheus)
	out, err := exec.Command(promtool, "check", "rules", "rules.yaml").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "SUCCESS") {
		t.Fatalf("promtool check rules: %v\n%s", err, out)
	}
}

func TestPromtoolTestRules(t *testing.T) {
	promtool := testenv.LookPath(t, "promtool", e2e.InstallPrometheus)
	if out, err := exec.Command(promtool, "test", "rules", "rules_test.yaml").CombinedOutput(); err != nil {
		t.Fatalf("promtool test rules: %v\n%s", err, out)
	}
}

// startPrometheus starts Prometheus on rules.yaml scraping target, with
// native histograms on when native.
func startPrometheus(t *testing.T, native bool, target string) *e2e.Prometheus {
	t.Helper()
	if native {
		return e2e.StartNativePrometheus(t, target, "rules.yaml")
	}
	return e2e.StartPrometheus(t, target, "rules.yaml")
}

// TestRulesInRealPrometheus loads rules.yaml into a real Prometheus
// scraping a running proxy: one model well inside its ITL objective, one
// outside. Every rule must evaluate without error, and the ITL alert's
// condition must hold for the slow model only; with classic histograms,
// and with native ones, which Prometheus then stores alone.
func TestRulesInRealPrometheus(t *testing.T) {
	t.Run("classic", func(t *testing.T) { testRules(t, false) })
	t.Run("native", func(t *testing.T) { testRules(t, true) })
}

func testRules(t *testing.T, native bool) {
	up := httptest.NewServer(&e2e.Upstream{Models: map[string]e2e.Model{
		"fast-model": {TTFT: 50 * ms, Tokens: 20, Gap: e2e.Uniform(8*ms, 20*ms)},
		"slow-model": {TTFT: 50 * ms, Tokens: 12, Gap: e2e.Uniform(80*ms, 140*ms)},
	}})
	defer up.Close()
	sloFile := filepath.Join(t.TempDir(), "slo.yaml")
	// fast-model's objective is far above its 8-20 ms gaps: on a busy
	// machine a stall of the proxy delays every fast stream at once, and a
	// handful of such stalls would move a 1% tail set at 60 ms.
	if err := os.WriteFile(sloFile, []byte("models:\n  fast-model: {itl: 150ms}\n  slow-model: {itl: 60ms}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	proxy := e2e.Start(t, map[string]string{
		"ITLPROXY_UPSTREAM_URL":      up.URL,
		"ITLPROXY_SLO_ITL":           "200ms", // the file overrides it for both models
		"ITLPROXY_SLO_TTFT":          "1s",
		"ITLPROXY_SLO_FILE":          sloFile,
		"ITLPROXY_NATIVE_BREAKDOWNS": strconv.FormatBool(native),
	})
	prom := startPrometheus(t, native, proxy.Admin)
	e2e.Load(t, proxy.Proxy, 8*time.Second, e2e.Streams(4, "fast-model", "slow-model")...)

	var slowAlert bool
	e2e.WaitFor(t, "the ITL alert's condition to hold for slow-model", 30*time.Second, func() bool {
		for _, a := range prom.Alerts() {
			if a.Labels["alertname"] == "ItlproxyITLP99AboveObjective" && a.Labels["model"] == "slow-model" {
				slowAlert = true
			}
		}
		return slowAlert
	})
	for _, a := range prom.Alerts() {
		if a.Labels["model"] == "fast-model" || a.Labels["alertname"] == "ItlproxyMetricsAbsent" {
			t.Errorf("unexpected alert %v (%s)", a.Labels, a.State)
		}
	}

	rules := prom.Rules()
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
		if got := len(prom.Query(c.expr)) > 0; got != c.want {
			t.Errorf("%s: got a result %v, want %v", c.expr, got, c.want)
		}
	}
}
