package transport

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// countingServer is an upstream that counts the connections it accepts.
func countingServer(t *testing.T, h http.Handler, config ...func(*http.Server)) (*httptest.Server, *atomic.Int64) {
	t.Helper()
	var conns atomic.Int64
	srv := httptest.NewUnstartedServer(h)
	for _, c := range config {
		c(srv.Config)
	}
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	srv.Start()
	t.Cleanup(srv.Close)
	return srv, &conns
}

// post is a request with a body the proxy holds, as a measured route's is.
func post(t *testing.T, url, body string) *http.Request {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	return req
}

func roundTrip(t *testing.T, rt http.RoundTripper, req *http.Request) (int, string, error) {
	t.Helper()
	resp, err := rt.RoundTrip(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), err
}

// TestLeanKeepsConnections: requests one after another, with and without
// bodies, with chunked and fixed-length responses, go over one connection;
// each gets its whole response.
func TestLeanKeepsConnections(t *testing.T) {
	srv, conns := countingServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		if r.URL.Path == "/chunked" {
			w.(http.Flusher).Flush()
		}
		_, _ = io.WriteString(w, r.Method+" "+string(b))
	}))
	lean := NewLean(0, nil)
	defer lean.CloseIdleConnections()
	for i := range 10 {
		req, _ := http.NewRequest(http.MethodGet, srv.URL+"/fixed", nil)
		if i%2 == 1 {
			req = post(t, srv.URL+"/chunked", "hello")
		}
		code, body, err := roundTrip(t, lean, req)
		if err != nil || code != 200 || body != req.Method+map[bool]string{true: " hello", false: " "}[i%2 == 1] {
			t.Fatalf("request %d: %d %q %v", i, code, body, err)
		}
	}
	if n := conns.Load(); n != 1 {
		t.Errorf("%d connections for 10 requests one after another, want 1", n)
	}
}

// TestLeanStaleConnection: a connection the server closed while it was
// idle is not used again: the next request goes over a new one and
// succeeds, as with http.Transport.
func TestLeanStaleConnection(t *testing.T) {
	for name, rt := range map[string]interface {
		http.RoundTripper
		CloseIdleConnections()
	}{"lean": NewLean(0, nil), "http.Transport": New(0, nil)} {
		t.Run(name, func(t *testing.T) {
			defer rt.CloseIdleConnections()
			srv, conns := countingServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				_, _ = io.WriteString(w, "ok")
			}), func(s *http.Server) { s.IdleTimeout = 50 * time.Millisecond })
			for i := range 3 {
				if code, body, err := roundTrip(t, rt, post(t, srv.URL, "x")); err != nil || code != 200 || body != "ok" {
					t.Fatalf("request %d: %d %q %v", i, code, body, err)
				}
				time.Sleep(200 * time.Millisecond) // the server closes the idle connection
			}
			if n := conns.Load(); n != 3 {
				t.Errorf("%d connections, want 3 (one per request, each closed while idle)", n)
			}
		})
	}
}

// scriptedServer answers each connection's requests with the answers
// given for it, in order: an answer "" closes the connection once the
// request is read, without a response.
func scriptedServer(t *testing.T, perConn [][]string) (addr string, requests func() []string) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	var mu sync.Mutex
	var seen []string
	go func() {
		for _, answers := range perConn {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				br := bufio.NewReader(c)
				for _, a := range answers {
					req, err := http.ReadRequest(br)
					if err != nil {
						return
					}
					b, _ := io.ReadAll(req.Body)
					mu.Lock()
					seen = append(seen, req.Method+" "+string(b))
					mu.Unlock()
					if a == "" {
						return
					}
					_, _ = io.WriteString(c, a)
				}
				_, _ = io.Copy(io.Discard, br) // keep the connection until the client closes it
			}()
		}
	}()
	return "http://" + ln.Addr().String(), func() []string {
		mu.Lock()
		defer mu.Unlock()
		return append([]string(nil), seen...)
	}
}

const okAnswer = "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"

// TestLeanRetriesAsTransportDoes: on a reused connection that the server
// closes after reading a request, without answering, an idempotent request
// is sent again on a new connection and a POST is not (it may have been
// acted on): Lean does what http.Transport does, and the server sees the
// same requests.
func TestLeanRetriesAsTransportDoes(t *testing.T) {
	for _, method := range []string{http.MethodGet, http.MethodPost} {
		var outcomes []string
		for _, rt := range []interface {
			http.RoundTripper
			CloseIdleConnections()
		}{NewLean(0, nil), New(0, nil)} {
			url, seen := scriptedServer(t, [][]string{{okAnswer, ""}, {okAnswer}})
			first, _ := http.NewRequest(method, url, strings.NewReader("1"))
			first.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(strings.NewReader("1")), nil }
			if code, _, err := roundTrip(t, rt, first); err != nil || code != 200 {
				t.Fatalf("%s: the first request: %d %v", method, code, err)
			}
			second, _ := http.NewRequest(method, url, strings.NewReader("2"))
			second.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(strings.NewReader("2")), nil }
			code, body, err := roundTrip(t, rt, second)
			time.Sleep(50 * time.Millisecond)
			outcomes = append(outcomes, strings.Join([]string{http.StatusText(code), body, errorKind(err), strings.Join(seen(), ",")}, "|"))
			rt.CloseIdleConnections()
		}
		if outcomes[0] != outcomes[1] {
			t.Errorf("%s: Lean gave %q, http.Transport %q", method, outcomes[0], outcomes[1])
		}
		t.Logf("%s: %s", method, outcomes[0])
	}
}

