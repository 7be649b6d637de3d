package proxy

import (
	"bytes"
	"io"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/itlproxy/itlproxy/metrics"
	"github.com/itlproxy/itlproxy/proxy/events"
	"github.com/itlproxy/itlproxy/proxy/internal/streamtest"
	"github.com/itlproxy/itlproxy/proxy/recorder"
)

// recordedStreamMeter returns the events of a recorded vLLM stream, each
// as one read, their mean size, and a stream meter for them.
func recordedStreamMeter(b testing.TB) (evs [][]byte, eventBytes int64, m *meter) {
	b.Helper()
	raw := streamtest.Read(b, "vllm_chat_usage.sse")
	evs = streamtest.Events(string(raw))
	rec, err := metrics.New(prometheus.NewRegistry(), metrics.Options{MaxModels: 4})
	if err != nil {
		b.Fatal(err)
	}
	ex := newExchange(rec, rec.Labels("m", metrics.EndpointChatCompletions), time.Now(), metrics.IDs{Request: "r"}, false, true)
	ex.m.readEvents(events.ChatCompletions, 1<<20, true)
	// Recording the timeline is part of the per-event path; past its cap
	// the gaps are summarized, which the benchmark's many reads reach.
	ex.m.timeline = recorder.New(recorder.Options{Last: 1000, Slowest: 100, Window: time.Minute, MaxGaps: 256}).Start()
	return evs, int64(len(raw)) / int64(len(evs)), &ex.m
}

// BenchmarkMeasureEvent measures the per-event cost of the measuring path
// (split, classify, stamp, observe) over a recorded vLLM stream, read in
// one-event reads as a proxy sees them. Reported per event.
func BenchmarkMeasureEvent(b *testing.B) {
	evs, eventBytes, m := recordedStreamMeter(b)
	b.SetBytes(eventBytes)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		m.read(evs[i%len(evs)])
	}
}

// BenchmarkMeasureEventTraced is BenchmarkMeasureEvent for a traced
// stream: what the span's record of the gaps adds per event.
func BenchmarkMeasureEventTraced(b *testing.B) {
	evs, eventBytes, m := recordedStreamMeter(b)
	m.gaps = &spanGaps{}
	b.SetBytes(eventBytes)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		m.read(evs[i%len(evs)])
	}
}

// BenchmarkPassthroughRead is the same path through sseBody, as
// httputil.ReverseProxy drives it.
func BenchmarkPassthroughRead(b *testing.B) {
	evs, _, m := recordedStreamMeter(b)
	body := &sseBody{m: m}
	src := &bytes.Reader{}
	body.rc = io.NopCloser(src)
	buf := make([]byte, 32<<10)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		src.Reset(evs[i%len(evs)])
		if _, err := body.Read(buf); err != nil {
			b.Fatal(err)
		}
	}
}
