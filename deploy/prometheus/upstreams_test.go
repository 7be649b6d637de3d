package prometheus_test

import (
	"bufio"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/itlproxy/itlproxy/internal/e2e"
)

// The per-endpoint histograms whose quantiles the rules record.
const (
	upstreamTTFT = "itlproxy_upstream_time_to_first_token_seconds"
	upstreamITL  = "itlproxy_upstream_inter_token_latency_seconds"
)

// TestSlowPodInRealPrometheus runs the built proxy balancing over three
// model server pods, one of them 3x slower to its first token and 2.5x
// slower between tokens (120 and 360 ms, 120 and 300 ms), scraped by a real
// Prometheus with the shipped rules: the recorded per-endpoint p99 TTFT
// and ITL put the slow pod at least twice each of its peers, and the
// slow-endpoint alert is pending or firing for it and for no other. With
// classic histograms (Debian's Prometheus 2.42 scraping the text format);
// and with native ones, the proxy scraped twice, natively and as classic
// text, so that Prometheus holds both forms of the per-endpoint
// histograms, as one that keeps classic histograms beside native ones
// does: the recorded figures are then the native histograms'.
func TestSlowPodInRealPrometheus(t *testing.T) {
	t.Run("classic", func(t *testing.T) { testSlowPod(t, false) })
	t.Run("native", func(t *testing.T) { testSlowPod(t, true) })
}

