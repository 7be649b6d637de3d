package proxy

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/gobwas/ws"

	"github.com/itlproxy/itlproxy/internal/e2e"
	"github.com/itlproxy/itlproxy/metrics"
)

// tapConn keeps every byte a connection reads and writes.
type tapConn struct {
	net.Conn
	mu      sync.Mutex
	in, out bytes.Buffer
	closed  chan struct{}
	once    sync.Once
}

func newTap(c net.Conn) *tapConn { return &tapConn{Conn: c, closed: make(chan struct{})} }

func (c *tapConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.mu.Lock()
	c.in.Write(p[:n])
	c.mu.Unlock()
	return n, err
}

func (c *tapConn) Write(p []byte) (int, error) {
	n, err := c.Conn.Write(p)
	c.mu.Lock()
	c.out.Write(p[:n])
	c.mu.Unlock()
	return n, err
}

func (c *tapConn) Close() error {
	c.once.Do(func() { close(c.closed) })
	return c.Conn.Close()
}

// afterHeaders returns what followed the HTTP header block (the handshake)
// in b: the WebSocket's bytes.
func afterHeaders(b []byte) []byte {
	if i := bytes.Index(b, []byte("\r\n\r\n")); i >= 0 {
		return b[i+4:]
	}
	return nil
}

// tapListener taps every connection it accepts.
type tapListener struct {
	net.Listener
	taps chan *tapConn
}

func (l tapListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	t := newTap(c)
	l.taps <- t
	return t, nil
}

// bigAppend is a client event of about mib MiB: random audio, base64,
// which compresses little.
func bigAppend(t *testing.T, mib int) string {
	audio := make([]byte, mib*3<<18)
	if _, err := rand.Read(audio); err != nil {
		t.Fatal(err)
	}
	return `{"type":"input_audio_buffer.append","audio":"` + base64.StdEncoding.EncodeToString(audio) + `"}`
}

