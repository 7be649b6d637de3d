package proxy

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/itlproxy/itlproxy/internal/e2e"
	"github.com/itlproxy/itlproxy/metrics"
	"github.com/itlproxy/itlproxy/metrics/scrape"
	"github.com/itlproxy/itlproxy/proxy/events"
	"github.com/itlproxy/itlproxy/proxy/recorder"
)

// TestAvailableAt: a read's bytes were available when it returned, unless
// it returned at once (within blockedRead of being issued): then they were
// waiting, from when the proxy turned back to the upstream.
func TestAvailableAt(t *testing.T) {
	turned := time.Unix(100, 0)
	issued := turned.Add(3 * time.Millisecond) // after measuring
	for _, tc := range []struct {
		name             string
		turned, returned time.Time
		want             time.Time
	}{
		{"waited", turned, issued.Add(blockedRead), issued.Add(blockedRead)},
		{"waiting", turned, issued.Add(blockedRead - time.Microsecond), turned},
		{"first read", time.Time{}, issued.Add(time.Microsecond), issued.Add(time.Microsecond)},
	} {
		if got := availableAt(tc.turned, issued, tc.returned); !got.Equal(tc.want) {
			t.Errorf("%s: available at %v, want %v", tc.name, got.Sub(turned), tc.want.Sub(turned))
		}
	}
}

// readsOf is an upstream body that returns one of its reads per Read.
type readsOf [][]byte

func (r *readsOf) Read(p []byte) (int, error) {
	if len(*r) == 0 {
		return 0, io.EOF
	}
	n := copy(p, (*r)[0])
	(*r)[0] = (*r)[0][n:]
	if len((*r)[0]) == 0 {
		*r = (*r)[1:]
	}
	return n, nil
}

func (*readsOf) Close() error { return nil }

// waitingWriter is a client's writer each of whose writes takes d, as a
// write into a full socket waits for the client to read.
type waitingWriter struct {
	discardWriter
	d      time.Duration
	writes int
}

func (w *waitingWriter) Write(p []byte) (int, error) {
	time.Sleep(w.d)
	w.writes++
	return len(p), nil
}

// TestEveryWriteCountedOnce drives an exchange's reader and writer as
// httputil.ReverseProxy does, over reads that split and join events: the
// role chunk; the first part of a token event; its rest with two more
// token events; usage; [DONE]. Each write to the client waits 20 ms: each
// is observed once, whatever the read held, the stream's total is their
// sum, and each token-bearing event has its own delay.
func TestEveryWriteCountedOnce(t *testing.T) {
	const wait = 20 * time.Millisecond
	reg := prometheus.NewRegistry()
	m, err := metrics.New(reg, metrics.Options{MaxModels: 4})
	if err != nil {
		t.Fatal(err)
	}
	u, _ := url.Parse("http://upstream.example")
	rec := recorder.New(recorder.Options{Last: 10, MaxGaps: 256})
	p := New(Config{Upstream: u, MaxEventBytes: 1 << 20, Recorder: rec}, m, zap.NewNop())
	ex := p.newExchange(httptest.NewRequest(http.MethodPost, "/v1/chat/completions", nil),
		request{t0: time.Now(), labels: m.RequestLabels("m", "chat_completions", "", ""),
			endpoint: events.ChatCompletions, route: "/v1/chat/completions", model: "m", wantStream: true})
	token := func(s string) string {
		return `data: {"choices":[{"index":0,"delta":{"content":"` + s + `"}}]}` + "\n\n"
	}
	a := token(strings.Repeat("a", 8<<10))
	reads := readsOf{
		[]byte(`data: {"choices":[{"index":0,"delta":{"role":"assistant","content":""}}]}` + "\n\n"),
		[]byte(a[:4<<10]),
		[]byte(a[4<<10:] + token("b") + token("c")),
		[]byte(`data: {"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":3,"total_tokens":6}}` + "\n\n"),
		[]byte("data: [DONE]\n\n"),
	}
	writes := len(reads)
	ex.events = newEventMeter(&reads, &ex.sink, events.ChatCompletions, 1<<20, true, nil)
	w := &waitingWriter{discardWriter: discardWriter{h: http.Header{}}, d: wait}
	ex.writer = clientWriter{ResponseWriter: w, ex: ex}
	buf := make([]byte, 32<<10)
	began := time.Now()
	for {
		n, err := ex.events.Read(buf)
		if n > 0 {
			_, _ = ex.writer.Write(buf[:n])
			ex.writer.Flush()
		}
		if err != nil {
			break
		}
	}
	ex.code = http.StatusOK
	ex.finish(false, zap.NewNop())
	elapsed := time.Since(began)

	fs, err := scrape.Gather(reg)
	if err != nil {
		t.Fatal(err)
	}
	n, sum := fs.Histogram("itlproxy_client_write_seconds", "endpoint", "chat_completions")
	total := time.Duration(sum * float64(time.Second))
	if w.writes != writes || n != uint64(writes) || total < time.Duration(writes)*wait || total > elapsed {
		t.Errorf("%d writes of %v each; observed %d, %v in all, of a stream of %v: want each once", w.writes, wait, n, total, elapsed)
	}
	if d := fs.Buckets("itlproxy_event_delay_seconds", "endpoint", "chat_completions"); d.Count != 3 {
		t.Errorf("%d own delays, want one per token-bearing event (3)", d.Count)
	}
	e := rec.Get(ex.sink.ids.Request)
	if e == nil {
		t.Fatal("the stream is not recorded")
	}
	if (e.ClientWriteWait-total).Abs() > time.Microsecond || e.ClientWriteWait > e.Duration {
		t.Errorf("recorded write wait %v of a %v stream; want the histogram's sum %v", e.ClientWriteWait, e.Duration, total)
	}
}

