package metrics

import (
	"math"
	"math/bits"
	"sync"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
)

// Load bands: the number of streams of a model in flight through this
// proxy, the stream itself included, by powers of two. ITL grows with the
// sequences sharing a decode step, so ITL by band is the latency the
// engine gives at each load: where p99 crosses the objective is the
// model's capacity.
const loadBands = 11

// loadBandLabels are the load label values; band i holds up to 2^i
// streams (the last, every load past 512).
var loadBandLabels = [loadBands]string{"1", "2", "3-4", "5-8", "9-16", "17-32", "33-64", "65-128", "129-256", "257-512", "513+"}

// loadBand returns the band of n streams in flight (n >= 1; lower counts,
// which only a race with a stream's end can give, fall in the first).
func loadBand(n int64) int {
	if n <= 1 {
		return 0
	}
	return min(bits.Len64(uint64(n-1)), loadBands-1)
}

// loadBandUpper returns band i's upper bound: 2^i, +Inf for the last.
func loadBandUpper(i int) float64 {
	if i == loadBands-1 {
		return math.Inf(1)
	}
	return float64(int(1) << i)
}

// modelLoad is one model's streams in flight, over every endpoint: the
// count the load bands are taken from.
type modelLoad struct{ streams atomic.Int64 }

// loadObservers are one (model, endpoint)'s by-load histograms, a child
// per band, resolved once so that a gap's observation does no label
// lookup.
type loadObservers struct {
	itl, ttft [loadBands]prometheus.Observer
}

// loadState holds the per-model counts and the resolved observers.
type loadState struct {
	mu        sync.Mutex
	models    map[string]*modelLoad
	observers map[Labels]*loadObservers
}

// loadOf returns the in-flight count of a model label value, over every
// endpoint, and the by-load histograms of that model and endpoint, in one
// look-up when the stream starts.
func (m *Metrics) loadOf(model, endpoint string) (*modelLoad, *loadObservers) {
	key := Labels{Model: model, Endpoint: endpoint}
	m.load.mu.Lock()
	defer m.load.mu.Unlock()
	ml := m.load.models[model]
	if ml == nil {
		ml = new(modelLoad)
		m.load.models[model] = ml
	}
	o := m.load.observers[key]
	if o == nil {
		o = new(loadObservers)
		for i, band := range loadBandLabels {
			o.itl[i] = m.itlByLoad.WithLabelValues(model, endpoint, band)
			o.ttft[i] = m.ttftByLoad.WithLabelValues(model, endpoint, band)
		}
		m.load.observers[key] = o
	}
	return ml, o
}

// loadCollectors builds the by-load histograms and the bands' bounds.
func (m *Metrics) loadCollectors(r *registrar, slos SLOs, itlBounds []float64) {
	m.load = loadState{models: map[string]*modelLoad{}, observers: map[Labels]*loadObservers{}}
	m.itlByLoad = r.histogram("inter_token_latency_by_load_seconds",
		"Inter-token latency by the load when the gap ended: load is the band (1, 2, 3-4, 5-8, ..., "+
			"257-512, 513+) of the number of streams of the model in flight through this proxy, the "+
			"stream itself included, as itlproxy_active_streams counts them. Same gaps, clock and "+
			"buckets as itlproxy_inter_token_latency_seconds.",
		withBounds(gapBuckets, itlBounds...), "model", "endpoint", "load")
	m.ttftByLoad = r.histogram("time_to_first_token_by_load_seconds",
		"Time to first token by the load when the stream started: load is the band of the number of "+
			"streams of the model in flight through this proxy then, the stream itself included. Same "+
			"clock and buckets as itlproxy_time_to_first_token_seconds.",
		withBounds(ttftBuckets, slos.bounds(SLOTTFT)...), "model", "endpoint", "load")
	upper := r.gauge("load_band_upper_streams",
		"Each load band's upper bound in streams (+Inf for 513+): a constant, so that rules can turn a "+
			"band into a number of streams.",
		"load")
	for i, band := range loadBandLabels {
		upper.WithLabelValues(band).Set(loadBandUpper(i))
	}
}
