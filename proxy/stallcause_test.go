package proxy

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/itlproxy/itlproxy/metrics"
	"github.com/itlproxy/itlproxy/proxy/recorder"
)

// TestClientStallCause: a client that stops reading for a second a stream
// of 4 KiB events, one every 20 ms, holds the proxy's write once the
// sockets between them are full (a 16 KiB send buffer, a 16 KiB receive
// buffer), and the proxy does not read the upstream meanwhile: the one
// stall is the client's, counted and recorded so, whichever relay wrote
// to the client.
func TestClientStallCause(t *testing.T) {
	const events, pause, threshold = 120, time.Second, 250 * time.Millisecond
	rec := recorder.New(recorder.Options{Last: 10, MaxGaps: 256})
	h := newHarness(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		head := `data: {"choices":[{"index":0,"delta":{"content":"`
		tail := `"}}]}` + "\n\n"
		event := []byte(head + strings.Repeat("a", 4<<10-len(head)-len(tail)) + tail)
		chunks := make([][]byte, events)
		gaps := make([]time.Duration, events)
		for i := range chunks {
			chunks[i], gaps[i] = event, 20*time.Millisecond
		}
		writeChunks(w, r, append(chunks, []byte("data: [DONE]\n\n")), gaps)
	}), func(c *Config, m *metrics.Options) { c.Recorder, m.StallThreshold = rec, threshold })
	slow := httptest.NewUnstartedServer(h.proxy.Config.Handler)
	slow.Listener = Listener(slow.Listener, 16<<10)
	slow.Config.ConnContext = ConnContext
	slow.Start()
	defer slow.Close()

	c, err := net.Dial("tcp", slow.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.(*net.TCPConn).SetReadBuffer(16 << 10)
	if _, err := fmt.Fprintf(c, "POST /v1/chat/completions HTTP/1.1\r\nHost: proxy\r\nX-Request-Id: stops-reading\r\nContent-Length: %d\r\n\r\n%s",
		len(arrivalBody), arrivalBody); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReaderSize(c, 4<<10), nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadFull(resp.Body, make([]byte, 20*4<<10)); err != nil { // 20 events, 400 ms
		t.Fatal(err)
	}
	time.Sleep(pause) // the client stops reading
	if rest, _ := io.ReadAll(resp.Body); !strings.HasSuffix(string(rest), "[DONE]\n\n") {
		t.Fatal("the stream did not reach its end")
	}
	h.waitServed(1)

	e := rec.Get("stops-reading")
	if e == nil {
		t.Fatal("the stream is not recorded")
	}
	if len(e.Stalls) != 1 || e.Stalls[0].Cause != metrics.StallClient || e.Stalls[0].Length < pause/2 {
		t.Errorf("recorded stalls %+v, want one of the client's, most of the %v pause", e.Stalls, pause)
	}
	fs := h.metrics()
	for cause, want := range map[string]float64{metrics.StallClient: 1, metrics.StallPrefill: 0, metrics.StallUpstream: 0} {
		if got := fs.Value("itlproxy_stalls_total", "cause", cause); got != want {
			t.Errorf("itlproxy_stalls_total{cause=%q} = %v, want %v", cause, got, want)
		}
	}
	t.Logf("stalls %+v; client write wait %v of %v", e.Stalls, e.ClientWriteWait, e.Duration)
}
