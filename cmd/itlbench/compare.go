package main

import (
	"context"
	"fmt"
	"io"
	"math"
	"net/http"
	"slices"
	"text/tabwriter"
	"time"

	"github.com/itlproxy/itlproxy/metrics/scrape"
)

// The itlproxy histograms compared, and the client's distribution each
// matches.
var comparedMetrics = []struct {
	name, metric string
	client       func(result) dist
}{
	{"TTFT", "itlproxy_time_to_first_token_seconds", func(r result) dist { return r.ttft }},
	{"ITL", "itlproxy_inter_token_latency_seconds", func(r result) dist { return r.itl }},
	{"TPOT", "itlproxy_time_per_output_token_seconds", func(r result) dist { return r.tpot }},
}

const (
	requestsMetric  = "itlproxy_requests_total"
	buildInfoMetric = "itlproxy_build_info"
)

// minus returns after - before: what was observed between two scrapes.
func minus(after, before scrape.Buckets) (scrape.Buckets, error) {
	if after.Count < before.Count {
		return scrape.Buckets{}, fmt.Errorf("counts went down between the scrapes: did itlproxy restart?")
	}
	d := scrape.Buckets{Count: after.Count - before.Count, Sum: after.Sum - before.Sum}
	if before.Count == 0 && before.Bounds == nil {
		d.Bounds, d.Cumulative = after.Bounds, slices.Clone(after.Cumulative)
		return d, nil
	}
	if slices.Equal(after.Bounds, before.Bounds) {
		d.Bounds = after.Bounds
		for i := range after.Cumulative {
			d.Cumulative = append(d.Cumulative, after.Cumulative[i]-before.Cumulative[i])
		}
	}
	return d, nil
}

// quantile estimates h's q-quantile as histogram_quantile does. ok is
// false without samples, without buckets, or when the rank falls in the
// +Inf bucket, where histogram_quantile gives only the last finite bound.
func quantile(h scrape.Buckets, q float64) (v float64, ok bool) {
	if h.Count == 0 || h.Bounds == nil || h.BeyondBounds(q) {
		return 0, false
	}
	return scrape.HistogramQuantile(q, h), true
}

// inBuckets counts d's samples in classic buckets with the given upper
// bounds (seconds), as the proxy would have. A sample in a histogram
// bucket that straddles a bound is split in proportion, which can only
// matter within 0.8% of the bound.
func (d dist) inBuckets(bounds []float64) scrape.Buckets {
	h := scrape.Buckets{Count: d.count, Sum: d.sum.Seconds()}
	if bounds == nil || d.count == 0 {
		return h
	}
	h.Bounds = bounds
	i, below := 0, 0.0 // the next histogram bucket, and the samples under it
	for _, b := range bounds {
		limit := b * 1e9 // samples <= limit nanoseconds
		for ; i < len(d.buckets); i++ {
			low, width := bucketRange(i)
			if float64(low+width-1) > limit {
				break
			}
			below += float64(d.buckets[i])
		}
		partial := 0.0
		if i < len(d.buckets) {
			low, width := bucketRange(i)
			if f := (limit - float64(low) + 1) / float64(width); f > 0 {
				partial = f * float64(d.buckets[i])
			}
		}
		h.Cumulative = append(h.Cumulative, uint64(math.Round(below+partial)))
	}
	return h
}

// proxyScrape is one scrape of itlproxy's /metrics, for one endpoint:
// each compared histogram and the request count, per model label and
// summed over all ("").
type proxyScrape struct {
	hists    map[string]map[string]*scrape.Buckets // metric, model
	requests map[string]float64                    // model
	// own is each of ownMetrics, of the endpoint where it has the label;
	// ownExported is false when the scrape had none of them.
	own         map[string]scrape.Buckets
	ownExported bool
	// capacity is what itlproxy's capacity rule reads (proxycapacity.go).
	capacity capacityScrape
}

