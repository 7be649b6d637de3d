package proxy

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/itlproxy/itlproxy/metrics"
	"github.com/itlproxy/itlproxy/proxy/transport"
)

// The upstream of these tests answers before it has read the request to
// its end, as inference servers that decode the JSON prompt with a
// streaming decoder do: it reads the first part of the body, sends its
// response headers and first event, and reads the rest only once the
// client has those headers. The client, on a forwarded route, sends the
// rest of its body only then too (or after duplexHeaderWait without them).
// So when the proxy starts the response, the body is certainly still on
// its way: from the client on a forwarded route, from the proxy's own copy
// on a measured one (whose buffers to the upstream are kept small, so that
// the copy is still being sent).

// Request headers that tell the upstream how to answer, and which request
// it is.
const (
	duplexAnswer = "X-Test-Answer"
	duplexID     = "X-Test-Id"
)

// duplexRefusal is what the upstream answers to a request it refuses
// before reading its body.
const duplexRefusal = `{"error":{"message":"slow down","type":"rate_limit_error"}}`

// duplexHeaderWait is how long a client waits for the response headers
// before it sends the rest of its body anyway: without full duplex the
// proxy withholds them until it has consumed the body.
const duplexHeaderWait = 100 * time.Millisecond

// duplexBody is a chat request of about size bytes, and the length of its
// first part.
func duplexBody(size int) (body []byte, first int) {
	head := `{"model":"m","stream":true,"messages":[{"role":"user","content":"`
	tail := `"}]}` + "\n"
	fill := strings.Repeat("duplex ", max(size-len(head)-len(tail), 0)/7)
	return []byte(head + fill + tail), len(head) + 4<<10
}

// duplexStream is the event stream the upstream sends for a body it read
// whole: the digest of what it received comes back to the client.
func duplexStream(body []byte) [][]byte {
	sum := sha256.Sum256(body)
	delta := `data: {"choices":[{"delta":{"content":%q}}]}` + "\n\n"
	return [][]byte{
		fmt.Appendf(nil, delta, "first"),
		fmt.Appendf(nil, delta, hex.EncodeToString(sum[:])),
		[]byte("data: [DONE]\n\n"),
	}
}

// duplexUpstream answers "stream" requests with duplexStream, reading the
// first bytes of the body before it answers and the rest once the client
// has the headers; and "refuse" ones with a 429 without reading, closing
// the connection after it.
type duplexUpstream struct {
	first int
	mu    sync.Mutex
	seen  map[string]chan struct{} // by request id: closed when the client has the headers
}

// headers returns the channel the client of request id closes when it has
// the response headers.
func (u *duplexUpstream) headers(id string) chan struct{} {
	u.mu.Lock()
	defer u.mu.Unlock()
	c, ok := u.seen[id]
	if !ok {
		c = make(chan struct{})
		u.seen[id] = c
	}
	return c
}

func (u *duplexUpstream) forget(id string) {
	u.mu.Lock()
	delete(u.seen, id)
	u.mu.Unlock()
}

func (u *duplexUpstream) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Header.Get(duplexAnswer) == "refuse" {
		refuseAndClose(w)
		return
	}
	// A Go server, unlike most, would otherwise consume the body itself
	// before its response starts.
	rc := http.NewResponseController(w)
	_ = rc.EnableFullDuplex()
	start := make([]byte, u.first)
	if _, err := io.ReadFull(r.Body, start); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(duplexStream(nil)[0])
	_ = rc.Flush()
	select {
	case <-u.headers(r.Header.Get(duplexID)):
	case <-r.Context().Done():
		return
	}
	rest, err := io.ReadAll(r.Body)
	if err != nil {
		return // the client sees a stream without its end
	}
	for _, e := range duplexStream(append(start, rest...))[1:] {
		_, _ = w.Write(e)
		_ = rc.Flush()
	}
}

// refuseAndClose answers 429 on the raw connection and closes it, as a
// server that refuses a request without reading its body does: FIN first,
// then whatever the proxy still sends is read and dropped until it closes
// too, so that no reset destroys the answer in flight.
func refuseAndClose(w http.ResponseWriter) {
	conn, buf, err := http.NewResponseController(w).Hijack()
	if err != nil {
		return
	}
	defer conn.Close()
	fmt.Fprintf(buf, "HTTP/1.1 429 Too Many Requests\r\nContent-Type: application/json\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s", len(duplexRefusal), duplexRefusal)
	if buf.Flush() != nil {
		return
	}
	if tc, ok := conn.(*net.TCPConn); ok {
		_ = tc.CloseWrite()
	}
	_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	_, _ = io.Copy(io.Discard, conn)
}

// duplexExchange is one request of a duplex run.
type duplexExchange struct {
	up        *duplexUpstream
	client    *http.Client
	url       string
	answer    string // "stream" or "refuse"
	body      []byte
	first     int
	length    bool // send a Content-Length, else none (chunked over HTTP/1.1)
	forwarded bool // the route forwards the body as it comes
}

