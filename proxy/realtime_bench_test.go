package proxy

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/gobwas/ws"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/itlproxy/itlproxy/metrics"
	"github.com/itlproxy/itlproxy/metrics/scrape"
	"github.com/itlproxy/itlproxy/proxy/events"
	"github.com/itlproxy/itlproxy/proxy/realtime"
	"github.com/itlproxy/itlproxy/proxy/recorder"
)

// BenchmarkMeasureRealtimeDelta is BenchmarkMeasureEvent for the
// Realtime API: the per-delta cost of the measuring path (the frame, the
// event, the response's clock, the stream's observations and the
// recorder's timeline) over a response's deltas, one delta per read as the
// proxy reads them from the upstream. Reported per delta: a transcript
// delta (a few words), and an audio delta (100 ms of 24 kHz audio, 6.4 KB
// of base64 the event reader skips).
func BenchmarkMeasureRealtimeDelta(b *testing.B) {
	const id = "resp_CXjs6zXmZ5iEcXKE2eTDn"
	text := func(s string) []byte {
		f, err := ws.CompileFrame(ws.NewTextFrame([]byte(s)))
		if err != nil {
			b.Fatal(err)
		}
		return f
	}
	for _, tc := range []struct{ name, delta string }{
		{"transcript", ` word`},
		{"audio", strings.Repeat("AQIDBAUG", 800)},
	} {
		b.Run(tc.name, func(b *testing.B) {
			reg := prometheus.NewRegistry()
			rec, err := metrics.New(reg, metrics.Options{MaxModels: 4, SessionMax: 16, SessionTTL: time.Hour})
			if err != nil {
				b.Fatal(err)
			}
			u, _ := url.Parse("http://upstream.example")
			p := New(Config{Upstream: u, MaxEventBytes: 1 << 20, SessionHeader: "X-Session-Id",
				Recorder: recorder.New(recorder.Options{Last: 1000, Slowest: 100, Window: time.Minute, MaxGaps: 256})}, rec, zap.NewNop())
			r := httptest.NewRequest(http.MethodGet, realtimePath, nil)
			r.Header.Set("X-Session-Id", "s")
			ex := p.newExchange(r, request{t0: time.Now(), labels: rec.RequestLabels("gpt-realtime", "realtime", "", ""),
				endpoint: events.Realtime, route: realtimePath, model: "gpt-realtime"})
			c := &realtimeConn{p: p, ex: ex, session: "s"}
			c.conn = realtime.New(realtime.Config{MaxMessageBytes: 1 << 20}, c)
			c.conn.Observe(realtime.Server, text(fmt.Sprintf(`{"type":"response.created","response":{"id":%q}}`, id)), time.Now())
			frame := text(fmt.Sprintf(`{"type":"response.output_audio_transcript.delta","event_id":"event_CXjs7IRkRdTsIs1BEPtXs","response_id":%q,"item_id":"item_CXjs6kT5oSJrcq5EdgGS3","output_index":0,"content_index":0,"delta":%q}`, id, tc.delta))
			b.SetBytes(int64(len(frame)))
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				c.conn.Observe(realtime.Server, frame, time.Now())
			}
			b.StopTimer()
			c.close()
			fs, err := scrape.Gather(reg)
			if err != nil {
				b.Fatal(err)
			}
			if n, _ := fs.Histogram("itlproxy_inter_token_latency_seconds"); n != uint64(b.N-1) {
				b.Fatalf("%d gaps observed, want %d", n, b.N-1)
			}
		})
	}
}