func scrapeProxy(ctx context.Context, url, endpoint string) (proxyScrape, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return proxyScrape{}, err
	}
	// The classic text format: it carries the classic buckets this
	// comparison reads.
	req.Header.Set("Accept", "text/plain;version=0.0.4")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return proxyScrape{}, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return proxyScrape{}, fmt.Errorf("GET %s: %s", redactedURL(url), resp.Status)
	}
	families, err := scrape.Parse(resp.Body)
	if err != nil {
		return proxyScrape{}, fmt.Errorf("GET %s: %v", redactedURL(url), err)
	}
	// An itlproxy that has measured nothing yet has no histogram series,
	// but its build info: the comparison starts from nothing.
	if families[comparedMetrics[0].metric] == nil && families[buildInfoMetric] == nil {
		return proxyScrape{}, fmt.Errorf("GET %s: neither %s nor %s: is it itlproxy's admin /metrics?", redactedURL(url),
			comparedMetrics[0].metric, buildInfoMetric)
	}
	s := proxyScrape{hists: map[string]map[string]*scrape.Buckets{}, requests: map[string]float64{}}
	for _, c := range comparedMetrics {
		byModel := map[string]*scrape.Buckets{"": {}}
		for _, m := range families.Series(c.metric, "endpoint", endpoint) {
			name := scrape.Label(m, "model")
			if byModel[name] == nil {
				byModel[name] = &scrape.Buckets{}
			}
			byModel[name].Add(m.GetHistogram())
			byModel[""].Add(m.GetHistogram())
		}
		s.hists[c.metric] = byModel
	}
	for _, m := range families.Series(requestsMetric, "endpoint", endpoint) {
		s.requests[scrape.Label(m, "model")] += m.GetCounter().GetValue()
		s.requests[""] += m.GetCounter().GetValue()
	}
	s.own, s.ownExported = ownHistograms(families, endpoint)
	s.capacity = capacityScrapeOf(families)
	return s, nil
}

// hist returns the summed histogram of metric for model ("" for all).
func (s proxyScrape) hist(metric, model string) scrape.Buckets {
	if h := s.hists[metric][model]; h != nil {
		return *h
	}
	return scrape.Buckets{}
}

