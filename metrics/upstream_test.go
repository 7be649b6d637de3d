package metrics

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/itlproxy/itlproxy/metrics/scrape"
)

// upstreamSeries is how many series of the per-endpoint families carry
// upstream label.
func upstreamSeries(t *testing.T, reg *prometheus.Registry, label string) int {
	t.Helper()
	fs, err := scrape.Gather(reg)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, name := range []string{"itlproxy_upstream_streams_in_flight", "itlproxy_upstream_time_to_first_token_seconds",
		"itlproxy_upstream_inter_token_latency_seconds", "itlproxy_upstream_streams_total", "itlproxy_upstream_ejections_total"} {
		for _, s := range fs[name].GetMetric() {
			for _, l := range s.GetLabel() {
				if l.GetName() == "upstream" && l.GetValue() == label {
					n++
				}
			}
		}
	}
	return n
}

func endStream(s *Stream) {
	s.End(StreamEnd{Outcome: OutcomeCompleted, TPOT: -1, OutputTokens: -1, InputTokens: -1})
}

// An endpoint's series stay while it is in the set, and go once it has
// left and its last stream has ended, however that stream began: sent
// before the endpoint left, or after (a stream answered to a request sent
// just before, a long-lived connection's next response); so does a
// refusal counted after it left. An endpoint that comes back keeps its
// series.
func TestUpstreamSeriesGoWithTheEndpoint(t *testing.T) {
	m, reg := newTestMetrics(t, Options{MaxModels: 4, Version: "test"})
	const a, b = "10.0.0.1:80", "10.0.0.2:80"
	l := m.RequestLabels("m", "chat_completions", "", "")
	m.UpstreamsChanged([]string{a, b}, nil)

	before := m.StartStream(l, IDs{})
	before.SetUpstream(a)
	before.FirstToken(time.Millisecond)
	m.UpstreamEjected(a)
	m.UpstreamsChanged([]string{b}, []string{a}) // a leaves with a stream in flight
	if n := upstreamSeries(t, reg, a); n == 0 {
		t.Fatal("the series of an endpoint that left went while its stream was in flight")
	}
	endStream(before)
	if n := upstreamSeries(t, reg, a); n != 0 {
		t.Errorf("%d series of %s after it left and its last stream ended", n, a)
	}

	after := m.StartStream(l, IDs{})
	after.SetUpstream(a) // begun after a left
	after.FirstToken(time.Millisecond)
	endStream(after)
	m.UpstreamEjected(a)
	m.UpstreamsChanged([]string{b}, nil)
	if n := upstreamSeries(t, reg, a); n != 0 {
		t.Errorf("%d series of %s from a stream and a refusal after it left", n, a)
	}

	s := m.StartStream(l, IDs{})
	s.SetUpstream(b)
	endStream(s)
	m.UpstreamsChanged([]string{a, b}, nil)
	m.UpstreamsChanged([]string{a, b}, nil)
	if n := upstreamSeries(t, reg, b); n == 0 {
		t.Error("the series of an endpoint still in the set went")
	}
}

// A stream retried on another endpoint leaves the first: streams in
// flight on each, and its load band is the endpoint's streams of the
// model, not the proxy's.
func TestStreamMovesToAnotherEndpoint(t *testing.T) {
	m, reg := newTestMetrics(t, Options{MaxModels: 4, Version: "test"})
	const a, b = "10.0.0.1:80", "10.0.0.2:80"
	m.UpstreamsChanged([]string{a, b}, nil)
	l := m.RequestLabels("m", "chat_completions", "", "")
	var streams []*Stream
	for range 3 {
		s := m.StartStream(l, IDs{})
		s.SetUpstream(a)
		streams = append(streams, s)
	}
	streams[2].SetUpstream(b)
	fs, err := scrape.Gather(reg)
	if err != nil {
		t.Fatal(err)
	}
	if va, vb := fs.Value("itlproxy_upstream_streams_in_flight", "upstream", a), fs.Value("itlproxy_upstream_streams_in_flight", "upstream", b); va != 2 || vb != 1 {
		t.Errorf("in flight: %s %v, %s %v; want 2 and 1", a, va, b, vb)
	}
	if got := streams[2].ttftBand; got != loadBand(1) {
		t.Errorf("the moved stream's load band %v, want %v: the one stream on its endpoint", got, loadBand(1))
	}
	for _, s := range streams {
		endStream(s)
	}
	fs, err = scrape.Gather(reg)
	if err != nil {
		t.Fatal(err)
	}
	if v := fs.Value("itlproxy_upstream_streams_in_flight"); v != 0 {
		t.Errorf("%v streams in flight after every one ended", v)
	}
	if va, vb := fs.Value("itlproxy_upstream_streams_total", "upstream", a), fs.Value("itlproxy_upstream_streams_total", "upstream", b); va != 2 || vb != 1 {
		t.Errorf("streams ended: %s %v, %s %v; want 2 and 1 (each counted once, where it was served)", a, va, b, vb)
	}
}
