package prometheus_test

import (
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	"github.com/itlproxy/itlproxy/internal/e2e"
)

// TestCapacityInRealPrometheus drives an upstream whose gaps grow with the
// streams in flight (4 ms + 5 ms per stream) at 1, 4 and 16 streams
// through the built proxy, with an ITL objective of 50 ms: the bands 1 and
// 3-4 (9 and 24 ms gaps) are within it, 9-16 (84 ms) is not, so the
// capacity rule in a real Prometheus must name 4 streams. Band 3-4 gets a
// thousand gaps, so that a stall of the machine delaying a few of them at
// once stays under its 1% tail. It runs with classic histograms, and with
// native ones (Prometheus with native histograms on, the proxy with
// ITLPROXY_NATIVE_BREAKDOWNS), where the rules read the native form.
func TestCapacityInRealPrometheus(t *testing.T) {
	t.Run("classic", func(t *testing.T) { testCapacity(t, false) })
	t.Run("native", func(t *testing.T) { testCapacity(t, true) })
}

func testCapacity(t *testing.T, native bool) {
	up := &e2e.LoadUpstream{Base: 4 * ms, PerStream: 5 * ms}
	server := httptest.NewServer(up)
	defer server.Close()
	proxy := e2e.Start(t, map[string]string{
		"ITLPROXY_UPSTREAM_URL":      server.URL,
		"ITLPROXY_SLO_ITL":           "50ms",
		"ITLPROXY_NATIVE_BREAKDOWNS": strconv.FormatBool(native),
	})
	prom := startPrometheus(t, native, proxy.Admin)
	base := "http://" + proxy.Proxy
	// A first short round at the highest load makes the series of every
	// band up to it (a band's series appear when the load first reaches
	// it), so that Prometheus has a sample of each before the measured
	// rounds add to it.
	up.Tokens = 2
	up.Round(t, base, "m", 16)
	e2e.WaitFor(t, "Prometheus to scrape the load bands", 20*time.Second, func() bool {
		return len(prom.Query(`model_load:itlproxy_inter_token_latency_seconds_count:increase5m{load="9-16"}`)) > 0
	})
	for _, r := range []struct{ streams, tokens int }{{1, 151}, {4, 251}, {16, 11}} { // 150, 1,000, 160 gaps
		up.Tokens = r.tokens
		up.Round(t, base, "m", r.streams)
	}
	defer func() {
		if t.Failed() {
			for _, q := range []string{`model:itlproxy_capacity_streams:5m`, `model_load:itlproxy_inter_token_latency_seconds:p99_rate5m`,
				`model_load:itlproxy_inter_token_latency_seconds_count:increase5m`, `itlproxy_slo_objective_seconds`} {
				t.Logf("%s: %v", q, prom.Query(q))
			}
		}
	}()
	e2e.WaitFor(t, "the rules to see band 9-16's gaps", 30*time.Second, func() bool {
		return len(prom.Query(`model_load:itlproxy_inter_token_latency_seconds_count:increase5m{model="m",load="9-16"} >= 100`)) > 0
	})
	e2e.WaitFor(t, "the capacity rule to name 4 streams", 30*time.Second, func() bool {
		got := prom.Query(`model:itlproxy_capacity_streams:5m{model="m"}`)
		return len(got) == 1 && got[0].Value[1] == "4"
	})
	if native && len(prom.Query(`itlproxy_inter_token_latency_by_load_seconds_bucket`)) > 0 {
		t.Error("Prometheus stored classic buckets of ITL by load: the rule did not read the native histogram")
	}
	for _, c := range []struct{ expr string }{
		{`model_load:itlproxy_inter_token_latency_seconds:p99_rate5m{model="m",load="3-4"} <= 0.05`},
		{`model_load:itlproxy_inter_token_latency_seconds:p99_rate5m{model="m",load="9-16"} > 0.05`},
	} {
		if len(prom.Query(c.expr)) == 0 {
			t.Errorf("no result from %s", c.expr)
		}
	}
}