// TestClientWriteOncePerWrite: a read that completes several events (the
// role chunk, five tokens, usage and [DONE] in one write of the upstream)
// is one write to the client, counted once, not once per token-bearing
// event; the stream's record holds the same sum.
func TestClientWriteOncePerWrite(t *testing.T) {
	rec := recorder.New(recorder.Options{Last: 10, MaxGaps: 256})
	var stream bytes.Buffer
	stream.WriteString(`data: {"choices":[{"index":0,"delta":{"role":"assistant","content":""}}]}` + "\n\n")
	for i := range 5 {
		fmt.Fprintf(&stream, "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"w%d\"}}]}\n\n", i)
	}
	stream.WriteString(`data: {"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":5,"total_tokens":8}}` + "\n\ndata: [DONE]\n\n")
	h := newHarness(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		writeChunks(w, r, [][]byte{stream.Bytes()}, nil)
	}), func(c *Config, _ *metrics.Options) { c.Recorder = rec })
	resp := h.post("/v1/chat/completions", arrivalBody, "X-Request-Id", "one-write")
	got, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	h.waitServed(1)
	if !bytes.Equal(got, stream.Bytes()) {
		t.Fatalf("the client got %q", got)
	}
	fs := h.metrics()
	n, wrote := fs.Histogram("itlproxy_client_write_seconds", "endpoint", "chat_completions")
	// One write of the upstream, one read (loopback may split it: two).
	if n < 1 || n > 2 {
		t.Errorf("%d client writes observed; want one per write of the stream's %d bytes, not one per event", n, stream.Len())
	}
	if d := fs.Buckets("itlproxy_event_delay_seconds", "endpoint", "chat_completions"); d.Count != 5 {
		t.Errorf("%d own delays observed, want one per token-bearing event (5)", d.Count)
	}
	e := rec.Get("one-write")
	if e == nil {
		t.Fatal("the stream is not recorded")
	}
	if (e.ClientWriteWait-time.Duration(wrote*float64(time.Second))).Abs() > time.Microsecond || e.ClientWriteWait > e.Duration {
		t.Errorf("recorded write wait %v of a %v stream; want the histogram's sum %.6fs", e.ClientWriteWait, e.Duration, wrote)
	}
}

