package proxy

import (
	"bytes"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/itlproxy/itlproxy/metrics"
	"github.com/itlproxy/itlproxy/proxy/events"
	"github.com/itlproxy/itlproxy/proxy/internal/streamtest"
	"github.com/itlproxy/itlproxy/proxy/recorder"
)

// meteredProxy is a proxy whose exchanges the benchmarks drive by hand.
func meteredProxy(b testing.TB) *Proxy {
	b.Helper()
	m, err := metrics.New(prometheus.NewRegistry(), metrics.Options{MaxModels: 4})
	if err != nil {
		b.Fatal(err)
	}
	u, _ := url.Parse("http://upstream.example")
	return New(Config{Upstream: u, MaxEventBytes: 1 << 20}, m, zap.NewNop())
}

// streamMeter returns the meter of a new stream of p's, as it reads an
// event stream from the upstream, with a stream recorder's timeline.
func streamMeter(p *Proxy, rec *recorder.Recorder) *meter {
	r := httptest.NewRequest(http.MethodPost, "/v1/chat/completions", nil)
	ex := p.newExchange(r, request{t0: time.Now(), labels: p.metrics.RequestLabels("m", "chat_completions", "", ""),
		endpoint: events.ChatCompletions, route: "/v1/chat/completions", model: "m", wantStream: true})
	ex.m.readEvents(events.ChatCompletions, 1<<20, true)
	// Recording the timeline is part of the per-event path; past its cap
	// the gaps are summarized, which the benchmark's many reads reach.
	ex.m.timeline = rec.Start()
	return &ex.m
}

func benchRecorder() *recorder.Recorder {
	return recorder.New(recorder.Options{Last: 1000, Slowest: 100, Window: time.Minute, MaxGaps: 256})
}

// recordedStreamMeter returns the events of a recorded vLLM stream, each
// as one read, their mean size, and a stream meter for them.
func recordedStreamMeter(b testing.TB) (evs [][]byte, eventBytes int64, m *meter) {
	b.Helper()
	raw := streamtest.Read(b, "vllm_chat_usage.sse")
	evs = streamtest.Events(string(raw))
	return evs, int64(len(raw)) / int64(len(evs)), streamMeter(meteredProxy(b), benchRecorder())
}

// BenchmarkMeasureEvent measures the per-event cost of measuring (split,
// classify, observe) over a recorded vLLM stream, read in one-event reads
// as a proxy sees them, one stream at a time: the measuring alone, stamp
// included. Reported per event.
func BenchmarkMeasureEvent(b *testing.B) {
	evs, eventBytes, m := recordedStreamMeter(b)
	b.SetBytes(eventBytes)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		m.measure(evs[i%len(evs)], time.Now(), 1)
	}
}

// BenchmarkMeasureEventTraced is BenchmarkMeasureEvent for a traced
// stream: what the span's record of the gaps adds per event.
func BenchmarkMeasureEventTraced(b *testing.B) {
	evs, eventBytes, m := recordedStreamMeter(b)
	m.notable = &notableGaps{}
	b.SetBytes(eventBytes)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		m.measure(evs[i%len(evs)], time.Now(), 1)
	}
}

// coldStreams is how many streams BenchmarkMeasureEventRoundRobin keeps
// in flight: what a loaded proxy holds, too many for their state to stay
// in the caches.
const coldStreams = 400

// BenchmarkMeasureEventRoundRobin measures coldStreams streams' events
// round-robin, one event of each in turn, the way load touches them: each
// event finds its stream's state where the others' pushed it out of the
// caches. Reported per event.
func BenchmarkMeasureEventRoundRobin(b *testing.B) {
	raw := streamtest.Read(b, "vllm_chat_usage.sse")
	evs := streamtest.Events(string(raw))
	p, rec := meteredProxy(b), benchRecorder()
	meters := make([]*meter, coldStreams)
	for i := range meters {
		meters[i] = streamMeter(p, rec)
	}
	b.SetBytes(int64(len(raw)) / int64(len(evs)))
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		meters[i%coldStreams].measure(evs[(i/coldStreams)%len(evs)], time.Now(), coldStreams)
	}
}

// BenchmarkPassthroughRead is the whole per-read cost of an event stream
// through sseBody, as httputil.ReverseProxy drives it: the stamp and the
// hold of each read, and the measuring of the one before.
func BenchmarkPassthroughRead(b *testing.B) {
	evs, eventBytes, m := recordedStreamMeter(b)
	body := &sseBody{m: m}
	src := &bytes.Reader{}
	body.rc = io.NopCloser(src)
	buf := make([]byte, 32<<10)
	b.SetBytes(eventBytes)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		src.Reset(evs[i%len(evs)])
		if _, err := body.Read(buf); err != nil {
			b.Fatal(err)
		}
	}
}