func errorKind(err error) string {
	if err == nil {
		return "no error"
	}
	return "error"
}

// TestLeanHeaderTimeout: an upstream that never answers fails the request
// with a timeout after ResponseHeaderTimeout, a net.Error the proxy turns
// into 504.
func TestLeanHeaderTimeout(t *testing.T) {
	release := make(chan struct{})
	defer close(release)
	srv, _ := countingServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	lean := NewLean(200*time.Millisecond, nil)
	start := time.Now()
	_, err := lean.RoundTrip(post(t, srv.URL, "{}"))
	var ne net.Error
	if !errors.As(err, &ne) || !ne.Timeout() {
		t.Fatalf("error %v, want a timeout", err)
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("the timeout took %v", d)
	}
}

// TestLeanCanceled: canceling the request ends a body being read at once,
// with the context's error, and the upstream sees its client go away.
func TestLeanCanceled(t *testing.T) {
	upstreamGone := make(chan struct{})
	srv, _ := countingServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, "data: first\n\n")
		w.(http.Flusher).Flush()
		<-r.Context().Done()
		close(upstreamGone)
	}))
	ctx, cancel := context.WithCancel(context.Background())
	req := post(t, srv.URL, "{}").WithContext(ctx)
	resp, err := NewLean(0, nil).RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 64)
	if _, err := resp.Body.Read(buf); err != nil {
		t.Fatal(err)
	}
	time.AfterFunc(50*time.Millisecond, cancel)
	if _, err := io.ReadAll(resp.Body); !errors.Is(err, context.Canceled) {
		t.Errorf("the body's read ended with %v, want context.Canceled", err)
	}
	select {
	case <-upstreamGone:
	case <-time.After(5 * time.Second):
		t.Error("the upstream did not see the request go away")
	}
}

// TestLeanFallback: what Lean does not carry goes to http.Transport: a
// body still on its way (no GetBody), an upgrade, https.
func TestLeanFallback(t *testing.T) {
	lean := NewLean(0, nil)
	plain := httptest.NewServer(http.NotFoundHandler())
	defer plain.Close()
	streaming, _ := http.NewRequest(http.MethodPost, plain.URL, io.NopCloser(strings.NewReader("x")))
	upgrade, _ := http.NewRequest(http.MethodGet, plain.URL, nil)
	upgrade.Header.Set("Upgrade", "websocket")
	secure, _ := http.NewRequest(http.MethodGet, "https://example.invalid/", nil)
	held := post(t, plain.URL, "x")
	held.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(strings.NewReader("x")), nil }
	get, _ := http.NewRequest(http.MethodGet, plain.URL, nil)
	for _, c := range []struct {
		name    string
		req     *http.Request
		carries bool
	}{{"a body on its way", streaming, false}, {"an upgrade", upgrade, false}, {"https", secure, false},
		{"a held body", held, true}, {"no body", get, true}} {
		if got := lean.carries(c.req); got != c.carries {
			t.Errorf("%s: carried by Lean %v, want %v", c.name, got, c.carries)
		}
	}
}

// TestLeanHoldsNoGoroutinePerConnection: streams in flight and idle
// connections cost Lean no goroutine of its own, where http.Transport
// keeps two per connection.
func TestLeanHoldsNoGoroutinePerConnection(t *testing.T) {
	const streams = 40
	release := make(chan struct{})
	var started sync.WaitGroup
	srv, _ := countingServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, "data: x\n\n")
		w.(http.Flusher).Flush()
		started.Done()
		<-release
	}))
	goroutines := func(rt http.RoundTripper) (inFlight, idle int) {
		before := runtime.NumGoroutine()
		started.Add(streams)
		var bodies []io.ReadCloser
		for range streams {
			resp, err := rt.RoundTrip(post(t, srv.URL, "{}"))
			if err != nil {
				t.Fatal(err)
			}
			bodies = append(bodies, resp.Body)
		}
		started.Wait()
		time.Sleep(50 * time.Millisecond)
		inFlight = runtime.NumGoroutine() - before
		release <- struct{}{} // one handler returns; close the rest
		for range streams - 1 {
			release <- struct{}{}
		}
		for _, b := range bodies {
			_, _ = io.ReadAll(b)
			b.Close()
		}
		time.Sleep(100 * time.Millisecond)
		return inFlight, runtime.NumGoroutine() - before
	}
	lean, plain := NewLean(0, nil), New(0, nil)
	defer lean.CloseIdleConnections()
	defer plain.CloseIdleConnections()
	leanFlight, leanIdle := goroutines(lean)
	plainFlight, plainIdle := goroutines(plain)
	t.Logf("goroutines for %d streams in flight: Lean %d, http.Transport %d; with their connections idle: %d, %d",
		streams, leanFlight, plainFlight, leanIdle, plainIdle)
	// The upstream's own goroutines (two per connection) are in both.
	if plainFlight-leanFlight < 2*streams-streams/4 {
		t.Errorf("Lean saves %d goroutines over %d streams in flight, want about two per stream", plainFlight-leanFlight, streams)
	}
	if plainIdle-leanIdle < 2*streams-streams/4 {
		t.Errorf("Lean saves %d goroutines over %d idle connections, want about two per connection", plainIdle-leanIdle, streams)
	}
}
