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
// per band, and its per-token ITL histogram.
//
// A band's children are made when the model's load first reaches it,
// with those of every band under it: a model never run past 64 streams
// exports no series for the bands above 33-64. (A series that appears
// with its first observations loses them to rate() until its next scrape;
// the bands below the highest reached exist from then on.) The per-token
// histogram is made at its first observation: only upstreams that report
// tokens per event have one. The observing side reads a count and an
// array that only grows: no lookup, no lock and no allocation per gap.
type loadObservers struct {
	m               *Metrics
	model, endpoint string
	made            atomic.Int32 // bands whose children exist: 0..loadBands
	itl, ttft       [loadBands]prometheus.Observer
	perTokenMade    atomic.Bool
	perToken        prometheus.Observer
	mu              sync.Mutex // held to make children
}

// at returns the ITL and TTFT observers of band i, making them first when
// the load has not been there.
func (o *loadObservers) at(i int) (itl, ttft prometheus.Observer) {
	if int(o.made.Load()) <= i {
		o.make(i)
	}
	return o.itl[i], o.ttft[i]
}

// make makes the children of every band up to i.
func (o *loadObservers) make(i int) {
	o.mu.Lock()
	defer o.mu.Unlock()
	made := int(o.made.Load())
	upTo := i + 1
	for b := made; b < upTo; b++ {
		band := loadBandLabels[b]
		o.itl[b] = o.m.itlByLoad.WithLabelValues(o.model, o.endpoint, band)
		o.ttft[b] = o.m.ttftByLoad.WithLabelValues(o.model, o.endpoint, band)
		o.m.loadUpper.WithLabelValues(band).Set(loadBandUpper(b))
	}
	if upTo > made {
		o.made.Store(int32(upTo))
	}
}

// perTokenObserver returns the per-token ITL observer, made at the first
// call.
func (o *loadObservers) perTokenObserver() prometheus.Observer {
	if !o.perTokenMade.Load() {
		o.mu.Lock()
		if !o.perTokenMade.Load() {
			o.perToken = o.m.itlPerToken.WithLabelValues(o.model, o.endpoint)
			o.perTokenMade.Store(true)
		}
		o.mu.Unlock()
	}
	return o.perToken
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
		o = &loadObservers{m: m, model: model, endpoint: endpoint}
		m.load.observers[key] = o
	}
	return ml, o
}

// loadCollectors builds the by-load histograms, each with every objective
// of its clock's kind as a bound, and the bands' bounds.
func (m *Metrics) loadCollectors(r *registrar, slos SLOs) {
	m.load = loadState{models: map[string]*modelLoad{}, observers: map[Labels]*loadObservers{}}
	m.itlByLoad = r.breakdown("inter_token_latency_by_load_seconds",
		"Inter-token latency by the load when the gap ended (a band of the model's streams in flight "+
			"through this proxy), with the same gaps and clock as itlproxy_inter_token_latency_seconds.",
		withBounds(breakdownGapBuckets, slos.bounds(SLOITL)...), "model", "endpoint", "load")
	m.ttftByLoad = r.breakdown("time_to_first_token_by_load_seconds",
		"Time to first token by the load when the stream started (a band of the model's streams in "+
			"flight through this proxy), with the same clock as itlproxy_time_to_first_token_seconds.",
		withBounds(breakdownTTFTBuckets, slos.bounds(SLOTTFT)...), "model", "endpoint", "load")
	m.loadUpper = r.gauge("load_band_upper_streams",
		"Each load band's upper bound in streams (+Inf for 513+), a constant exported once some "+
			"model's load reaches the band.",
		"load")
}