// TestOwnDelayHoldsTheMeasuring: the proxy measures each read after its
// write and before it asks for the next; bytes already waiting for that
// next read wait for the measuring, and their own delay says so. The
// upstream sends a token event of 32 MiB, whose reading the proxy's
// measuring does once its last part has gone to the client, then, as
// soon as the client has that part, a small one: its bytes wait while the
// proxy reads the large event, and the own delays add up to at least
// half of what reading that event alone takes here.
func TestOwnDelayHoldsTheMeasuring(t *testing.T) {
	const size = 32 << 20
	head, tail := `data: {"choices":[{"index":0,"delta":{"content":"`, `"}}]}`+"\n\n"
	large := []byte(head + strings.Repeat("a", size-len(head)-len(tail)) + tail)
	small := []byte(`data: {"choices":[{"index":0,"delta":{"content":"b"}}]}` + "\n\n")

	// What the measuring of the large event takes on this machine, with
	// the measuring's own scanner.
	var parse time.Duration
	for range 3 {
		tokens := 0
		s := events.NewScanner(events.ChatCompletions, 64<<20, func(e events.Event, _ events.Stamp) {
			if e.Token {
				tokens++
			}
		})
		start := time.Now()
		s.Write(large, events.Stamp{At: start})
		if d := time.Since(start); parse == 0 || d < parse {
			parse = d
		}
		if tokens != 1 {
			t.Fatalf("the large event read as %d token-bearing events, want 1", tokens)
		}
	}

	hadLarge := make(chan struct{})
	h := newHarness(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "text/event-stream")
		rc := http.NewResponseController(w)
		_, _ = w.Write(large)
		_ = rc.Flush()
		select {
		case <-hadLarge:
		case <-r.Context().Done():
			return
		}
		_, _ = w.Write(small)
		_, _ = w.Write([]byte("data: [DONE]\n\n"))
		_ = rc.Flush()
	}), func(c *Config, _ *metrics.Options) { c.MaxEventBytes = 64 << 20 })
	resp := h.post("/v1/chat/completions", arrivalBody)
	br := bufio.NewReaderSize(resp.Body, 64<<10)
	if _, err := io.CopyN(io.Discard, br, int64(len(large))); err != nil {
		t.Fatal(err)
	}
	close(hadLarge)
	rest, _ := io.ReadAll(br)
	resp.Body.Close()
	h.waitServed(1)
	if !bytes.HasPrefix(rest, small) {
		t.Fatalf("after the large event the client got %q", rest)
	}
	d := h.metrics().Buckets("itlproxy_event_delay_seconds", "endpoint", "chat_completions")
	own := time.Duration(d.Sum * float64(time.Second))
	t.Logf("reading the large event takes %v; own delays %v in all", parse, own)
	if d.Count != 2 || own < parse/2 {
		t.Errorf("own delay: %d observations, %v in all; want 2, and at least half of the %v the measuring of the large event takes", d.Count, own, parse)
	}
}

// TestRequestLegWhileStreaming: the request leg is observed when the
// request has been written to the upstream, not when the exchange ends: a
// stream that is still running, and a Realtime connection still open,
// have theirs counted.
func TestRequestLegWhileStreaming(t *testing.T) {
	release := make(chan struct{})
	h := newHarness(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		writeChunks(w, r, [][]byte{[]byte(`data: {"choices":[{"index":0,"delta":{"content":"a"}}]}` + "\n\n")}, nil)
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	resp := h.post("/v1/chat/completions", arrivalBody)
	defer resp.Body.Close()
	if _, err := bufio.NewReader(resp.Body).ReadString('\n'); err != nil {
		t.Fatal(err)
	}
	// Observed on the transport's goroutine, as the write returns.
	e2e.WaitFor(t, "the request leg of the stream in flight", 5*time.Second, func() bool {
		n, _ := h.hist("itlproxy_request_forward_seconds", "endpoint", "chat_completions")
		return n == 1
	})
	close(release)

	rh, _ := realtimeHarness(t, &e2e.RealtimeUpstream{})
	c := dialRealtime(t, rh, "gpt-realtime", websocket.CompressionDisabled, nil)
	e2e.WaitFor(t, "the Realtime connection's request leg", 5*time.Second, func() bool {
		n, _ := rh.hist("itlproxy_request_forward_seconds", "endpoint", "realtime")
		return n == 1
	})
	_ = c.c.Close(websocket.StatusNormalClosure, "")
}