// settle scrapes until itlproxy has recorded at least want more requests
// than in before (it records a request as its handler returns, which can
// be just after the client read the end), for up to limit.
func settle(ctx context.Context, url, endpoint string, before proxyScrape, want int64, limit time.Duration) (proxyScrape, error) {
	deadline := time.Now().Add(limit)
	for {
		after, err := scrapeProxy(ctx, url, endpoint)
		if err != nil || after.requests[""]-before.requests[""] >= float64(want) || time.Now().After(deadline) {
			return after, err
		}
		select {
		case <-ctx.Done():
			return after, nil
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// comparison is the proxy's view of the run next to the client's.
type comparison struct {
	MetricsURL string       `json:"metrics_url"`
	Method     string       `json:"method"`
	Note       string       `json:"note,omitempty"`
	Sets       []compareSet `json:"sets"`
	// Own is what itlproxy measured of itself over the run: what it added
	// to each event and request (absent from an itlproxy without those
	// metrics).
	Own *ownAccount `json:"own,omitempty"`
}

// compareSet compares one model (or "all": every model label of the
// endpoint on the proxy, every model on the client).
type compareSet struct {
	Model string   `json:"model"`
	TTFT  sidePair `json:"ttft"`
	ITL   sidePair `json:"itl"`
	TPOT  sidePair `json:"tpot"`
}

type sidePair struct {
	Client side `json:"client"`
	// ClientInProxyBuckets is the client's samples estimated the way the
	// proxy's are: counted in the proxy's buckets and interpolated, so
	// that the quantiles compare like with like. Its count, sum and mean
	// are the client's.
	ClientInProxyBuckets side `json:"client_in_proxy_buckets"`
	Proxy                side `json:"proxy"`
	// Diff is proxy - client; its quantiles are proxy -
	// client_in_proxy_buckets, null where either has none.
	Diff side `json:"proxy_minus_client"`
}

// side is one side's numbers, in seconds; null quantiles could not be
// computed (no samples, or beyond the proxy's last finite bucket).
type side struct {
	Count int64    `json:"count"`
	Sum   float64  `json:"sum"`
	Mean  *float64 `json:"mean"`
	P50   *float64 `json:"p50"`
	P90   *float64 `json:"p90"`
	P99   *float64 `json:"p99"`
	P999  *float64 `json:"p99_9"`
}

func (s *side) quantiles() []**float64 { return []**float64{&s.P50, &s.P90, &s.P99, &s.P999} }

func ptr(v float64) *float64 { return &v }

func clientSide(d dist) side {
	s := side{Count: int64(d.count), Sum: d.sum.Seconds()}
	if d.count > 0 {
		s.Mean = ptr(d.sum.Seconds() / float64(d.count))
		for i, q := range s.quantiles() {
			*q = ptr(d.quantile(quantiles[i].q).Seconds())
		}
	}
	return s
}

func proxySide(h scrape.Buckets) side {
	s := side{Count: int64(h.Count), Sum: h.Sum}
	if h.Count > 0 {
		s.Mean = ptr(h.Sum / float64(h.Count))
		for i, q := range s.quantiles() {
			if v, ok := quantile(h, quantiles[i].q); ok {
				*q = ptr(v)
			}
		}
	}
	return s
}

func diff(a, b *float64) *float64 {
	if a == nil || b == nil {
		return nil
	}
	return ptr(*a - *b)
}

func pair(client dist, proxy scrape.Buckets) sidePair {
	p := sidePair{Client: clientSide(client), Proxy: proxySide(proxy)}
	p.ClientInProxyBuckets = proxySide(client.inBuckets(proxy.Bounds))
	p.ClientInProxyBuckets.Sum, p.ClientInProxyBuckets.Mean = p.Client.Sum, p.Client.Mean
	p.Diff = side{Count: p.Proxy.Count - p.Client.Count, Sum: p.Proxy.Sum - p.Client.Sum, Mean: diff(p.Proxy.Mean, p.Client.Mean)}
	cq, pq, dq := p.ClientInProxyBuckets.quantiles(), p.Proxy.quantiles(), p.Diff.quantiles()
	for i := range dq {
		*dq[i] = diff(*pq[i], *cq[i])
	}
	return p
}

const compareMethod = "proxy numbers are this run's only: the scrape after the run minus the scrape before. " +
	"Its quantiles are interpolated within its classic buckets (as histogram_quantile does); " +
	"'client*' puts the client's samples in the same buckets and interpolates them the same way, and proxy−client compares quantiles with that"

// compare builds the comparison of the client's results with the proxy's
// between two scrapes.
func compare(url, endpoint string, before, after proxyScrape, all result, perModel []result) (*comparison, error) {
	if after.requests[""] == 0 {
		return nil, fmt.Errorf("itlproxy at %s has measured nothing on %s yet: did the run's requests go through it (-url)?",
			redactedURL(url), endpoint)
	}
	own, err := ownAccountOf(endpoint, before, after)
	if err != nil {
		return nil, err
	}
	c := &comparison{MetricsURL: redactedURL(url), Method: compareMethod, Own: own}
	sets := []result{all}
	if len(perModel) > 1 {
		sets = append(sets, perModel...)
	}
	for _, r := range sets {
		model := r.model
		if model == "all" {
			model = ""
		}
		cs := compareSet{Model: r.model}
		for i, m := range comparedMetrics {
			d, err := minus(after.hist(m.metric, model), before.hist(m.metric, model))
			if err != nil {
				return nil, err
			}
			p := pair(m.client(r), d)
			switch i {
			case 0:
				cs.TTFT = p
			case 1:
				cs.ITL = p
			case 2:
				cs.TPOT = p
			}
		}
		c.Sets = append(c.Sets, cs)
	}
	return c, nil
}

func (c *comparison) writeText(w io.Writer) error {
	if _, err := fmt.Fprintf(w, "\nitlproxy's view (%s): %s.\n", c.MetricsURL, compareMethod); err != nil {
		return err
	}
	if c.Note != "" {
		fmt.Fprintf(w, "note: %s\n", c.Note)
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	for _, set := range c.Sets {
		fmt.Fprintf(tw, "%s\tclient\tclient*\tproxy\tproxy−client\t\t\n", set.Model)
		for i, p := range []sidePair{set.TTFT, set.ITL, set.TPOT} {
			name := comparedMetrics[i].name
			fmt.Fprintf(tw, "%s count\t%d\t\t%d\t%+d\t\t\n", name, p.Client.Count, p.Proxy.Count, p.Diff.Count)
			fmt.Fprintf(tw, "%s sum\t%s\t\t%s\t%s\t%s\t\n", name, fmtSeconds(&p.Client.Sum), fmtSeconds(&p.Proxy.Sum),
				fmtSigned(&p.Diff.Sum), percentOf(&p.Diff.Sum, &p.Client.Sum))
			fmt.Fprintf(tw, "%s mean\t%s\t\t%s\t%s\t%s\t\n", name, fmtSeconds(p.Client.Mean), fmtSeconds(p.Proxy.Mean),
				fmtSigned(p.Diff.Mean), percentOf(p.Diff.Mean, p.Client.Mean))
			cq, bq, pq, dq := p.Client.quantiles(), p.ClientInProxyBuckets.quantiles(), p.Proxy.quantiles(), p.Diff.quantiles()
			for j, q := range quantiles {
				fmt.Fprintf(tw, "%s %s\t%s\t%s\t%s\t%s\t%s\t\n", name, q.name, fmtSeconds(*cq[j]), fmtSeconds(*bq[j]),
					fmtSeconds(*pq[j]), fmtSigned(*dq[j]), percentOf(*dq[j], *bq[j]))
			}
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if c.Own != nil {
		return c.Own.writeText(w)
	}
	return nil
}

func fmtSeconds(v *float64) string {
	if v == nil {
		return "-"
	}
	return fmtDuration(time.Duration(*v * 1e9))
}

func fmtSigned(v *float64) string {
	if v == nil {
		return "-"
	}
	if *v < 0 {
		return "-" + fmtDuration(time.Duration(-*v*1e9))
	}
	return "+" + fmtDuration(time.Duration(*v*1e9))
}

func percentOf(d, base *float64) string {
	if d == nil || base == nil || *base == 0 {
		return ""
	}
	return fmt.Sprintf("(%+.1f%%)", 100**d / *base)
}
