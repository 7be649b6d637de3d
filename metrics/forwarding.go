package metrics

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// forwardingBuckets: what the proxy adds to a token on its way, and how
// long the client's connection takes it: from microseconds (a write into
// an idle socket) to a second (a client that stopped reading), with the
// 5 ms the proxy's own delay is alerted at. The native buckets resolve
// every microsecond range; these are for servers that scrape classic ones.
var forwardingBuckets = []float64{0.00001, 0.0001, 0.001, 0.005, 0.1, 1}

// requestForwardBuckets: the request leg, from a pooled connection's
// microseconds to an upload or a slow dial.
var requestForwardBuckets = []float64{0.0001, 0.001, 0.005, 0.1, 1, 10}

// forwardingCollectors builds the histograms of what the proxy adds: each
// token event's time inside the proxy, each write of a stream's bytes to
// its client, and each request's way to the upstream. Labelled by endpoint only, so that
// they cost a few series per process.
func (m *Metrics) forwardingCollectors(r *registrar) {
	m.eventDelay = r.breakdown("event_delay_seconds",
		"Time each token-bearing event spent inside the proxy, from the bytes of the read that completed it "+
			"being available to the proxy to the start of their write to the client.",
		forwardingBuckets, "endpoint")
	m.clientWrite = r.breakdown("client_write_seconds",
		"Time each write of a stream's bytes to its client took, from its start to its return: a client "+
			"that reads slowly, or a full socket, makes it long.",
		forwardingBuckets, "endpoint")
	m.requestForward = r.breakdown("request_forward_seconds",
		"Time from t0 to the request written to the upstream: reading and inspecting it, routing, and "+
			"the connection to the upstream.",
		requestForwardBuckets, "endpoint")
	r.register(newSchedulerCollector(r.nativeBreakdowns))
}

// RequestForwarded records a request written to the upstream d after its
// t0.
func (m *Metrics) RequestForwarded(endpoint string, d time.Duration) {
	m.requestForward.WithLabelValues(endpoint).Observe(d.Seconds())
}

// forwarding is one stream's observers of its bytes' way through the
// proxy, resolved when it starts.
type forwarding struct {
	delay, write prometheus.Observer
	// writeWait sums the stream's writes to the client.
	writeWait time.Duration
}

// OwnDelay records the own delay of one token-bearing event: from the
// moment the bytes of the read that completed it were available to the
// proxy to the start of their write to the client.
func (s *Stream) OwnDelay(d time.Duration) { s.fwd.delay.Observe(d.Seconds()) }

// AddWriteWait adds to the stream's total writes observed once elsewhere
// (WriteObserver): a Realtime response's, whose writes are its
// connection's.
func (s *Stream) AddWriteWait(d time.Duration) { s.fwd.writeWait += d }

// WriteWait is the stream's writes to its client, each from its start to
// its return, summed.
func (s *Stream) WriteWait() time.Duration { return s.fwd.writeWait }

// WriteObserver observes the writes to a client that no one stream owns:
// a Realtime connection's, each of which may carry several responses'
// events and is observed once.
type WriteObserver struct{ o prometheus.Observer }

// WriteObserver returns the observer of client writes under endpoint,
// resolved once.
func (m *Metrics) WriteObserver(endpoint string) WriteObserver {
	return WriteObserver{o: m.clientWrite.WithLabelValues(endpoint)}
}

// Wrote records one write to the client, from its start to its return.
func (w WriteObserver) Wrote(d time.Duration) { w.o.Observe(d.Seconds()) }
