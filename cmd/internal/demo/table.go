package demo

import (
	"fmt"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/itlproxy/itlproxy/metrics"
	"github.com/itlproxy/itlproxy/metrics/scrape"
)

// snapshot is the registry /metrics serves, read once per table, so that
// the table and the scrape never disagree.
type snapshot struct{ scrape.Families }

func snapshotOf(g prometheus.Gatherer) (snapshot, error) {
	fs, err := scrape.Gather(g)
	return snapshot{fs}, err
}

// table renders the snapshot for the given models, in their order.
func (s snapshot) table(models []string, elapsed time.Duration) string {
	width := len("after 1h00m00s")
	for _, m := range models {
		width = max(width, len(m))
	}
	var b strings.Builder
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "%-*s\trequests\tstreams ok/canceled/error\ttokens/s\tTTFT p50\tp99\tITL p50\tp99\tgaps\tstalls prefill/client/upstream\tSLO met\t\n",
		width, "after "+elapsed.Round(time.Second).String())
	for _, model := range models {
		streams := func(outcome string) float64 {
			return s.Value("itlproxy_streams_total", "model", model, "outcome", outcome)
		}
		ttft := s.Buckets("itlproxy_time_to_first_token_seconds", "model", model)
		itl := s.Buckets("itlproxy_inter_token_latency_seconds", "model", model)
		stalls := func(cause string) float64 {
			return s.Value("itlproxy_stalls_total", "model", model, "cause", cause)
		}
		fmt.Fprintf(tw, "%-*s\t%.0f\t%.0f/%.0f/%.0f\t%.1f\t%s\t%s\t%s\t%s\t%d\t%.0f/%.0f/%.0f\t%s\t\n", width, model,
			s.Value("itlproxy_requests_total", "model", model),
			streams("completed"), streams("client_canceled"), streams("upstream_error")+streams("rejected"),
			s.Value("itlproxy_output_tokens_total", "model", model)/elapsed.Seconds(),
			scrape.Seconds(scrape.HistogramQuantile(0.5, ttft)), scrape.Seconds(scrape.HistogramQuantile(0.99, ttft)),
			scrape.Seconds(scrape.HistogramQuantile(0.5, itl)), scrape.Seconds(scrape.HistogramQuantile(0.99, itl)), itl.Count,
			stalls(metrics.StallPrefill), stalls(metrics.StallClient), stalls(metrics.StallUpstream),
			s.attainment(model))
	}
	_ = tw.Flush()
	b.WriteByte('\n')
	return b.String()
}

// attainment is the share of the model's judged streams that met their
// objectives, "-" before any was judged.
func (s snapshot) attainment(model string) string {
	judged := s.Value("itlproxy_streams_judged_total", "model", model)
	if judged == 0 {
		return "-"
	}
	met := s.Value("itlproxy_streams_judged_total", "model", model, "verdict", metrics.VerdictMet)
	return fmt.Sprintf("%.0f%% of %.0f", 100*met/judged, judged)
}
