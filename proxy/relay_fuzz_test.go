package proxy

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/itlproxy/itlproxy/metrics"
	"github.com/itlproxy/itlproxy/proxy/transport"
)

// replayUpstream answers each connection's first request with the bytes
// it is given, then closes the connection.
type replayUpstream struct {
	ln      net.Listener
	answers chan []byte
}

func newReplayUpstream(t testing.TB) *replayUpstream {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	u := &replayUpstream{ln: ln, answers: make(chan []byte, 1)}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			answer := <-u.answers
			go func() {
				defer c.Close()
				br := bufio.NewReader(c)
				req, err := http.ReadRequest(br)
				if err != nil {
					return
				}
				_, _ = io.Copy(io.Discard, req.Body)
				_, _ = c.Write(answer)
			}()
		}
	}()
	return u
}

// relayed is what a client got through a proxy, without what differs from
// one response to the next whatever the transport (the date, the request
// id the proxy makes).
type relayed struct {
	status  int
	header  http.Header
	body    []byte
	cut     bool // the body ended with an error
	trailer http.Header
}

func (r relayed) String() string {
	return fmt.Sprintf("%d %v body %q cut %v trailer %v", r.status, r.header, r.body, r.cut, r.trailer)
}

func (r relayed) equal(o relayed) bool {
	if r.cut && o.cut && (r.status == 0) != (o.status == 0) {
		// A body that fails at its first read races
		// httputil.ReverseProxy's first flush of the headers: the client
		// gets the headers and a cut body, or the connection closed and no
		// response, whatever the transport.
		return len(r.body) == 0 && len(o.body) == 0
	}
	eq := func(a, b http.Header) bool {
		return slices.EqualFunc(sortedKeys(a), sortedKeys(b), func(x, y string) bool { return x == y && slices.Equal(a[x], b[y]) })
	}
	return r.status == o.status && eq(r.header, o.header) && bytes.Equal(r.body, o.body) && r.cut == o.cut && eq(r.trailer, o.trailer)
}

func sortedKeys(h http.Header) []string {
	keys := make([]string, 0, len(h))
	for k := range h {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// relayThrough sends a streaming chat request through proxy, whose
// upstream answers with answer, and returns what the client got.
func relayThrough(t *testing.T, client *http.Client, proxy string, up *replayUpstream, answer []byte) relayed {
	select {
	case <-up.answers: // an answer no connection took: the last request never reached the upstream
	default:
	}
	up.answers <- answer
	req, _ := http.NewRequest(http.MethodPost, proxy+"/v1/chat/completions", strings.NewReader(`{"model":"m","stream":true}`))
	req.Header.Set("X-Request-Id", "fixed")
	resp, err := client.Do(req)
	if err != nil {
		// The proxy aborted the response before its headers left (a body
		// that failed before the first flush).
		return relayed{cut: true}
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	h := resp.Header.Clone()
	h.Del("Date")
	// httputil.ReverseProxy flushes the headers of a body of unknown length
	// on a timer that fires at once, on another goroutine: when the
	// handler's first write or its end wins that race, Go's server sniffs
	// a type for a response that has none, or frames a body that ended
	// with a Content-Length. Whatever the transport, that is the reverse
	// proxy's own race: the bytes of the body are compared, not how Go's
	// server framed them.
	if up, err := http.ReadResponse(bufio.NewReader(bytes.NewReader(answer)), nil); err == nil && up.Header.Get("Content-Type") == "" {
		h.Del("Content-Type")
	}
	if up, err := http.ReadResponse(bufio.NewReader(bytes.NewReader(answer)), nil); err == nil && up.Header.Get("Content-Length") == "" {
		h.Del("Content-Length")
	}
	return relayed{status: resp.StatusCode, header: h, body: body, cut: err != nil, trailer: resp.Trailer}
}

// FuzzRelayMatchesTransport: whatever an upstream answers, a client gets
// the same through the proxy over its lean transport as over Go's
// http.Transport: the same status, headers, body bytes, trailers, and the
// same cut when the body ends badly.
func FuzzRelayMatchesTransport(f *testing.F) {
	for _, seed := range []string{
		"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n" +
			"1c\r\ndata: {\"choices\":[{\"delta\":\r\n" + "1a\r\n{\"content\":\"hi\"}}]}\n\n\r\n" + "e\r\ndata: [DONE]\n\n\r\n0\r\n\r\n",
		"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 12\r\n\r\n{\"usage\":{}}",
		"HTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok",
		"HTTP/1.1 200 OK\r\nTrailer: X-T\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nok\r\n0\r\nX-T: 1\r\n\r\n",
		"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nshort",
		"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
		"HTTP/1.0 200 OK\r\nContent-Type: text/event-stream\r\n\r\ndata: x\n\n",
		"HTTP/1.1 204 No Content\r\nContent-Length: 3\r\n\r\nabc",
		"HTTP/1.1 429 Too Many Requests\r\nRetry-After: 1\r\nContent-Length: 0\r\n\r\n",
		"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\nok",
		"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n",
		"garbage\r\n\r\n",
		"",
	} {
		f.Add([]byte(seed))
	}
	newProxy := func(rt http.RoundTripper, up *replayUpstream) *httptest.Server {
		m, err := metrics.New(prometheus.NewRegistry(), metrics.Options{MaxModels: 4})
		if err != nil {
			f.Fatal(err)
		}
		u, _ := url.Parse("http://" + up.ln.Addr().String())
		p := New(Config{Upstream: u, MaxRequestBytes: 1 << 20, MaxEventBytes: 1 << 20, Transport: rt}, m, zap.NewNop())
		srv := httptest.NewUnstartedServer(p)
		srv.Config.DisableGeneralOptionsHandler = true
		srv.Config.ErrorLog = nil
		srv.Start()
		f.Cleanup(srv.Close)
		return srv
	}
	up := newReplayUpstream(f)
	lean, standard := transport.NewLean(5*time.Second, nil), transport.New(5*time.Second, nil)
	viaLean, viaStandard := newProxy(lean, up), newProxy(standard, up)
	client := &http.Client{Transport: &http.Transport{DisableCompression: true}, Timeout: 10 * time.Second}
	f.Fuzz(func(t *testing.T, answer []byte) {
		if len(answer) > 64<<10 {
			return
		}
		// Each request on a new upstream connection: the upstream closes
		// each one after its answer, and a connection kept would race that.
		a := relayThrough(t, client, viaLean.URL, up, answer)
		lean.CloseIdleConnections()
		b := relayThrough(t, client, viaStandard.URL, up, answer)
		standard.CloseIdleConnections()
		client.CloseIdleConnections()
		if !a.equal(b) {
			t.Fatalf("for the upstream's %q,\nover Lean:           %v\nover http.Transport: %v", answer, a, b)
		}
	})
}