// do sends the exchange as request id and reports what went wrong, or nil.
func (d duplexExchange) do(ctx context.Context, id string) error {
	pr, pw := io.Pipe()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, d.url, pr)
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(duplexAnswer, d.answer)
	req.Header.Set(duplexID, id)
	if d.length {
		req.ContentLength = int64(len(d.body))
	}
	headers := d.up.headers(id)
	defer d.up.forget(id)
	sent := make(chan error, 1)
	go func() {
		_, err := pw.Write(d.body[:d.first])
		if err == nil && d.forwarded {
			select {
			case <-headers:
			case <-time.After(duplexHeaderWait):
			}
		}
		if err == nil {
			_, err = pw.Write(d.body[d.first:])
		}
		pw.CloseWithError(err)
		sent <- err
	}()
	resp, err := d.client.Do(req)
	close(headers)
	if err != nil {
		pr.CloseWithError(err)
		<-sent
		return err
	}
	got, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	pr.Close()
	<-sent
	want, wantCode := bytes.Join(duplexStream(d.body), nil), http.StatusOK
	if d.answer == "refuse" {
		want, wantCode = []byte(duplexRefusal), http.StatusTooManyRequests
	}
	if err != nil || resp.StatusCode != wantCode || !bytes.Equal(got, want) {
		return fmt.Errorf("%s %s: got %d and %d bytes, then %v; want %d and %d bytes %q", resp.Proto, d.answer, resp.StatusCode, len(got), err, wantCode, len(want), got)
	}
	return nil
}

// smallReadBuffer makes the upstream's connections take a body slowly.
type smallReadBuffer struct{ net.Listener }

func (l smallReadBuffer) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetReadBuffer(16 << 10)
	}
	return c, err
}

// newDuplexHarness starts a duplexUpstream and a proxy to it whose
// connections to the upstream have small socket buffers (on both ends), so
// that the proxy is still sending a measured route's body of a hundred
// kilobytes or more when the upstream answers.
func newDuplexHarness(t *testing.T, first int) (*harness, *duplexUpstream) {
	up := &duplexUpstream{first: first, seen: map[string]chan struct{}{}}
	upstream := httptest.NewUnstartedServer(up)
	upstream.Listener = smallReadBuffer{upstream.Listener}
	upstream.Start()
	t.Cleanup(upstream.Close)
	h := newHarness(t, nil, func(c *Config, _ *metrics.Options) {
		c.Upstream, _ = url.Parse(upstream.URL)
		tr := transport.New(0, nil)
		dial := tr.DialContext
		tr.DialContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
			c, err := dial(ctx, network, addr)
			if tc, ok := c.(*net.TCPConn); ok {
				_ = tc.SetWriteBuffer(16 << 10)
			}
			return c, err
		}
		c.Transport = tr
	})
	return h, up
}

// runDuplex sends runs requests, six at a time, through a proxy to a
// duplexUpstream: on a forwarded route and on a measured one, streamed and
// refused, over HTTP/1.1 with a Content-Length or chunked and over h2c.
// Every response must reach the client whole.
func runDuplex(t *testing.T, runs int) {
	body, first := duplexBody(128 << 10)
	h, up := newDuplexHarness(t, first)
	h1 := &http.Client{Transport: &http.Transport{}}
	h2c := &http.Client{Transport: &http.Transport{Protocols: new(http.Protocols)}}
	h2c.Transport.(*http.Transport).Protocols.SetUnencryptedHTTP2(true)
	t.Cleanup(h1.CloseIdleConnections)
	t.Cleanup(h2c.CloseIdleConnections)
	var cases []duplexExchange
	for _, path := range []string{"/generate_stream", "/v1/chat/completions"} {
		for _, answer := range []string{"stream", "refuse"} {
			for _, c := range []struct {
				client *http.Client
				length bool
			}{{h1, true}, {h1, false}, {h2c, false}} {
				cases = append(cases, duplexExchange{up: up, client: c.client, url: h.proxy.URL + path, answer: answer,
					body: body, first: first, length: c.length, forwarded: path == "/generate_stream"})
			}
		}
	}
	var next, failed atomic.Int64
	var wg sync.WaitGroup
	for range 6 {
		wg.Go(func() {
			for i := next.Add(1) - 1; i < int64(runs); i = next.Add(1) - 1 {
				c := cases[i%int64(len(cases))]
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				err := c.do(ctx, strconv.FormatInt(i, 10))
				cancel()
				if err != nil && failed.Add(1) <= 5 {
					t.Errorf("request %d, %s, Content-Length %v: %v", i, strings.TrimPrefix(c.url, h.proxy.URL), c.length, err)
				}
			}
		})
	}
	wg.Wait()
	if n := failed.Load(); n > 0 {
		t.Errorf("%d of %d responses did not reach the client whole", n, runs)
	}
	h.waitServed(runs)
}

