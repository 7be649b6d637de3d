package main

import (
	"fmt"
	"math"
	"net/http/httptest"
	"net/url"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/itlproxy/itlproxy/internal/e2e"
)

// TestOTLPPushToPrometheus3 pushes itlproxy's metrics to a real Prometheus
// 3 through its OTLP receiver under a load of known streams, and asks
// Prometheus, in PromQL, what itlproxy's own /metrics says: for TTFT, ITL
// and TPOT of every model the same counts, and sums within 0.1%, each a
// native histogram; the stream counts; the GenAI conventions' series with
// their attributes as labels and the same counts; exemplars with the
// requests' trace ids.
func TestOTLPPushToPrometheus3(t *testing.T) {
	prom := e2e.StartPrometheus3OTLP(t)
	t.Setenv("OTEL_BSP_SCHEDULE_DELAY", "100")
	const tokens, perModel = 12, 8
	models := []string{"m1", "m2", "m3"}
	up := httptest.NewServer(scheduledUpstream{schedule: randomSchedule(tokens)})
	defer up.Close()
	var spans collector
	spanSrv := httptest.NewServer(&spans)
	t.Cleanup(spanSrv.Close)
	in := start(t, nil, map[string]string{
		"ITLPROXY_UPSTREAM_URL":               up.URL,
		"OTEL_METRICS_EXPORTER":               "prometheus,otlp",
		"OTEL_EXPORTER_OTLP_METRICS_ENDPOINT": prom.OTLPEndpoint() + "/v1/metrics",
		"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT":  spanSrv.URL + "/v1/traces",
		"OTEL_METRIC_EXPORT_INTERVAL":         "1000",
	})
	var wg sync.WaitGroup
	for _, m := range models {
		for c := range 2 {
			wg.Go(func() {
				for i := range perModel / 2 {
					stream(t, in.proxy, m, fmt.Sprintf("%s-%d-%d", m, c, i))
				}
			})
		}
	}
	wg.Wait()
	for _, m := range models {
		waitEnded(t, in, m, perModel)
	}
	fs := in.scrape()

	upURL, _ := url.Parse(up.URL)
	genAI := `gen_ai_operation_name="chat",gen_ai_provider_name="openai",itlproxy_endpoint="chat_completions",` +
		`server_address="127.0.0.1",server_port="` + upURL.Port() + `"`
	for _, m := range models {
		checked := map[string]bool{}
		for family, gen := range map[string]string{
			"itlproxy_time_to_first_token_seconds":   "gen_ai_client_operation_time_to_first_chunk_seconds",
			"itlproxy_inter_token_latency_seconds":   "gen_ai_client_operation_time_per_output_chunk_seconds",
			"itlproxy_time_per_output_token_seconds": "gen_ai_server_time_per_output_token_seconds",
		} {
			count, sum := fs.Histogram(family, "model", m)
			want := map[string]uint64{"itlproxy_time_to_first_token_seconds": perModel,
				"itlproxy_inter_token_latency_seconds": perModel * (tokens - 1), "itlproxy_time_per_output_token_seconds": perModel}[family]
			if count != want {
				t.Errorf("/metrics: %s{model=%q} counts %d, want %d", family, m, count, want)
			}
			for _, sel := range []string{family + `{model="` + m + `"}`, gen + `{gen_ai_request_model="` + m + `",` + genAI + `}`} {
				waitAgreement(t, prom, sel, count, sum)
				checked[sel] = true
			}
		}
		if got := promValue(t, prom, `itlproxy_streams_total{model="`+m+`",outcome="completed"}`); got != perModel {
			t.Errorf("Prometheus counts %v streams of %s, want %d", got, m, perModel)
		}
		input, _ := fs.Histogram("itlproxy_tokens_per_response", "model", m, "type", "input")
		waitAgreement(t, prom, `gen_ai_client_token_usage{gen_ai_request_model="`+m+`",gen_ai_token_type="input",`+genAI+`}`, input, 5*float64(input))
	}
	if s := prom.Query(`itlproxy_inter_token_latency_seconds{model="m1"}`); len(s) != 1 || len(s[0].Histogram) != 2 ||
		s[0].Metric["job"] != "itlproxy" || s[0].Metric["instance"] == "" {
		t.Errorf("ITL of m1 in Prometheus: %+v, want one native histogram sample of job itlproxy and an instance", s)
	}
	withTrace := 0
	for _, e := range prom.Exemplars(`itlproxy_inter_token_latency_seconds`) {
		if len(e["trace_id"]) == 32 && e["request_id"] != "" {
			withTrace++
		}
	}
	if withTrace == 0 {
		t.Error("Prometheus holds no ITL exemplar with a trace id and a request id")
	}
}

// waitAgreement waits until Prometheus' latest sample of the native
// histogram sel counts count observations, then wants its sum within
// 0.1% of sum.
func waitAgreement(t *testing.T, prom *e2e.Prometheus, sel string, count uint64, sum float64) {
	t.Helper()
	var got float64
	waitFor(t, sel+" in Prometheus to count "+strconv.FormatUint(count, 10), 20*time.Second, func() bool {
		got = promValue(t, prom, "histogram_count("+sel+")")
		return got == float64(count)
	})
	s := promValue(t, prom, "histogram_sum("+sel+")")
	if math.Abs(s-sum) > 0.001*sum {
		t.Errorf("histogram_sum(%s) = %g in Prometheus, %g on /metrics: more than 0.1%% apart", sel, s, sum)
	}
	t.Logf("%s: count %d in both, sum %g in Prometheus, %g on /metrics (%.2g apart)", sel, count, s, sum, math.Abs(s-sum)/sum)
}

// promValue is the value of the one sample expr gives, NaN for none.
func promValue(t *testing.T, prom *e2e.Prometheus, expr string) float64 {
	t.Helper()
	s := prom.Query(expr)
	if len(s) != 1 {
		return math.NaN()
	}
	v, _ := strconv.ParseFloat(fmt.Sprint(s[0].Value[1]), 64)
	return v
}