func testSlowPod(t *testing.T, native bool) {
	constant := func(d time.Duration) func(int) time.Duration { return func(int) time.Duration { return d } }
	pod := func(ttft, gap time.Duration) string {
		s := httptest.NewServer(&e2e.Upstream{Models: map[string]e2e.Model{
			"m": {TTFT: ttft, Tokens: 6, Gap: constant(gap)},
		}})
		t.Cleanup(s.Close)
		return s.URL
	}
	// Each figure mid-bucket of the per-endpoint ladders, 30 ms or more
	// under the bound above it, so that a busy machine delaying 1% of
	// the gaps by less does not move a p99 to the next bucket.
	urls := []string{pod(120*ms, 120*ms), pod(120*ms, 120*ms), pod(360*ms, 300*ms)}
	slow := strings.TrimPrefix(urls[2], "http://")
	proxy := e2e.Start(t, map[string]string{"ITLPROXY_UPSTREAM_URL": strings.Join(urls, ",")})
	// A first round opens the connections and warms the processes up
	// before Prometheus starts: rate() counts from its first scrape, so a
	// p99 over a few dozen streams (the slowest of them) is not that of a
	// cold start.
	e2e.Load(t, proxy.Proxy, time.Second, e2e.Streams(6, "m")...)
	var prom *e2e.Prometheus
	if native {
		classic := httptest.NewServer(classicText(t, "http://"+proxy.Admin+"/metrics", upstreamTTFT, upstreamITL))
		defer classic.Close()
		prom = e2e.StartNativePrometheusScraping(t, fmt.Sprintf(`  - job_name: itlproxy
    static_configs:
      - targets: [%q]
  - job_name: itlproxy-classic
    static_configs:
      - targets: [%q]
`, proxy.Admin, strings.TrimPrefix(classic.URL, "http://")), "rules.yaml")
	} else {
		prom = e2e.StartPrometheus(t, proxy.Admin, "rules.yaml")
	}
	e2e.Load(t, proxy.Proxy, 12*time.Second, e2e.Streams(9, "m")...)
	defer func() {
		if t.Failed() {
			for _, q := range []string{`model_upstream:itlproxy_upstream_time_to_first_token_seconds:p99_rate5m`,
				`model_upstream:itlproxy_upstream_inter_token_latency_seconds:p99_rate5m`, `model_upstream:itlproxy_upstream_streams:increase10m`, `ALERTS`} {
				t.Logf("%s: %v", q, prom.Query(q))
			}
		}
	}()

	alerted := func() (slowPod bool, others []string) {
		for _, a := range prom.Alerts() {
			if a.Labels["alertname"] != "ItlproxyUpstreamEndpointSlow" {
				continue
			}
			if a.Labels["upstream"] == slow && a.Labels["model"] == "m" {
				slowPod = true
			} else {
				others = append(others, a.Labels["upstream"]+" "+a.State)
			}
		}
		return slowPod, others
	}
	e2e.WaitFor(t, "the slow-endpoint alert to be pending or firing for the slow pod", 30*time.Second, func() bool {
		ok, _ := alerted()
		return ok
	})
	// The load is over: once Prometheus has scraped its end, the 5-minute
	// quantiles hold still (a quantile of rates is one of increases).
	time.Sleep(3 * time.Second)
	if _, others := alerted(); len(others) > 0 {
		t.Errorf("the slow-endpoint alert holds for other pods: %v", others)
	}

	for _, family := range []string{upstreamTTFT, upstreamITL} {
		recorded := "model_upstream:" + family + ":p99_rate5m"
		p99 := byUpstream(t, prom.Query(recorded+`{model="m"}`))
		t.Logf("%s: %v", recorded, p99)
		if len(p99) != 3 {
			t.Fatalf("%s: %d pods, want 3: %v", recorded, len(p99), p99)
		}
		for upstream, v := range p99 {
			if upstream != slow && !(p99[slow] >= 2*v) {
				t.Errorf("%s: the slow pod's %.4f is not twice %s's %.4f", recorded, p99[slow], upstream, v)
			}
		}
		if !native {
			continue
		}
		if len(prom.Query(family+"_bucket")) == 0 {
			t.Fatalf("no classic %s_bucket series beside the native histograms: the test does not hold both forms", family)
		}
		fromNative := byUpstream(t, prom.Query(`histogram_quantile(0.99, sum by (model, upstream) (rate(`+family+`[5m])))`))
		fromClassic := byUpstream(t, prom.Query(`histogram_quantile(0.99, sum by (model, upstream, le) (rate(`+family+`_bucket[5m])))`))
		t.Logf("%s p99 from native histograms %v, from classic buckets %v", family, fromNative, fromClassic)
		apart := false
		for upstream, v := range p99 {
			if math.Abs(v-fromNative[upstream]) > 1e-9*v {
				t.Errorf("%s on %s: recorded %v, the native histogram's %v: the rule did not prefer it", family, upstream, v, fromNative[upstream])
			}
			apart = apart || math.Abs(fromClassic[upstream]-fromNative[upstream]) > 0.01*v
		}
		if !apart {
			t.Errorf("%s: the classic and native p99s agree within 1%% on every pod, so the test cannot tell which the rule read", family)
		}
	}
}

// byUpstream returns each sample's value by its upstream label.
func byUpstream(t *testing.T, samples []e2e.Sample) map[string]float64 {
	t.Helper()
	out := map[string]float64{}
	for _, s := range samples {
		v, err := strconv.ParseFloat(fmt.Sprint(s.Value[1]), 64)
		if err != nil {
			t.Fatalf("%v: %v", s, err)
		}
		out[s.Metric["upstream"]] = v
	}
	return out
}

// classicText serves the families named of the text exposition at url, in
// the text format whatever the scraper asks for: a Prometheus with native
// histograms on stores them as classic histograms.
func classicText(t *testing.T, url string, families ...string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		resp, err := http.Get(url)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		defer resp.Body.Close()
		w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			line := sc.Text()
			name := strings.TrimPrefix(strings.TrimPrefix(line, "# HELP "), "# TYPE ")
			for _, f := range families {
				if strings.HasPrefix(name, f+" ") || strings.HasPrefix(name, f+"_") || strings.HasPrefix(name, f+"{") {
					fmt.Fprintln(w, line)
				}
			}
		}
		if err := sc.Err(); err != nil {
			t.Errorf("reading %s: %v", url, err)
		}
	})
}
