package proxy

import (
	"bytes"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/itlproxy/itlproxy/metrics"
)

// BenchmarkMeasureEvent measures the per-event cost of the measuring path
// (split, classify, stamp, observe) over a recorded vLLM stream, read in
// one-event reads as a proxy sees them. Reported per event.
func BenchmarkMeasureEvent(b *testing.B) {
	raw, err := os.ReadFile(filepath.Join("testdata", "streams", "vllm_chat_usage.sse"))
	if err != nil {
		b.Fatal(err)
	}
	evs := events(string(raw))
	rec, err := metrics.New(prometheus.NewRegistry(), metrics.Options{MaxModels: 4})
	if err != nil {
		b.Fatal(err)
	}
	ex := newExchange(rec, rec.Labels("m", metrics.EndpointChatCompletions), time.Now(), metrics.IDs{Request: "r"}, false, true)
	m := newStreamMeter(ex, 1<<20, true)
	b.SetBytes(int64(len(raw)) / int64(len(evs)))
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		m.read(evs[i%len(evs)])
	}
}

// BenchmarkPassthroughRead is the same path through sseBody, as
// httputil.ReverseProxy drives it.
func BenchmarkPassthroughRead(b *testing.B) {
	raw, err := os.ReadFile(filepath.Join("testdata", "streams", "vllm_chat_usage.sse"))
	if err != nil {
		b.Fatal(err)
	}
	evs := events(string(raw))
	rec, err := metrics.New(prometheus.NewRegistry(), metrics.Options{MaxModels: 4})
	if err != nil {
		b.Fatal(err)
	}
	ex := newExchange(rec, rec.Labels("m", metrics.EndpointChatCompletions), time.Now(), metrics.IDs{Request: "r"}, false, true)
	body := &sseBody{m: newStreamMeter(ex, 1<<20, true)}
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
