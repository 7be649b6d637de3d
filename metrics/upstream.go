package metrics

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"
)

// Upstream endpoints: when the proxy balances over several servers (a
// list of URLs, or the addresses a name resolves to), each stream is
// counted on the endpoint that served it, its upstream label the
// endpoint's address and port. An endpoint's series go once it has left
// the set and its last stream has ended.

// upstreamCollectors builds the per-endpoint families and the set's own.
func (m *Metrics) upstreamCollectors(r *registrar, slos SLOs) {
	m.up.inFlight = r.gauge("upstream_streams_in_flight",
		"Streams in flight on each upstream endpoint the proxy balances over, by model.",
		"model", "upstream")
	m.up.ttft = r.breakdown("upstream_time_to_first_token_seconds",
		"Time to first token of each stream, from t0, by the upstream endpoint that served it.",
		withBounds(upstreamTTFTBuckets, slos.bounds(SLOTTFT)...), "model", "upstream")
	m.up.itl = r.breakdown("upstream_inter_token_latency_seconds",
		"Inter-token latency of each gap, by the upstream endpoint that served the stream.",
		withBounds(upstreamGapBuckets, slos.bounds(SLOITL)...), "model", "upstream")
	m.up.streams = r.counter("upstream_streams_total",
		"Streams ended, by the upstream endpoint that served them and by outcome.",
		"model", "upstream", "outcome")
	m.up.endpoints = r.gauge("upstream_endpoints",
		"Upstream endpoints the proxy balances over now.")
	m.up.resolveFailures = r.counter("upstream_resolve_failures_total",
		"Resolutions of the upstream's name that failed, the endpoints kept as they were.")
	m.up.ejections = r.counter("upstream_ejections_total",
		"Times an upstream endpoint refused a connection and was set aside for a while.",
		"upstream")
	m.up.state = map[string]*upstreamState{}
	m.up.loads = map[Labels]*modelLoad{}
	m.up.present = map[string]bool{}
}

// upstreams are the per-endpoint collectors and what is known of each
// endpoint label.
type upstreams struct {
	inFlight        *prometheus.GaugeVec
	ttft, itl       *prometheus.HistogramVec
	streams         *prometheus.CounterVec
	endpoints       *prometheus.GaugeVec
	resolveFailures *prometheus.CounterVec
	ejections       *prometheus.CounterVec
	mu              sync.Mutex
	state           map[string]*upstreamState // by upstream label, while it has series
	loads           map[Labels]*modelLoad     // by (model, upstream label)
	present         map[string]bool           // the labels of the set now
}

// upstreamState is one endpoint label's streams in flight (over every
// model), and whether the endpoint has left the set: a label has a state
// while it has series, and the series of a label that is gone go with its
// last stream.
type upstreamState struct {
	streams int
	gone    bool
}

// streamUpstream is a stream's endpoint: its label and its series.
type streamUpstream struct {
	label     string
	ttft, itl prometheus.Observer
	inFlight  prometheus.Gauge
}

// SetUpstream counts the stream on the upstream endpoint label sends it
// to (call it again when a request is retried on another): its TTFT and
// gaps are observed on the endpoint's series too, its exemplars name it,
// and its load band is the endpoint's streams of the model in flight, so
// that the load bands and the capacity describe a model server.
func (s *Stream) SetUpstream(label string) {
	m, model := s.m, s.labels.Model
	if s.up != nil {
		s.leaveUpstream()
	}
	s.ids.Upstream = label
	s.gen = nil // resolved again, for label
	m.up.mu.Lock()
	// The series are made with the lock held, so that an endpoint
	// forgotten meanwhile cannot delete them under the stream.
	st := m.up.stateOf(label)
	st.streams++
	s.up = &streamUpstream{
		label:    label,
		ttft:     m.up.ttft.WithLabelValues(model, label),
		itl:      m.up.itl.WithLabelValues(model, label),
		inFlight: m.up.inFlight.WithLabelValues(model, label),
	}
	s.up.inFlight.Inc()
	key := Labels{Model: model, Endpoint: label}
	load := m.up.loads[key]
	if load == nil {
		load = new(modelLoad)
		m.up.loads[key] = load
	}
	m.up.mu.Unlock()
	s.load.streams.Add(-1)
	s.load = load
	s.ttftBand = loadBand(load.streams.Add(1))
}

// stateOf returns label's state, made for a label with no series yet:
// gone when the label has already left the set (a stream sent to it just
// before, or a long-lived connection's next response), so that what it
// counts goes with its last stream. u.mu is held.
func (u *upstreams) stateOf(label string) *upstreamState {
	st := u.state[label]
	if st == nil {
		st = &upstreamState{gone: label != upstreamOther && !u.present[label]}
		u.state[label] = st
	}
	return st
}

// leaveUpstream ends the stream's count on its endpoint; the endpoint's
// series go when it has left the set and this was its last stream.
func (s *Stream) leaveUpstream() {
	m := s.m
	m.up.mu.Lock()
	defer m.up.mu.Unlock()
	s.up.inFlight.Dec()
	st := m.up.state[s.up.label]
	st.streams--
	if st.gone && st.streams == 0 {
		m.forgetUpstream(s.up.label)
	}
}

// UpstreamsChanged records the set of endpoints the proxy balances over
// now, by label, and the labels of those that left it: each of those loses
// its series once its last stream has ended.
func (m *Metrics) UpstreamsChanged(labels, removed []string) {
	m.up.endpoints.WithLabelValues().Set(float64(len(labels)))
	m.up.resolveFailures.WithLabelValues() // 0 from the first set on
	m.up.mu.Lock()
	defer m.up.mu.Unlock()
	clear(m.up.present)
	for _, label := range labels {
		m.up.present[label] = true
		if st := m.up.state[label]; st != nil {
			st.gone = false // an address that came back
		}
	}
	for _, label := range removed {
		if label == "" || label == upstreamOther {
			continue
		}
		st := m.up.state[label]
		if st == nil || st.streams == 0 {
			m.forgetUpstream(label)
			continue
		}
		st.gone = true
	}
}

// upstreamOther is the label of the endpoints past the cap, never
// forgotten: others share it.
const upstreamOther = "_other"

// forgetUpstream deletes an endpoint's series. m.up.mu is held.
func (m *Metrics) forgetUpstream(label string) {
	delete(m.up.state, label)
	for key := range m.up.loads {
		if key.Endpoint == label {
			delete(m.up.loads, key)
		}
	}
	match := prometheus.Labels{"upstream": label}
	m.up.inFlight.DeletePartialMatch(match)
	m.up.ttft.DeletePartialMatch(match)
	m.up.itl.DeletePartialMatch(match)
	m.up.streams.DeletePartialMatch(match)
	m.up.ejections.DeletePartialMatch(match)
	m.genAI.forget(label)
}

// UpstreamResolveFailed counts a resolution of the upstream's name that
// failed.
func (m *Metrics) UpstreamResolveFailed() { m.up.resolveFailures.WithLabelValues().Inc() }

// UpstreamEjected counts an endpoint set aside after it refused a
// connection; one that has left the set and has no stream in flight
// (its series gone) is not counted, rather than given a series no one
// deletes.
func (m *Metrics) UpstreamEjected(label string) {
	m.up.mu.Lock()
	defer m.up.mu.Unlock()
	if !m.up.present[label] && m.up.state[label] == nil && label != upstreamOther {
		return
	}
	m.up.stateOf(label)
	m.up.ejections.WithLabelValues(label).Inc()
}
