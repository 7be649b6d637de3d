package prometheus_test

import (
	"net/http/httptest"
	"testing"
	"time"

	"github.com/itlproxy/itlproxy/internal/e2e"
)

// TestCapacityInRealPrometheus drives an upstream whose gaps grow with the
// streams in flight (4 ms + 4 ms per stream) at 1, 4 and 16 streams
// through the built proxy, with an ITL objective of 40 ms: the bands 1 and
// 3-4 (8 and 20 ms gaps) are within it, 9-16 (68 ms) is not, so the
// capacity rule in a real Prometheus must name 4 streams.
func TestCapacityInRealPrometheus(t *testing.T) {
	up := &e2e.LoadUpstream{Base: 4 * ms, PerStream: 4 * ms}
	server := httptest.NewServer(up)
	defer server.Close()
	proxy := e2e.Start(t, map[string]string{
		"ITLPROXY_UPSTREAM_URL": server.URL,
		"ITLPROXY_SLO_ITL":      "40ms",
	})
	prom := e2e.StartPrometheus(t, proxy.Admin, "rules.yaml")
	base := "http://" + proxy.Proxy
	// A first short round makes every band's series, so that Prometheus has
	// a sample of each before the measured rounds add to it.
	up.Tokens = 2
	up.Round(t, base, "m", 1)
	e2e.WaitFor(t, "Prometheus to scrape the load bands", 20*time.Second, func() bool {
		return len(prom.Query(`itlproxy_inter_token_latency_by_load_seconds_count{load="9-16"}`)) > 0
	})
	up.Tokens = 101
	for _, n := range []int{1, 4, 16} { // at least 100 gaps in each band
		up.Round(t, base, "m", n)
	}
	defer func() {
		if t.Failed() {
			for _, q := range []string{`model:itlproxy_capacity_streams:5m`, `model_load:itlproxy_inter_token_latency_seconds:p99_rate5m`,
				`model_load:itlproxy_inter_token_latency_seconds_count:increase5m`, `itlproxy_slo_objective_seconds`} {
				t.Logf("%s: %v", q, prom.Query(q))
			}
		}
	}()
	e2e.WaitFor(t, "the capacity rule to name 4 streams", 30*time.Second, func() bool {
		got := prom.Query(`model:itlproxy_capacity_streams:5m{model="m"}`)
		return len(got) == 1 && got[0].Value[1] == "4"
	})
	for _, c := range []struct{ expr string }{
		{`model_load:itlproxy_inter_token_latency_seconds:p99_rate5m{model="m",load="3-4"} <= 0.04`},
		{`model_load:itlproxy_inter_token_latency_seconds:p99_rate5m{model="m",load="9-16"} > 0.04`},
		{`model_load:itlproxy_inter_token_latency_seconds_count:increase5m{model="m",load="9-16"} >= 100`},
	} {
		if len(prom.Query(c.expr)) == 0 {
			t.Errorf("no result from %s", c.expr)
		}
	}
}
