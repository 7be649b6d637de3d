package proxy

import (
	"bufio"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/itlproxy/itlproxy/metrics"
	"github.com/itlproxy/itlproxy/proxy/recorder"
)

// arrivalUpstream streams three token events, the first after firstToken.
func arrivalUpstream(firstToken time.Duration) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		chunks := [][]byte{
			[]byte(`data: {"choices":[{"index":0,"delta":{"content":"a"}}]}` + "\n\n"),
			[]byte(`data: {"choices":[{"index":0,"delta":{"content":"b"}}]}` + "\n\n"),
			[]byte(`data: {"choices":[{"index":0,"delta":{"content":"c"}}]}` + "\n\ndata: [DONE]\n\n"),
		}
		writeChunks(w, r, chunks, []time.Duration{firstToken})
	})
}

const arrivalBody = `{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}`

// rawRequest writes one streaming chat request on c and reads its
// response to its end.
func rawRequest(t *testing.T, c net.Conn, br *bufio.Reader) {
	t.Helper()
	if _, err := fmt.Fprintf(c, "POST /v1/chat/completions HTTP/1.1\r\nHost: proxy\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s",
		len(arrivalBody), arrivalBody); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(body), "[DONE]") {
		t.Fatalf("%s: %s", resp.Status, body)
	}
}

