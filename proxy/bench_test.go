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
	"go.opentelemetry.io/otel/trace/noop"
	"go.uber.org/zap"

	"github.com/itlproxy/itlproxy/metrics"
	"github.com/itlproxy/itlproxy/proxy/events"
	"github.com/itlproxy/itlproxy/proxy/internal/streamtest"
	"github.com/itlproxy/itlproxy/proxy/recorder"
)

// meteredProxy is a proxy whose exchanges the benchmarks drive by hand,
// with a stream recorder (recording the timeline is part of the per-event
// path; past its cap the gaps are summarized, which the benchmarks' many
// reads reach) and, when traced, a tracer whose spans go nowhere.
func meteredProxy(b testing.TB, traced bool) *Proxy {
	b.Helper()
	m, err := metrics.New(prometheus.NewRegistry(), metrics.Options{MaxModels: 4})
	if err != nil {
		b.Fatal(err)
	}
	u, _ := url.Parse("http://upstream.example")
	cfg := Config{Upstream: u, MaxEventBytes: 1 << 20,
		Recorder: recorder.New(recorder.Options{Last: 1000, Slowest: 100, Window: time.Minute, MaxGaps: 256})}
	if traced {
		cfg.Tracer = noop.NewTracerProvider().Tracer("bench")
	}
	return New(cfg, m, zap.NewNop())
}

// streamMeter returns the meter of a new stream of p's, as it reads an
// event stream from the upstream (read from body).
func streamMeter(p *Proxy, body io.ReadCloser) *eventMeter {
	r := httptest.NewRequest(http.MethodPost, "/v1/chat/completions", nil)
	ex := p.newExchange(r, request{t0: time.Now(), labels: p.metrics.RequestLabels("m", "chat_completions", "", ""),
		endpoint: events.ChatCompletions, route: "/v1/chat/completions", model: "m", wantStream: true})
	return newEventMeter(body, &ex.sink, events.ChatCompletions, 1<<20, true, nil)
}

// measure splits and records one read of m's stream, as the meter does
// with a read it held, stamped now with load streams in flight.
func measure(m *eventMeter, p []byte, load int64) {
	m.scan.Write(p, events.Stamp{At: time.Now(), Load: load})
}

// recordedStreamMeter returns the events of a recorded vLLM stream, each
// as one read, their mean size, and a stream meter for them reading body
// (nil: none), traced or not.
func recordedStreamMeter(b testing.TB, body io.ReadCloser, traced bool) (evs [][]byte, eventBytes int64, m *eventMeter) {
	b.Helper()
	raw := streamtest.Read(b, "vllm_chat_usage.sse")
	evs = streamtest.Events(string(raw))
	return evs, int64(len(raw)) / int64(len(evs)), streamMeter(meteredProxy(b, traced), body)
}

// BenchmarkMeasureEvent measures the per-event cost of measuring (split,
// classify, observe) over a recorded vLLM stream, read in one-event reads
// as a proxy sees them, one stream at a time: the measuring alone, stamp
// included. Reported per event.
func BenchmarkMeasureEvent(b *testing.B) {
	evs, eventBytes, m := recordedStreamMeter(b, nil, false)
	b.SetBytes(eventBytes)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		measure(m, evs[i%len(evs)], 1)
	}
}

// BenchmarkMeasureEventTraced is BenchmarkMeasureEvent for a traced
// stream: what the span's record of the gaps adds per event.
func BenchmarkMeasureEventTraced(b *testing.B) {
	evs, eventBytes, m := recordedStreamMeter(b, nil, true)
	b.SetBytes(eventBytes)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		measure(m, evs[i%len(evs)], 1)
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
	p := meteredProxy(b, false)
	meters := make([]*eventMeter, coldStreams)
	for i := range meters {
		meters[i] = streamMeter(p, nil)
	}
	b.SetBytes(int64(len(raw)) / int64(len(evs)))
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		measure(meters[i%coldStreams], evs[(i/coldStreams)%len(evs)], coldStreams)
	}
}

// BenchmarkPassthroughRead is the whole per-read cost of an event stream
// through its eventMeter, as httputil.ReverseProxy drives it: the stamp
// and the hold of each read, and the measuring of the one before.
func BenchmarkPassthroughRead(b *testing.B) {
	src := &bytes.Reader{}
	evs, eventBytes, body := recordedStreamMeter(b, io.NopCloser(src), false)
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

// discardWriter is a client's writer that takes every byte at once.
type discardWriter struct{ h http.Header }

func (w *discardWriter) Header() http.Header         { return w.h }
func (w *discardWriter) Write(p []byte) (int, error) { return len(p), nil }
func (w *discardWriter) WriteHeader(int)             {}
func (w *discardWriter) Flush()                      {}

// BenchmarkForwardRead is BenchmarkPassthroughRead with each read's bytes
// written to the client as httputil.ReverseProxy writes them (through the
// exchange's clientWriter, then a flush): the stamps of each read's way
// through the proxy, its own delay and its write, and the measuring of
// the read before. Reported per read, one event each.
func BenchmarkForwardRead(b *testing.B) {
	src := &bytes.Reader{}
	raw := streamtest.Read(b, "vllm_chat_usage.sse")
	evs := streamtest.Events(string(raw))
	p := meteredProxy(b, false)
	r := httptest.NewRequest(http.MethodPost, "/v1/chat/completions", nil)
	ex := p.newExchange(r, request{t0: time.Now(), labels: p.metrics.RequestLabels("m", "chat_completions", "", ""),
		endpoint: events.ChatCompletions, route: "/v1/chat/completions", model: "m", wantStream: true})
	ex.events = newEventMeter(io.NopCloser(src), &ex.sink, events.ChatCompletions, 1<<20, true, nil)
	ex.writer = clientWriter{ResponseWriter: &discardWriter{h: http.Header{}}, ex: ex}
	buf := make([]byte, 32<<10)
	b.SetBytes(int64(len(raw)) / int64(len(evs)))
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		src.Reset(evs[i%len(evs)])
		n, err := ex.events.Read(buf)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := ex.writer.Write(buf[:n]); err != nil {
			b.Fatal(err)
		}
		ex.writer.Flush()
	}
}
