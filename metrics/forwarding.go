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
// token event's time inside the proxy and its write to the client, and
// each request's way to the upstream. Labelled by endpoint only, so that
// they cost a few series per process.
func (m *Metrics) forwardingCollectors(r *registrar) {
	m.eventDelay = r.breakdown("event_delay_seconds",
		"Time each token-bearing event spent inside the proxy, from the upstream read that completed it "+
			"returning to the start of its write to the client.",
		forwardingBuckets, "endpoint")
	m.clientWrite = r.breakdown("client_write_seconds",
		"Time the write of each token-bearing event to the client took: a client that reads slowly, or a "+
			"full socket, makes it long.",
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

// forwarding is one stream's observers of its events' way through the
// proxy, resolved when it starts.
type forwarding struct {
	delay, write prometheus.Observer
	// writeWait sums the stream's writes to the client.
	writeWait time.Duration
}

// Forwarded records how one token-bearing event went through the proxy:
// delay from the read that completed it to its write to the client, and
// the write's own time.
func (s *Stream) Forwarded(delay, write time.Duration) {
	s.fwd.delay.Observe(delay.Seconds())
	s.fwd.write.Observe(write.Seconds())
	s.fwd.writeWait += write
}

// WriteWait is the time the stream's token-bearing events took to be
// written to the client, summed.
func (s *Stream) WriteWait() time.Duration { return s.fwd.writeWait }