// TestIdleConnectionNotCharged: a connection opened 300 ms before its
// request (clients preconnect), and a keep-alive connection idle 300 ms
// between two requests, charge none of it to the requests' TTFT, request
// leg or duration: t0 is when each request's bytes came.
func TestIdleConnectionNotCharged(t *testing.T) {
	const firstToken = 20 * time.Millisecond
	h := newHarness(t, arrivalUpstream(firstToken))
	c, err := net.Dial("tcp", h.proxy.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	br := bufio.NewReader(c)
	for range 2 {
		time.Sleep(300 * time.Millisecond)
		rawRequest(t, c, br)
	}
	h.waitServed(2)
	for _, f := range []struct {
		name    string
		atLeast time.Duration
	}{
		{"itlproxy_time_to_first_token_seconds", firstToken},
		{"itlproxy_request_forward_seconds", 0},
		{"itlproxy_request_duration_seconds", firstToken},
	} {
		n, sum := h.hist(f.name)
		mean := time.Duration(sum / float64(n) * float64(time.Second))
		if n != 2 || mean < f.atLeast || mean > f.atLeast+150*time.Millisecond {
			t.Errorf("%s: %d observations, mean %v; want 2, from %v to well under the 300ms the connection sat idle", f.name, n, mean, f.atLeast)
		}
	}
}

// TestIdleTLSConnectionNotCharged: over TLS the first bytes read from a
// connection are its handshake's; a client that preconnected (handshake
// done) and sends its request 300 ms later, then another 300 ms after the
// first response, is charged neither wait: t0 is when each request's
// bytes came, not the handshake's.
func TestIdleTLSConnectionNotCharged(t *testing.T) {
	const firstToken = 20 * time.Millisecond
	h := newHarness(t, arrivalUpstream(firstToken))
	srv := httptest.NewUnstartedServer(h.proxy.Config.Handler)
	srv.Listener = Listener(srv.Listener, 0)
	srv.Config.ConnContext = ConnContext
	srv.StartTLS()
	defer srv.Close()
	c, err := tls.Dial("tcp", srv.Listener.Addr().String(), &tls.Config{InsecureSkipVerify: true, NextProtos: []string{"http/1.1"}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.Handshake(); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(c)
	for range 2 {
		time.Sleep(300 * time.Millisecond)
		rawRequest(t, c, br)
	}
	h.waitServed(2)
	n, sum := h.hist("itlproxy_time_to_first_token_seconds")
	if mean := time.Duration(sum / float64(n) * float64(time.Second)); n != 2 || mean < firstToken || mean > firstToken+150*time.Millisecond {
		t.Errorf("TTFT: %d observations, mean %v; want 2, from %v to well under the 300ms the connection sat idle", n, mean, firstToken)
	}
}

// holdListener holds the first read of each connection it accepts for
// hold: a proxy too busy to read what arrived.
type holdListener struct {
	net.Listener
	hold time.Duration
}

func (l holdListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return c, err
	}
	return &holdConn{Conn: c, hold: l.hold}, nil
}

type holdConn struct {
	net.Conn
	hold time.Duration
	once sync.Once
}

func (c *holdConn) Read(p []byte) (int, error) {
	c.once.Do(func() { time.Sleep(c.hold) })
	return c.Conn.Read(p)
}

// NetConn returns the connection it holds the reads of, as tls.Conn's
// does, so that ConnContext finds the timed one.
func (c *holdConn) NetConn() net.Conn { return c.Conn }

// TestBusyProxyCharged: a request whose bytes waited 50 ms for a proxy
// too busy to read them has that wait in its TTFT, request leg and
// duration: on a new connection, t0 is no later than its accept.
func TestBusyProxyCharged(t *testing.T) {
	const firstToken, hold = 20 * time.Millisecond, 50 * time.Millisecond
	h := newHarness(t, arrivalUpstream(firstToken))
	// The same proxy, served on a listener whose first read of each
	// connection waits: outside the timed one, as a busy server's
	// goroutine would be late to read.
	busy := httptest.NewUnstartedServer(h.proxy.Config.Handler)
	busy.Listener = holdListener{Listener: Listener(busy.Listener, 0), hold: hold}
	busy.Config.ConnContext = ConnContext
	busy.Start()
	defer busy.Close()
	c, err := net.Dial("tcp", busy.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	rawRequest(t, c, bufio.NewReader(c))
	h.waitServed(1)
	for _, f := range []struct {
		name    string
		atLeast time.Duration
	}{
		{"itlproxy_time_to_first_token_seconds", hold + firstToken},
		{"itlproxy_request_forward_seconds", hold},
		{"itlproxy_request_duration_seconds", hold + firstToken},
	} {
		n, sum := h.hist(f.name)
		if d := time.Duration(sum * float64(time.Second)); n != 1 || d < f.atLeast {
			t.Errorf("%s: %d observations, %v; want 1, of at least %v", f.name, n, d, f.atLeast)
		}
	}
}

// TestSlowReaderWaitsInTheWrite: a client that stops reading for 500 ms
// mid-stream of 8 KiB events (a 16 KiB send buffer on the proxy's side,
// and on the client's a 16 KiB receive buffer read 4 KiB at a time) makes
// the proxy's writes wait,
// once the sockets between them are full: every write of the stream's
// bytes is counted once, whatever the reads held (the first parts of an
// event, several events), so most of the pause is in the client write
// histogram and in the stream's record, which is the histogram's sum and
// never more than the stream lasted; every event's own delay inside the
// proxy stays under a millisecond. The upstream sends each event in two
// writes, its line and then the blank line that ends it, so that most
// reads complete no event.
func TestSlowReaderWaitsInTheWrite(t *testing.T) {
	const events, pause = 32, 500 * time.Millisecond
	rec := recorder.New(recorder.Options{Last: 10, MaxGaps: 256})
	h := newHarness(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		head := `data: {"choices":[{"index":0,"delta":{"content":"`
		tail := `"}}]}` + "\n\n"
		event := head + strings.Repeat("a", 8<<10-len(head)-len(tail)) + tail
		chunks := [][]byte{[]byte(`data: {"choices":[{"index":0,"delta":{"role":"assistant","content":""}}]}` + "\n\n")}
		for range events {
			// As a server whose writes split events: the event's line, then
			// the blank line that ends it.
			chunks = append(chunks, []byte(event[:len(event)-1]), []byte("\n"))
		}
		writeChunks(w, r, append(chunks, []byte("data: [DONE]\n\n")), nil)
	}), func(c *Config, _ *metrics.Options) { c.Recorder = rec })
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
	if _, err := fmt.Fprintf(c, "POST /v1/chat/completions HTTP/1.1\r\nHost: proxy\r\nX-Request-Id: slow-reader\r\nContent-Length: %d\r\n\r\n%s",
		len(arrivalBody), arrivalBody); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReaderSize(c, 4<<10)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	first := make([]byte, 4<<10)
	if _, err := io.ReadFull(resp.Body, first); err != nil {
		t.Fatal(err)
	}
	time.Sleep(pause) // the client stops reading
	rest, _ := io.ReadAll(resp.Body)
	if !strings.HasSuffix(string(rest), "[DONE]\n\n") {
		t.Fatalf("the stream did not reach its end: %d bytes", len(first)+len(rest))
	}
	h.waitServed(1)

	fs := h.metrics()
	n, wrote := fs.Histogram("itlproxy_client_write_seconds", "endpoint", "chat_completions")
	if n == 0 || time.Duration(wrote*float64(time.Second)) < pause*6/10 {
		t.Errorf("client writes: %d observations, %.3fs in all; want at least %v of the %v pause", n, wrote, pause*6/10, pause)
	}
	delay := fs.Buckets("itlproxy_event_delay_seconds", "endpoint", "chat_completions")
	underMillisecond := uint64(0)
	for i, b := range delay.Bounds {
		if b == 0.001 {
			underMillisecond = delay.Cumulative[i]
		}
	}
	if delay.Count != events || underMillisecond != events {
		t.Errorf("own delay: %d observations, %d under 1ms (sum %.6fs); want every one of %d", delay.Count, underMillisecond, delay.Sum, events)
	}
	e := rec.Get("slow-reader")
	if e == nil {
		t.Fatal("the stream is not recorded")
	}
	// The upstream sends as fast as it can: from its first bytes on, the
	// proxy spends the stream writing to the client, the pause and the
	// slow reading after it (small windows), and the sum of its writes is
	// most of the stream's duration.
	if e.ClientWriteWait < pause*6/10 || e.ClientWriteWait < e.Duration*7/10 || e.ClientWriteWait > e.Duration ||
		(e.ClientWriteWait-time.Duration(wrote*float64(time.Second))).Abs() > time.Millisecond {
		t.Errorf("the stream's record: write wait %v of a %v stream; want at least %v of the %v pause and 70%% of the stream, "+
			"no more than the stream lasted, and the histogram's sum %.3fs", e.ClientWriteWait, e.Duration, pause*6/10, pause, wrote)
	}
	t.Logf("%d client writes, %.3fs in all; own delay %.6fs in all; recorded write wait %v of %v", n, wrote, delay.Sum, e.ClientWriteWait, e.Duration)
}