// TestRealtimeFramesPassUnchanged sends a session through the proxy and
// compares, byte for byte, what each end wrote with what the other read
// after the handshake: real WebSocket implementations at both ends
// (coder/websocket), uncompressed with a 10 MiB client message (one
// frame) between two responses, and compressed with context takeover with
// a 2 MiB one (inflating 10 MiB three times over under -race takes
// seconds); and a client that writes its frames by hand (gobwas/ws): a
// response.create fragmented in three frames with pings between them,
// each frame cut in small writes. The large message passes whole, is
// counted unmeasured (event_too_large) without being held, and the
// responses on either side of it are measured.
func TestRealtimeFramesPassUnchanged(t *testing.T) {
	for _, tc := range []struct {
		name string
		mode websocket.CompressionMode
		big  int // MiB
		raw  bool
	}{
		{"uncompressed", websocket.CompressionDisabled, 10, false},
		{"deflate", websocket.CompressionContextTakeover, 2, false},
		{"hand-made frames", websocket.CompressionDisabled, 0, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			plan, _ := e2e.ParsePlan("kind=audio deltas=10 ttft=10ms gap=2ms-5ms")
			var received []string
			var mu sync.Mutex
			up := &e2e.RealtimeUpstream{Compression: tc.mode, Default: plan, Log: func(from string, msg []byte, _ time.Time) {
				if from == "client" {
					mu.Lock()
					received = append(received, string(msg))
					mu.Unlock()
				}
			}}
			server := httptest.NewUnstartedServer(up)
			taps := make(chan *tapConn, 4)
			server.Listener = tapListener{server.Listener, taps}
			server.Start()
			defer server.Close()
			h := newHarness(t, nil, func(c *Config, _ *metrics.Options) { c.Upstream, _ = url.Parse(server.URL) })

			var client *tapConn
			var sent []string
			if tc.raw {
				client, sent = handMadeSession(t, h)
			} else {
				client, sent = librarySession(t, h, tc.mode, bigAppend(t, tc.big))
			}
			h.waitServed(1)
			var upstream *tapConn
			select {
			case upstream = <-taps:
			case <-time.After(5 * time.Second):
				t.Fatal("the upstream saw no connection")
			}
			for _, end := range []*tapConn{upstream, client} {
				select {
				case <-end.closed:
				case <-time.After(10 * time.Second):
					t.Fatal("a connection was not closed")
				}
			}
			client.mu.Lock()
			upstream.mu.Lock()
			defer client.mu.Unlock()
			defer upstream.mu.Unlock()
			if compressed := bytes.Contains(client.in.Bytes(), []byte("permessage-deflate")); compressed != (tc.mode != websocket.CompressionDisabled) {
				t.Errorf("the 101 response negotiated permessage-deflate: %v", compressed)
			}
			for _, dir := range []struct {
				what       string
				wrote, got []byte
			}{
				{"client to upstream", afterHeaders(client.out.Bytes()), afterHeaders(upstream.in.Bytes())},
				{"upstream to client", afterHeaders(upstream.out.Bytes()), afterHeaders(client.in.Bytes())},
			} {
				if len(dir.wrote) == 0 || !bytes.Equal(dir.wrote, dir.got) {
					t.Errorf("%s: wrote %d bytes, %d arrived, equal %v", dir.what, len(dir.wrote), len(dir.got), bytes.Equal(dir.wrote, dir.got))
				}
			}
			mu.Lock()
			defer mu.Unlock()
			if strings.Join(received, "\n") != strings.Join(sent, "\n") {
				t.Errorf("the upstream read %d messages, the client sent %d", len(received), len(sent))
			}
			labels := []string{"endpoint", "realtime"}
			if got := h.counter("itlproxy_streams_total", append(labels, "outcome", metrics.OutcomeCompleted)...); got != 2 {
				t.Errorf("%v responses completed, want 2", got)
			}
			if n, _ := h.hist("itlproxy_inter_token_latency_seconds", labels...); n != 18 {
				t.Errorf("%d gaps, want 18", n)
			}
			wantTooLarge := 1.0
			if tc.raw {
				wantTooLarge = 0
			}
			if got := h.counter("itlproxy_parse_failures_total", append(labels, "reason", metrics.ParseEventTooLarge)...); got != wantTooLarge {
				t.Errorf("%v messages counted too large, want %v", got, wantTooLarge)
			}
			if got := h.counter("itlproxy_parse_failures_total"); got != wantTooLarge {
				t.Errorf("%v parse failures in all, want %v", got, wantTooLarge)
			}
		})
	}
}

// librarySession runs a session with coder/websocket: a response, the
// big message, a response, a normal close. It returns the client's tap
// and the messages it sent.
func librarySession(t *testing.T, h *harness, mode websocket.CompressionMode, big string) (*tapConn, []string) {
	var client *tapConn
	transport := &http.Transport{DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := (&net.Dialer{}).DialContext(ctx, network, addr)
		if err == nil {
			client = newTap(c)
			return client, nil
		}
		return nil, err
	}}
	defer transport.CloseIdleConnections()
	url := strings.Replace(h.proxy.URL, "http://", "ws://", 1) + "/v1/realtime?model=m"
	c, _, err := websocket.Dial(context.Background(), url, &websocket.DialOptions{CompressionMode: mode, HTTPClient: &http.Client{Transport: transport}})
	if err != nil {
		t.Fatal(err)
	}
	c.SetReadLimit(64 << 20)
	rc := &rtClient{t: t, c: c}
	rc.respond(create("kind=audio deltas=10 ttft=10ms gap=2ms-5ms"), 0)
	rc.send(big)
	rc.respond(`{"type":"response.create"}`, 0)
	if err := c.Close(websocket.StatusNormalClosure, ""); err != nil {
		t.Errorf("close: %v", err)
	}
	return client, []string{create("kind=audio deltas=10 ttft=10ms gap=2ms-5ms"), big, `{"type":"response.create"}`}
}

