package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/itlproxy/itlproxy/internal/testenv"
)

// InstallPrometheus says how to get promtool and the Prometheus server the
// tests run.
const InstallPrometheus = "Debian's prometheus package: `apt-get install prometheus`, as .ci/run does"

// Prometheus is Debian's Prometheus server, run on loopback for one test.
type Prometheus struct {
	t   testing.TB
	url string
}

// StartPrometheus runs Prometheus scraping target every second and
// evaluating ruleFiles every second, and waits until it is ready. It
// scrapes the text format and stores classic histograms.
func StartPrometheus(t testing.TB, target string, ruleFiles ...string) *Prometheus {
	t.Helper()
	return startPrometheus(t, nil, scrapeTarget(target), ruleFiles)
}

// StartNativePrometheus is StartPrometheus with native histograms on
// (--enable-feature=native-histograms): Prometheus 2.42 then asks for the
// protobuf exposition and stores every histogram that has native buckets
// as a native histogram only, without its classic series.
func StartNativePrometheus(t testing.TB, target string, ruleFiles ...string) *Prometheus {
	t.Helper()
	return startPrometheus(t, []string{"--enable-feature=native-histograms"}, scrapeTarget(target), ruleFiles)
}

// StartPrometheusScraping runs Prometheus with scrapeConfigs, the list of
// scrape_configs in YAML (each item indented by two spaces), scraping every
// second and evaluating ruleFiles every second, and waits until it is
// ready.
func StartPrometheusScraping(t testing.TB, scrapeConfigs string, ruleFiles ...string) *Prometheus {
	t.Helper()
	return startPrometheus(t, nil, scrapeConfigs, ruleFiles)
}

// StartNativePrometheusScraping is StartPrometheusScraping with native
// histograms on, as StartNativePrometheus.
func StartNativePrometheusScraping(t testing.TB, scrapeConfigs string, ruleFiles ...string) *Prometheus {
	t.Helper()
	return startPrometheus(t, []string{"--enable-feature=native-histograms"}, scrapeConfigs, ruleFiles)
}

// scrapeTarget is the scrape configuration of one itlproxy at target.
func scrapeTarget(target string) string {
	return fmt.Sprintf(`  - job_name: itlproxy
    static_configs:
      - targets: [%q]
`, target)
}

func startPrometheus(t testing.TB, flags []string, scrapeConfigs string, ruleFiles []string) *Prometheus {
	t.Helper()
	return runPrometheus(t, testenv.LookPath(t, "prometheus", InstallPrometheus), flags, scrapeConfigs, ruleFiles)
}

// runPrometheus runs the Prometheus server bin with flags, scraping
// scrapeConfigs and evaluating ruleFiles every second, on loopback with a
// data directory of its own, and waits until it is ready.
func runPrometheus(t testing.TB, bin string, flags []string, scrapeConfigs string, ruleFiles []string) *Prometheus {
	t.Helper()
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
%s`, rules.String(), scrapeConfigs)
	if err := os.WriteFile(filepath.Join(dir, "prometheus.yml"), []byte(config), 0o600); err != nil {
		t.Fatal(err)
	}
	addr := FreeAddr(t)
	ctx, cancel := context.WithCancel(context.Background())
	cmd := exec.CommandContext(ctx, bin, append([]string{
		"--config.file=" + filepath.Join(dir, "prometheus.yml"),
		"--storage.tsdb.path=" + filepath.Join(dir, "data"),
		"--web.listen-address=" + addr,
		"--log.level=warn"}, flags...)...)
	var log bytes.Buffer // read only once the process has exited
	cmd.Stdout, cmd.Stderr = &log, &log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cancel()
		_ = cmd.Wait()
		if t.Failed() {
			t.Logf("prometheus log:\n%s", log.String())
		}
	})
	p := &Prometheus{t: t, url: "http://" + addr}
	WaitFor(t, "prometheus to be ready", 20*time.Second, func() bool {
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
func (p *Prometheus) api(path string, params url.Values, data any) {
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

// Sample is one element of an instant vector.
type Sample struct {
	Metric map[string]string `json:"metric"`
	Value  [2]any            `json:"value"`
	// Histogram is the sample of a native histogram, which has no Value:
	// its time and its count, sum and buckets.
	Histogram []any `json:"histogram,omitempty"`
}

// Query runs an instant query.
func (p *Prometheus) Query(expr string) []Sample {
	p.t.Helper()
	var data struct {
		ResultType string   `json:"resultType"`
		Result     []Sample `json:"result"`
	}
	p.api("/api/v1/query", url.Values{"query": {expr}}, &data)
	return data.Result
}

// Rule is a loaded rule's state.
type Rule struct {
	Name           string    `json:"name"`
	Type           string    `json:"type"`
	Health         string    `json:"health"`
	LastError      string    `json:"lastError"`
	LastEvaluation time.Time `json:"lastEvaluation"`
}

// Rules returns every loaded rule, of every group.
func (p *Prometheus) Rules() []Rule {
	p.t.Helper()
	var data struct {
		Groups []struct {
			Rules []Rule `json:"rules"`
		} `json:"groups"`
	}
	p.api("/api/v1/rules", nil, &data)
	var out []Rule
	for _, g := range data.Groups {
		out = append(out, g.Rules...)
	}
	return out
}

// Alert is a pending or firing alert.
type Alert struct {
	Labels map[string]string `json:"labels"`
	State  string            `json:"state"`
}

// Alerts returns the pending and firing alerts.
func (p *Prometheus) Alerts() []Alert {
	p.t.Helper()
	var data struct {
		Alerts []Alert `json:"alerts"`
	}
	p.api("/api/v1/alerts", nil, &data)
	return data.Alerts
}

// Target is an active scrape target's state.
type Target struct {
	Labels    map[string]string `json:"labels"`
	Health    string            `json:"health"`
	LastError string            `json:"lastError"`
}

// Targets returns the active scrape targets.
func (p *Prometheus) Targets() []Target {
	p.t.Helper()
	var data struct {
		ActiveTargets []Target `json:"activeTargets"`
	}
	p.api("/api/v1/targets", url.Values{"state": {"active"}}, &data)
	return data.ActiveTargets
}
