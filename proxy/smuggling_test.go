package proxy

import (
	"bufio"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/itlproxy/itlproxy/metrics"
)

// rawConn speaks HTTP/1 byte for byte on one TCP connection.
type rawConn struct {
	t  testing.TB
	c  net.Conn
	br *bufio.Reader
}

func dialRaw(t testing.TB, addr string) *rawConn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return &rawConn{t: t, c: c, br: bufio.NewReader(c)}
}

// send writes b. Its error is not checked: a connection the server
// closed shows in the next answer.
func (c *rawConn) send(b string) { _, _ = io.WriteString(c.c, b) }

// answer reads the next final response (after any 100 Continue): its
// status, and the code of the error in its body if it has one; 0 when
// the connection ends without one.
func (c *rawConn) answer() (status int, code string) {
	_ = c.c.SetReadDeadline(time.Now().Add(10 * time.Second))
	for {
		resp, err := http.ReadResponse(c.br, nil)
		if err != nil {
			return 0, ""
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode >= 200 {
			var e apiError
			_ = json.Unmarshal(body, &e)
			return resp.StatusCode, e.Error.Code
		}
	}
}

// loggingUpstream returns an upstream that answers "ok" and the
// requests it saw, as "METHOD target body", in order.
func loggingUpstream() (http.Handler, func() []string) {
	seen := make(chan string, 1024)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			b, _ := io.ReadAll(r.Body)
			seen <- r.Method + " " + r.RequestURI + " " + string(b)
			_, _ = io.WriteString(w, "ok")
		}), func() []string {
			var out []string
			for len(seen) > 0 {
				out = append(out, <-seen)
			}
			return out
		}
}

// A request hidden in the body of an ambiguous one: read by its
// Content-Length, the ambiguous request's body holds the hidden request;
// read by its Transfer-Encoding, as Go reads it, the body ends at the zero
// chunk and the hidden request follows on the connection.
const (
	hiddenRequest    = "GET /smuggled HTTP/1.1\r\nHost: x\r\n\r\n"
	ambiguousRequest = "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 40\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n" + hiddenRequest
	// ambiguousUpstream is what the upstream sees of it: the request, read
	// by its Transfer-Encoding, with an empty body.
	ambiguousUpstream = "POST /v1/chat/completions "
	cleanRequest      = "GET /clean HTTP/1.1\r\nHost: x\r\n\r\n"
)

// http1Only makes the harness's listener serve HTTP/1 only, as the
// command's does without ITLPROXY_H2C (the command's own test covers h2c
// on), then applies server's settings, if any.
func http1Only(server func(*http.Server)) func(*http.Server) {
	return func(s *http.Server) {
		s.Protocols = new(http.Protocols)
		s.Protocols.SetHTTP1(true)
		if server != nil {
			server(s)
		}
	}
}

// TestAmbiguousRequestClosesTheConnection: on one connection, a plain
// request, then an ambiguous one with a request hidden in its body: both
// are served (the ambiguous one by its Transfer-Encoding, as RFC 9112
// section 6.1 allows), the connection closes after the second answer, and
// the hidden request never reaches the upstream.
func TestAmbiguousRequestClosesTheConnection(t *testing.T) {
	if len(ambiguousRequest)-strings.Index(ambiguousRequest, "\r\n\r\n")-4 != 40 {
		t.Fatal("the ambiguous request's Content-Length does not cover the hidden request")
	}
	upstream, seen := loggingUpstream()
	h := newHarness(t, upstream)
	c := dialRaw(t, h.proxy.Listener.Addr().String())
	c.send("GET /first HTTP/1.1\r\nHost: x\r\n\r\n")
	if code, _ := c.answer(); code != 200 {
		t.Errorf("first request: %d", code)
	}
	c.send(ambiguousRequest)
	if code, reason := c.answer(); code != 200 {
		t.Errorf("ambiguous request: %d %s, want 200", code, reason)
	}
	if code, reason := c.answer(); code != 0 {
		t.Errorf("an answer after the ambiguous request: %d %s; want the connection closed", code, reason)
	}
	h.waitServed(2)
	if got := seen(); !slices.Equal(got, []string{"GET /first ", ambiguousUpstream}) {
		t.Errorf("the upstream saw %q", got)
	}
}

// framingPath is a request that Go's server answers itself, that the
// proxy answers itself, or that Go handles in a way of its own, before an
// ambiguous request on the same connection.
type framingPath struct {
	name     string
	req      string
	status   int    // the answer to it
	code     string // the error code in the answer's body, if it has one
	upstream string // what the upstream sees of it ("": nothing)
	closes   bool   // the connection ends after it
	server   func(*http.Server)
}