// TestFullDuplex: a response that starts before the request body has been
// read reaches the client whole, and the upstream gets the body whole, on
// every kind of route.
func TestFullDuplex(t *testing.T) {
	runDuplex(t, 600)
}

// TestFullDuplexSoak is TestFullDuplex for as many requests as
// ITLPROXY_DUPLEX_RUNS says.
func TestFullDuplexSoak(t *testing.T) {
	runs, _ := strconv.Atoi(os.Getenv("ITLPROXY_DUPLEX_RUNS"))
	if runs <= 0 {
		t.Skip("set ITLPROXY_DUPLEX_RUNS to a number of requests to run")
	}
	runDuplex(t, runs)
}

// TestAbandonedBody: the upstream refuses a forwarded request without
// reading its body, which the client goes on sending, or stops sending
// without ending. The client gets the whole refusal, told that the
// connection closes, and the proxy closes it soon after, not waiting for
// the rest of a body it will not forward.
func TestAbandonedBody(t *testing.T) {
	h, _ := newDuplexHarness(t, 0)
	for _, c := range []struct {
		name    string
		length  int64 // announced, else chunked
		flowing bool
	}{
		{"chunked, still sending", 0, true},
		{"chunked, stalled", 0, false},
		{"announced, still sending", 1000000, true},
		{"announced, stalled", 1000000, false},
		// Less than the 256 KiB the server would read looking for the end.
		{"announced, short, stalled", 100000, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			conn, err := net.Dial("tcp", strings.TrimPrefix(h.proxy.URL, "http://"))
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			piece, left := strings.Repeat("x", 4<<10), c.length-4<<10
			framing := "Content-Length: " + strconv.FormatInt(c.length, 10)
			if c.length == 0 {
				piece, left = fmt.Sprintf("%x\r\n%s\r\n", len(piece), piece), 1<<62
				framing = "Transfer-Encoding: chunked"
			}
			fmt.Fprintf(conn, "POST /upload HTTP/1.1\r\nHost: proxy\r\n%s\r\n%s: refuse\r\n\r\n%s", framing, duplexAnswer, piece)
			_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
			br := bufio.NewReader(conn)
			resp, err := http.ReadResponse(br, nil)
			if err != nil {
				t.Fatalf("no response: %v", err)
			}
			got, err := io.ReadAll(resp.Body)
			if resp.StatusCode != http.StatusTooManyRequests || string(got) != duplexRefusal || err != nil || !resp.Close {
				t.Errorf("got %s %q, %v, Connection: close %v; want the whole refusal, closing", resp.Status, got, err, resp.Close)
			}
			h.waitServed(1)
			sending := make(chan int64)
			go func() {
				var n int64
				for c.flowing && n < left {
					k, err := io.WriteString(conn, piece[:min(int64(len(piece)), left-n)])
					if n += int64(k); err != nil {
						break
					}
				}
				sending <- n
			}()
			start := time.Now()
			rest, err := io.Copy(io.Discard, br)
			var ne net.Error
			if rest != 0 || errors.As(err, &ne) && ne.Timeout() {
				t.Errorf("after the response: %d more bytes, then %v; want the connection closed", rest, err)
			}
			conn.Close()
			t.Logf("closed %v after the response, %d body bytes sent after it", time.Since(start), <-sending)
		})
	}
}

// TestFullDuplexUnsupported: behind a writer that hides EnableFullDuplex,
// requests are still forwarded; the proxy warns once, of an HTTP/1 one
// (an HTTP/2 stream is full duplex by nature).
func TestFullDuplexUnsupported(t *testing.T) {
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(w, r.Body)
	}))
	defer upstream.Close()
	core, logs := observer.New(zap.WarnLevel)
	rec, err := metrics.New(prometheus.NewRegistry(), metrics.Options{MaxModels: 4})
	if err != nil {
		t.Fatal(err)
	}
	u, _ := url.Parse(upstream.URL)
	p := New(Config{Upstream: u, MaxRequestBytes: 1 << 20, MaxEventBytes: 1 << 10}, rec, zap.New(core))
	defer p.CloseIdleConnections()
	for i, c := range []struct{ major, warnings int }{{2, 0}, {1, 1}, {1, 1}} {
		r := httptest.NewRequest(http.MethodPost, "/generate", strings.NewReader("prompt"))
		r.ProtoMajor = c.major
		w := httptest.NewRecorder()
		p.ServeHTTP(w, r)
		n := logs.FilterMessageSnippet("cannot read a request while it writes").Len()
		if w.Body.String() != "prompt" || n != c.warnings {
			t.Errorf("request %d, HTTP/%d: got %q, %d warnings so far; want the body back, %d", i, c.major, w.Body, n, c.warnings)
		}
	}
}
