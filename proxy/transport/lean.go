package transport

import (
	"context"
	"net"
	"net/http"
	"net/url"
	"sync"
	"time"
)

// Lean carries cleartext HTTP/1.1 requests to an upstream without what
// http.Transport keeps per connection for its whole life: a goroutine that
// reads and one that writes, and a read and a write buffer. A request is
// written by a goroutine that lives only as long as the write (Go's own
// Request.Write, through a pooled buffer), its response is read with Go's
// own http.ReadResponse on the caller's goroutine, and an idle connection
// keeps no buffer. Everything else goes to Fallback: https, a proxy from
// the environment, an upgrade (WebSocket), and a request whose body is
// still on its way from the client (its write must run beside the response,
// as long as the upload lasts).
//
// It behaves as http.Transport does where the proxy depends on it: the
// response header timeout, cancellation by the request's context (which
// closes the connection), keep-alive with at most MaxIdlePerHost idle
// connections per host, and the same retry of a request on a fresh
// connection when a reused one turns out to be closed (http.Transport's
// rule: a request not written at all, with a body that can be replayed, or
// an idempotent one whose connection closed before the first byte of its
// response), and idle connections closed after IdleTimeout by a timer,
// whether or not their host is asked for again. What differs: a
// connection the server closes while idle is found out when it is next
// taken, by a non-blocking peek (on a system other than Unix, a read that
// waits at most idleReadWait), or at its timeout, not at once.
type Lean struct {
	// Dial opens a connection to host:port.
	Dial func(ctx context.Context, network, addr string) (net.Conn, error)
	// ResponseHeaderTimeout bounds the wait for the response's headers
	// once the request is written; 0 means none.
	ResponseHeaderTimeout time.Duration
	// MaxIdlePerHost bounds the idle connections kept per host.
	MaxIdlePerHost int
	// IdleTimeout closes a connection idle that long; 0 means never.
	IdleTimeout time.Duration
	// Fallback carries every request Lean does not.
	Fallback *http.Transport

	mu   sync.Mutex
	idle map[string][]idleConn // by host:port, the most recently used last
	// expiry closes the idle connections past IdleTimeout; nil when none
	// is pending (idle.go).
	expiry *time.Timer
	// inUse counts the connections in use by host:port, and leaving marks
	// those whose server left the set while some were: each is closed
	// once its exchange ends (idle.go).
	inUse   map[string]int
	leaving map[string]bool
	// fallbackDialed holds the addresses Fallback has dialed, until
	// CloseIdleConnectionsTo (NewLean's Fallback notes them).
	fallbackDialed map[string]bool
}

type idleConn struct {
	c     net.Conn
	since time.Time
}

// RoundTrip sends req and returns its response, whose body reads the
// connection.
func (t *Lean) RoundTrip(req *http.Request) (*http.Response, error) {
	if !t.carries(req) {
		return t.Fallback.RoundTrip(req)
	}
	addr := canonicalAddr(req.URL)
	for {
		c, reused, err := t.conn(req.Context(), addr)
		if err != nil {
			return nil, err
		}
		resp, err := t.exchange(req, c, addr)
		if err == nil {
			return resp, nil
		}
		if !reused || !retryable(req, err) {
			return nil, unwrapRetry(err)
		}
		if req.GetBody != nil && req.Body != nil && req.Body != http.NoBody {
			body, gerr := req.GetBody()
			if gerr != nil {
				return nil, unwrapRetry(err)
			}
			req = req.Clone(req.Context())
			req.Body = body
		}
	}
}

// carries reports whether Lean sends req itself.
func (t *Lean) carries(req *http.Request) bool {
	if req.URL.Scheme != "http" || req.Header.Get("Upgrade") != "" {
		return false
	}
	// A body Lean can write whole before it reads the response: none, or
	// one the proxy holds in memory (it can replay it).
	if req.Body != nil && req.Body != http.NoBody && req.GetBody == nil {
		return false
	}
	if t.Fallback.Proxy != nil {
		if u, err := t.Fallback.Proxy(req); err != nil || u != nil {
			return false
		}
	}
	return true
}

// canonicalAddr is the host:port of an http URL.
func canonicalAddr(u *url.URL) string {
	port := u.Port()
	if port == "" {
		port = "80"
	}
	return net.JoinHostPort(u.Hostname(), port)
}

// conn returns an idle connection to addr that is still open, or a new
// one, in use until release.
func (t *Lean) conn(ctx context.Context, addr string) (net.Conn, bool, error) {
	now := time.Now()
	t.mu.Lock()
	for list := t.idle[addr]; len(list) > 0; list = t.idle[addr] {
		ic := list[len(list)-1]
		t.idle[addr] = list[:len(list)-1]
		t.mu.Unlock()
		if (t.IdleTimeout <= 0 || now.Sub(ic.since) < t.IdleTimeout) && stillOpen(ic.c) {
			t.using(addr)
			return ic.c, true, nil
		}
		ic.c.Close()
		t.mu.Lock()
	}
	t.mu.Unlock()
	c, err := t.Dial(ctx, "tcp", addr)
	if err == nil {
		t.using(addr)
	}
	return c, false, err
}

// using counts a connection to addr in use: a request is sent to addr, so
// its server is in the set again if it had left.
func (t *Lean) using(addr string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.inUse == nil {
		t.inUse = map[string]int{}
	}
	t.inUse[addr]++
	delete(t.leaving, addr)
}

// release ends the use of c, a connection to addr: kept for the next
// request to addr when keep says it can be and its server has not left
// the set meanwhile (CloseIdleConnectionsTo), else closed.
func (t *Lean) release(addr string, c net.Conn, keep bool) {
	t.mu.Lock()
	leaving := t.leaving[addr]
	if n := t.inUse[addr] - 1; n > 0 {
		t.inUse[addr] = n
	} else {
		delete(t.inUse, addr)
		delete(t.leaving, addr)
	}
	if t.idle == nil {
		t.idle = map[string][]idleConn{}
	}
	if keep && !leaving && len(t.idle[addr]) < t.MaxIdlePerHost {
		t.idle[addr] = append(t.idle[addr], idleConn{c: c, since: time.Now()})
		c = nil
		t.expireLater()
	}
	t.mu.Unlock()
	if c != nil {
		c.Close()
	}
}

// CloseIdleConnections closes the idle connections, Lean's and the
// fallback's.
func (t *Lean) CloseIdleConnections() {
	t.mu.Lock()
	idle := t.idle
	t.idle = nil
	t.mu.Unlock()
	for _, list := range idle {
		for _, ic := range list {
			ic.c.Close()
		}
	}
	t.Fallback.CloseIdleConnections()
}