func framingPaths() []framingPath {
	const chunked = "Transfer-Encoding: chunked\r\n\r\n"
	return []framingPath{
		// Answered by the proxy as Go would, the connection kept.
		{name: "OPTIONS *", req: "OPTIONS * HTTP/1.1\r\nHost: x\r\n\r\n", status: 200},
		{name: "OPTIONS * with a body", req: "OPTIONS * HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello", status: 200},
		// Answered by the proxy, the connection closed: it was chunked.
		{name: "OPTIONS * with a chunked body", req: "OPTIONS * HTTP/1.1\r\nHost: x\r\n" + chunked + "5\r\nhello\r\n0\r\n\r\n", status: 200, closes: true},
		{name: "OPTIONS *, ambiguous itself", req: "OPTIONS * HTTP/1.1\r\nHost: x\r\nContent-Length: 40\r\n" + chunked + "0\r\n\r\n" + hiddenRequest, status: 200, closes: true},
		// Served by the handler, in a way of Go's own.
		{name: "HTTP/1.2", req: "GET /twelve HTTP/1.2\r\nHost: x\r\n\r\n", status: 200, upstream: "GET /twelve "},
		{name: "Expect: 100-continue", req: "POST /expect HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: 2\r\n\r\n{}", status: 200, upstream: "POST /expect {}"},
		{name: "an Upgrade not switched", req: "GET /ws HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n", status: 200, upstream: "GET /ws "},
		{name: "CONNECT", req: "CONNECT example.com:443 HTTP/1.1\r\nHost: example.com:443\r\n\r\n", status: 200, upstream: "CONNECT / "},
		{name: "CR LF after a POST", req: "POST /crlf HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}\r\n", status: 200, upstream: "POST /crlf {}"},
		// Served, the connection closed after: a Transfer-Encoding, or
		// HTTP/1.0, whose Transfer-Encoding Go drops unseen.
		{name: "HTTP/1.0 keep-alive", req: "GET /ten HTTP/1.0\r\nConnection: keep-alive\r\n\r\n", status: 200, upstream: "GET /ten ", closes: true},
		{name: "HTTP/1.0 Transfer-Encoding, ignored", req: "GET /ten HTTP/1.0\r\nConnection: keep-alive\r\n" + chunked, status: 200, upstream: "GET /ten ", closes: true},
		{name: "HTTP/1.0, ambiguous", req: "POST /ten HTTP/1.0\r\nConnection: keep-alive\r\nContent-Length: 5\r\n" + chunked + "0\r\n\r\n" + hiddenRequest,
			status: 200, upstream: "POST /ten 0\r\n\r\n", closes: true},
		{name: "a chunked POST", req: "POST /chunked HTTP/1.1\r\nHost: x\r\n" + chunked + "2;x=y\r\nab\r\n1\r\nc\r\n0\r\n\r\n", status: 200, upstream: "POST /chunked abc", closes: true},
		{name: "a folded Transfer-Encoding", req: "POST /fold HTTP/1.1\r\nHost: x\r\nTransfer-Encoding:\r\n chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n", status: 200, upstream: "POST /fold abc", closes: true},
		{name: "a trailer", req: "POST /trailer HTTP/1.1\r\nHost: x\r\n" + chunked + "3\r\nabc\r\n0\r\nX-T: 1\r\n\r\n", status: 200, upstream: "POST /trailer abc", closes: true},
		{name: "ambiguous, Transfer-Encoding first", req: "POST /x HTTP/1.1\r\nHost: x\r\ntransfer-encoding: chunked\r\ncontent-length: 40\r\n\r\n0\r\n\r\n" + hiddenRequest,
			status: 200, upstream: "POST /x ", closes: true},
		{name: "ambiguous, folded", req: "POST /x HTTP/1.1\r\nHost: x\r\nContent-Length: 40\r\nTransfer-Encoding:\r\n\tchunked\r\n\r\n0\r\n\r\n" + hiddenRequest,
			status: 200, upstream: "POST /x ", closes: true},
		{name: "the HTTP/2 preface", req: "PRI * HTTP/2.0\r\n\r\n", status: 200, upstream: "PRI /%2A ", closes: true},
		// Refused by the proxy, the connection closed.
		{name: "a body over the bound", req: "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 2000000\r\n\r\n{}", status: 413, code: "request_too_large", closes: true},
		{name: "a malformed chunked body", req: "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n" + chunked + "zz\r\n", status: 400, code: "unreadable_body", closes: true},
		{name: "an Upgrade with a chunked body", req: "GET /ws HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n" + chunked + "0\r\n\r\n" + hiddenRequest,
			status: 400, code: "upgrade_with_body", closes: true},
		{name: "an HTTP/1.0 Upgrade", req: "GET /ws HTTP/1.0\r\nConnection: keep-alive, Upgrade\r\nUpgrade: websocket\r\n\r\n", status: 400, code: "upgrade_with_body", closes: true},
		// Answered by Go, the connection closed.
		{name: "a malformed request line", req: "GET /\r\n\r\n", status: 400, closes: true},
		{name: "no Host", req: "GET / HTTP/1.1\r\n\r\n", status: 400, closes: true},
		{name: "a bad Host", req: "GET / HTTP/1.1\r\nHost: a b\r\n\r\n", status: 400, closes: true},
		{name: "a header line without a colon", req: "GET / HTTP/1.1\r\nHost: x\r\nNo colon\r\n\r\n", status: 400, closes: true},
		{name: "an unknown Expect", req: "POST / HTTP/1.1\r\nHost: x\r\nExpect: nope\r\nContent-Length: 2\r\n\r\n{}", status: 417, closes: true},
		{name: "an unknown Transfer-Encoding", req: "POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip\r\n\r\n", status: 501, closes: true},
		{name: "HTTP/3.0", req: "GET / HTTP/3.0\r\nHost: x\r\n\r\n", status: 505, closes: true},
		{name: "headers over MaxHeaderBytes", req: "GET / HTTP/1.1\r\nHost: x\r\nX: " + strings.Repeat("a", 8<<10) + "\r\n\r\n", status: 431, closes: true,
			server: func(s *http.Server) { s.MaxHeaderBytes = 1 << 10 }},
	}
}

