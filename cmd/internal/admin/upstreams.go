package admin

import (
	"cmp"
	"fmt"
	"slices"
	"time"

	"github.com/itlproxy/itlproxy/metrics/scrape"
)

// The live page's table of upstream endpoints, when the proxy balances
// over several (a list of URLs, or a headless Service's pods): each
// model's streams on each endpoint, and their TTFT and ITL quantiles over
// the last five minutes, from the per-endpoint histograms; the figures
// the slow-endpoint alert compares, as this proxy sees them.

const (
	// upstreamWindow is the window of the table: the rules' and the
	// alert's.
	upstreamWindow = 5 * time.Minute
	// pageUpstreamRows is the most rows the table shows: two models on
	// the most endpoints with a label of their own (64 by default), with
	// the page within its size.
	pageUpstreamRows = 128
)

// upstreamKey is one model on one endpoint.
type upstreamKey struct{ model, upstream string }

// upstreamSample is what the registry says of one model on one endpoint
// at one instant.
type upstreamSample struct {
	inFlight, ended float64
	ttft, itl       scrape.Buckets
}

// takeUpstreams reads the per-endpoint families of fs: every model on
// every endpoint that has series (none when the proxy does not balance).
func takeUpstreams(fs scrape.Families) map[upstreamKey]upstreamSample {
	out := map[upstreamKey]upstreamSample{}
	for _, m := range fs.Series("itlproxy_upstream_streams_in_flight") {
		k := upstreamKey{scrape.Label(m, "model"), scrape.Label(m, "upstream")}
		labels := []string{"model", k.model, "upstream", k.upstream}
		out[k] = upstreamSample{
			inFlight: m.GetGauge().GetValue(),
			ended:    fs.Value("itlproxy_upstream_streams_total", labels...),
			ttft:     fs.Buckets("itlproxy_upstream_time_to_first_token_seconds", labels...),
			itl:      fs.Buckets("itlproxy_upstream_inter_token_latency_seconds", labels...),
		}
	}
	return out
}

// pageUpstream is one model on one endpoint, formatted.
type pageUpstream struct {
	Model, Upstream                  string
	InFlight                         float64
	Streams                          string // ended in the window
	TTFTP50, TTFTP99, ITLP50, ITLP99 string
}

// pageUpstreams is the table: its rows, by model and endpoint, the
// window's label, and how many rows past pageUpstreamRows it leaves out.
type pageUpstreams struct {
	Rows   []pageUpstream
	Window string
	More   int
}

// upstreamTable returns the table, without rows when the proxy does not
// balance.
func (s *Server) upstreamTable(now time.Time, cur sample) pageUpstreams {
	if len(cur.upstreams) == 0 {
		return pageUpstreams{}
	}
	var rows []pageUpstream
	then, ok := s.history.since(now, upstreamWindow)
	window := "the last 5 minutes"
	if ok && now.Sub(then.at) < upstreamWindow-historyEvery {
		window += fmt.Sprintf(" (%s so far)", now.Sub(then.at).Round(time.Second))
	}
	for k, u := range cur.upstreams {
		row := pageUpstream{Model: k.model, Upstream: k.upstream, InFlight: u.inFlight,
			Streams: "-", TTFTP50: "-", TTFTP99: "-", ITLP50: "-", ITLP99: "-"}
		if ok {
			// An endpoint with no sample then began since: all it has
			// counted is in the window.
			before := then.upstreams[k]
			ttft, itl := minus(u.ttft, before.ttft), minus(u.itl, before.itl)
			row.Streams = fmt.Sprint(max(0, u.ended-before.ended))
			row.TTFTP50, row.TTFTP99 = scrape.Seconds(scrape.HistogramQuantile(0.5, ttft)), scrape.Seconds(scrape.HistogramQuantile(0.99, ttft))
			row.ITLP50, row.ITLP99 = scrape.Seconds(scrape.HistogramQuantile(0.5, itl)), scrape.Seconds(scrape.HistogramQuantile(0.99, itl))
		}
		rows = append(rows, row)
	}
	slices.SortFunc(rows, func(a, b pageUpstream) int {
		return cmp.Or(cmp.Compare(a.Model, b.Model), cmp.Compare(a.Upstream, b.Upstream))
	})
	more := max(0, len(rows)-pageUpstreamRows)
	return pageUpstreams{Rows: rows[:len(rows)-more], Window: window, More: more}
}