// handMadeSession writes its frames by hand, in small writes, and reads
// the server's frames until each response.done, twice; then a Close.
func handMadeSession(t *testing.T, h *harness) (*tapConn, []string) {
	var client *tapConn
	d := ws.Dialer{NetDial: func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := (&net.Dialer{}).DialContext(ctx, network, addr)
		if err == nil {
			client = newTap(c)
			return client, nil
		}
		return nil, err
	}}
	conn, br, _, err := d.Dial(context.Background(), strings.Replace(h.proxy.URL, "http://", "ws://", 1)+"/v1/realtime?model=m")
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	var in io.Reader = conn
	if br != nil {
		in = io.MultiReader(br, conn)
	}
	r := bufio.NewReader(in)
	mask := [4]byte{0xa1, 0xb2, 0xc3, 0xd4}
	write := func(op ws.OpCode, fin bool, payload string) {
		f := ws.MaskFrameWith(ws.NewFrame(op, fin, []byte(payload)), mask)
		b, err := ws.CompileFrame(f)
		if err != nil {
			t.Fatal(err)
		}
		for len(b) > 0 { // cut every 3 bytes: headers arrive in pieces
			n := min(3, len(b))
			if _, err := conn.Write(b[:n]); err != nil {
				t.Fatal(err)
			}
			b = b[n:]
			time.Sleep(100 * time.Microsecond)
		}
	}
	waitDone := func() {
		for {
			f, err := ws.ReadFrame(r)
			if err != nil {
				t.Fatalf("read: %v", err)
			}
			if bytes.Contains(f.Payload, []byte(`"type":"response.done"`)) {
				return
			}
		}
	}
	first := create("kind=audio deltas=10 ttft=10ms gap=2ms-5ms")
	write(ws.OpText, false, first[:10])
	write(ws.OpPing, true, "p1")
	write(ws.OpContinuation, false, first[10:30])
	write(ws.OpPing, true, "p2")
	write(ws.OpContinuation, true, first[30:])
	waitDone()
	write(ws.OpText, true, `{"type":"response.create"}`)
	waitDone()
	write(ws.OpClose, true, string(ws.NewCloseFrameBody(ws.StatusNormalClosure, "")))
	// The server answers the Close, then closes its end.
	for {
		if _, err := ws.ReadFrame(r); err != nil {
			break
		}
	}
	return client, []string{first, `{"type":"response.create"}`}
}

// TestRealtimeUnreadableStillForwarded: what the measurement cannot read
// (a message that is not JSON, a frame with a reserved opcode, after
// which nothing of that direction can be followed) reaches the client
// byte for byte, and is counted.
func TestRealtimeUnreadableStillForwarded(t *testing.T) {
	sent := make(chan []byte, 1)
	h := newHarness(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var wrote []byte
		defer func() { sent <- wrote }()
		conn, _, _, err := ws.UpgradeHTTP(r, w)
		if err != nil {
			return
		}
		defer conn.Close()
		for _, f := range []ws.Frame{
			ws.NewTextFrame([]byte(`not json`)),
			ws.NewTextFrame([]byte(`{"type":"response.created","response":{"id":"resp_x"}}`)),
			ws.NewFrame(3, true, []byte("reserved")),
			ws.NewTextFrame([]byte(`{"type":"response.output_text.delta","response_id":"resp_x","delta":"unread"}`)),
		} {
			b, _ := ws.CompileFrame(f)
			wrote = append(wrote, b...)
			if _, err := conn.Write(b); err != nil {
				return
			}
		}
	}))
	conn, br, _, err := ws.Dial(context.Background(), strings.Replace(h.proxy.URL, "http://", "ws://", 1)+"/v1/realtime?model=m")
	if err != nil {
		t.Fatal(err)
	}
	var in io.Reader = conn
	if br != nil {
		in = io.MultiReader(br, conn)
	}
	got, _ := io.ReadAll(in)
	conn.Close()
	h.waitServed(1)
	if wrote := <-sent; !bytes.Equal(got, wrote) {
		t.Errorf("the client got %q, the upstream wrote %q", got, wrote)
	}
	for reason, want := range map[string]float64{metrics.ParseInvalidJSON: 1, metrics.ParseInvalidFrame: 1} {
		if n := h.counter("itlproxy_parse_failures_total", "endpoint", "realtime", "reason", reason); n != want {
			t.Errorf("%s: %v, want %v", reason, n, want)
		}
	}
	if n := h.counter("itlproxy_streams_total", "endpoint", "realtime", "outcome", metrics.OutcomeUpstreamError); n != 1 {
		t.Errorf("the response the upstream left: %v upstream errors, want 1", n)
	}
}