// TestSmugglingPaths: after each path on a connection, an ambiguous
// request with a request hidden in its body is served by its
// Transfer-Encoding and closes the connection (or is never answered, when
// the path closed it), and a clean request is forwarded, sent one by one
// or pipelined. The upstream sees exactly the requests the proxy
// forwards, in order, and never the hidden one. The listener serves
// HTTP/1 only, as the command's does without ITLPROXY_H2C (its own test
// covers h2c on too).
func TestSmugglingPaths(t *testing.T) {
	for _, p := range framingPaths() {
		t.Run(p.name, func(t *testing.T) {
			upstream, seen := loggingUpstream()
			h := startHarness(t, upstream, http1Only(p.server), func(c *Config, _ *metrics.Options) { c.MaxRequestBytes = 1 << 10 })
			var want []string
			for _, then := range [][]string{{ambiguousRequest}, {cleanRequest, ambiguousRequest}} {
				for _, pipelined := range []bool{false, true} {
					want = append(want, p.followedBy(t, h.proxy.Listener.Addr().String(), then, pipelined)...)
					if p.closes {
						break // nothing follows on the connection anyway
					}
				}
			}
			if got := seen(); !slices.Equal(got, want) {
				t.Errorf("the upstream saw %q, want %q", got, want)
			}
		})
	}
}

// followedBy sends the path and then the requests then on a new
// connection, one at a time or all at once, checks the answers, and
// returns what the upstream should have seen.
func (p framingPath) followedBy(t *testing.T, addr string, then []string, pipelined bool) (upstream []string) {
	t.Helper()
	c := dialRaw(t, addr)
	if pipelined && !p.closes {
		c.send(p.req + strings.Join(then, ""))
	} else {
		c.send(p.req)
	}
	if code, reason := c.answer(); code != p.status || reason != p.code {
		t.Errorf("pipelined %v: %d %s, want %d %s", pipelined, code, reason, p.status, p.code)
	}
	if p.upstream != "" {
		upstream = append(upstream, p.upstream)
	}
	for _, req := range then {
		if !pipelined || p.closes {
			c.send(req)
		}
		code, reason := c.answer()
		switch {
		case p.closes:
			if code != 0 {
				t.Errorf("%q after the connection should have closed: %d %s", req, code, reason)
			}
			return upstream
		case req == cleanRequest:
			if code != 200 {
				t.Errorf("pipelined %v: the clean request got %d %s", pipelined, code, reason)
			}
			upstream = append(upstream, "GET /clean ")
		case code != 200:
			t.Errorf("pipelined %v: the ambiguous request got %d %s, want 200", pipelined, code, reason)
		default:
			upstream = append(upstream, ambiguousUpstream)
		}
	}
	if code, reason := c.answer(); code != 0 {
		t.Errorf("pipelined %v: an answer after the ambiguous request: %d %s", pipelined, code, reason)
	}
	return upstream
}

// TestCloseSurvivesInformationalResponses: the reverse proxy clears the
// response's headers after relaying a 1xx, and the connection of a chunked
// request still closes after the final response; a request with a
// Content-Length keeps its connection.
func TestCloseSurvivesInformationalResponses(t *testing.T) {
	upstream := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.ReadAll(r.Body)
		w.Header().Set("Link", "</style.css>; rel=preload")
		w.WriteHeader(http.StatusEarlyHints)
		_, _ = io.WriteString(w, "ok")
	})
	h := startHarness(t, upstream, http1Only(nil))
	for _, tc := range []struct {
		name, req string
		closes    bool
	}{
		{"chunked", "POST /hints HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n", true},
		{"with a length", "POST /hints HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}", false},
	} {
		c := dialRaw(t, h.proxy.Listener.Addr().String())
		c.send(tc.req + cleanRequest)
		if code, _ := c.answer(); code != 200 {
			t.Errorf("%s: %d", tc.name, code)
		}
		if code, _ := c.answer(); (code == 0) != tc.closes {
			t.Errorf("%s: the next request on the connection got %d; closed wanted %v", tc.name, code, tc.closes)
		}
	}
}
