package admin

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/itlproxy/itlproxy/metrics"
	"github.com/itlproxy/itlproxy/metrics/scrape"
)

// The live page's rates and quantiles over the last minute and the last
// five come from the proxy's own registry: every historyEvery, the
// counters and histograms of each model are read and kept for
// historyKeep; a window's figure is the difference between now and the
// sample at the window's start, as PromQL's rate and increase are.
const (
	historyEvery = 5 * time.Second
	historyKeep  = 5*time.Minute + historyEvery
)

// modelSample is what the registry says of one model at one instant.
type modelSample struct {
	requests, tokens  float64
	inFlight          float64
	met, missed, good float64
	ttft, itl         scrape.Buckets
}

// sample is the registry at one instant, per model, and per model on
// each upstream endpoint when the proxy balances (upstreams.go).
type sample struct {
	at        time.Time
	models    map[string]modelSample
	upstreams map[upstreamKey]upstreamSample
}

// takeSample reads g once.
func takeSample(g prometheus.Gatherer, at time.Time) (sample, error) {
	fs, err := scrape.Gather(g)
	if err != nil {
		return sample{}, err
	}
	s := sample{at: at, models: map[string]modelSample{}, upstreams: takeUpstreams(fs)}
	for _, m := range fs.Series("itlproxy_requests_total") {
		name := scrape.Label(m, "model")
		if _, done := s.models[name]; done {
			continue
		}
		s.models[name] = modelSample{
			requests: fs.Value("itlproxy_requests_total", "model", name),
			tokens:   fs.Value("itlproxy_output_tokens_total", "model", name),
			inFlight: fs.Value("itlproxy_active_streams", "model", name),
			met:      fs.Value("itlproxy_streams_judged_total", "model", name, "verdict", metrics.VerdictMet),
			missed:   fs.Value("itlproxy_streams_judged_total", "model", name, "verdict", metrics.VerdictMissed),
			good:     fs.Value("itlproxy_goodput_tokens_total", "model", name),
			ttft:     fs.Buckets("itlproxy_time_to_first_token_seconds", "model", name),
			itl:      fs.Buckets("itlproxy_inter_token_latency_seconds", "model", name),
		}
	}
	return s, nil
}

// history is the samples of the last historyKeep, oldest first.
type history struct {
	g       prometheus.Gatherer
	mu      sync.Mutex
	samples []sample
}

// run samples every historyEvery until ctx is canceled.
func (h *history) run(ctx context.Context) {
	t := time.NewTicker(historyEvery)
	defer t.Stop()
	for {
		h.add(time.Now())
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (h *history) add(now time.Time) {
	s, err := takeSample(h.g, now)
	if err != nil {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.samples = slices.DeleteFunc(append(h.samples, s), func(o sample) bool { return now.Sub(o.at) > historyKeep })
}

// since returns the oldest sample no older than d before now, or false
// before there is one.
func (h *history) since(now time.Time, d time.Duration) (sample, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, s := range h.samples {
		if now.Sub(s.at) <= d+historyEvery/2 && now.After(s.at) {
			return s, true
		}
	}
	return sample{}, false
}

// window is one model's figures over a window: rates per second, and
// quantiles in seconds (NaN without observations).
type window struct {
	span                     time.Duration // what the figures cover, up to the window
	requestRate, tokenRate   float64
	ttftP50, ttftP99         float64
	itlP50, itlP99           float64
	judged, attainment, good float64 // attainment: met/judged; good: goodput tokens/s
}

// windowOf computes a model's window from the sample at its start to now.
func windowOf(then, now modelSample, span time.Duration) window {
	sec := span.Seconds()
	w := window{span: span, requestRate: (now.requests - then.requests) / sec, tokenRate: (now.tokens - then.tokens) / sec}
	ttft, itl := minus(now.ttft, then.ttft), minus(now.itl, then.itl)
	w.ttftP50, w.ttftP99 = scrape.HistogramQuantile(0.5, ttft), scrape.HistogramQuantile(0.99, ttft)
	w.itlP50, w.itlP99 = scrape.HistogramQuantile(0.5, itl), scrape.HistogramQuantile(0.99, itl)
	met := now.met - then.met
	w.judged = met + now.missed - then.missed
	if w.judged > 0 {
		w.attainment = met / w.judged
	}
	w.good = (now.good - then.good) / sec
	return w
}

// minus returns the observations in a that are not in b, an earlier read
// of the same histograms.
func minus(a, b scrape.Buckets) scrape.Buckets {
	if b.Count == 0 {
		return a
	}
	d := scrape.Buckets{Count: a.Count - min(a.Count, b.Count), Sum: a.Sum - b.Sum}
	if slices.Equal(a.Bounds, b.Bounds) {
		d.Bounds = a.Bounds
		d.Cumulative = make([]uint64, len(a.Cumulative))
		for i := range a.Cumulative {
			d.Cumulative[i] = a.Cumulative[i] - min(a.Cumulative[i], b.Cumulative[i])
		}
	}
	return d
}
