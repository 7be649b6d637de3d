package proxy

import (
	"context"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

// A request's t0 is when its first bytes reached the proxy, as closely as
// the proxy can know it. The listener (Listener) notes when it accepted
// each connection, and the connection notes when the first bytes of each
// request on it were read. The two differ in what they can see:
//
//   - bytes already waiting when the server reads them arrived at some
//     moment since the connection became ready for them (its accept, or
//     the end of the response before on it): t0 is that moment, so that a
//     burst of connections waiting to be read, and a proxy too busy to read
//     them, are charged to the request;
//   - a read that had to wait for them (a connection idle before its
//     request: clients and browsers preconnect, keep-alive connections wait
//     between requests) returned when they came: t0 is when it returned,
//     so that the idle time is never charged.
//
// Which of the two a read was is told by how long it took: a read that
// waits is woken by the network poller, which takes longer than
// blockedRead; one of bytes already there returns at once. Every read
// until the request is handled counts, not only the first: over TLS the
// first reads are the handshake's, and a client that preconnected sends
// its request after the handshake, in a read that waited. Over HTTP/2,
// where one connection carries many requests at once, t0 is when the
// handler runs.

// blockedRead is how long a read must take to count as one that waited
// for its bytes, the client's here, the upstream's in forwarding.go.
const blockedRead = 100 * time.Microsecond

// Listener returns ln with each connection it accepts timed, for the
// requests' t0: the proxy server must serve it with ConnContext. With
// sendBuffer > 0, each connection's kernel send buffer (SO_SNDBUF) is that
// many bytes: unset, Linux grows it up to net.ipv4.tcp_wmem's maximum (4
// MiB by default), and a client that reads slowly then parks megabytes in
// the kernel while the proxy reads from the upstream far ahead of it.
func Listener(ln net.Listener, sendBuffer int) net.Listener {
	return arrivalListener{Listener: ln, sendBuffer: sendBuffer}
}

type arrivalListener struct {
	net.Listener
	sendBuffer int
}

func (l arrivalListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return c, err
	}
	if tc, ok := c.(*net.TCPConn); ok && l.sendBuffer > 0 {
		_ = tc.SetWriteBuffer(l.sendBuffer)
	}
	a := &arrivalConn{Conn: c}
	a.readyAt = time.Now()
	a.awaiting.Store(true)
	return a, nil
}

// arrivalConn is an accepted connection that notes when each request's
// first bytes were read from it.
type arrivalConn struct {
	net.Conn
	// awaiting: the bytes read are the next request's (or, over TLS, the
	// handshake's before it), until the request is handled. Set and
	// cleared with mu held; read without it to let the reads of a request
	// being handled through at once.
	awaiting atomic.Bool

	mu sync.Mutex
	// readyAt is when the connection became ready for the next request's
	// bytes: its accept, then the end of each response; start is when the
	// current request's first bytes arrived, zero when they were not
	// seen (the request was read before the response before it ended).
	readyAt, start time.Time
}

func (c *arrivalConn) Read(p []byte) (int, error) {
	if !c.awaiting.Load() {
		return c.Conn.Read(p)
	}
	called := time.Now()
	n, err := c.Conn.Read(p)
	if n > 0 {
		returned := time.Now()
		c.mu.Lock()
		// A read that waited restarts the clock: what came before it was
		// not the request (a handshake), or it came in pieces. One that
		// found bytes waiting keeps the clock that runs, or starts it when
		// the connection became ready. A read that returns once the
		// request is being handled (the server's read in the background)
		// is not the request's.
		if c.awaiting.Load() {
			switch {
			case returned.Sub(called) > blockedRead:
				c.start = returned
			case c.start.IsZero():
				c.start = c.readyAt
			}
		}
		c.mu.Unlock()
	}
	return n, err
}

// CloseWrite half-closes a TCP connection, as the server does before it
// closes one whose request it did not read whole.
func (c *arrivalConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}

// NetConn returns the accepted connection, as tls.Conn's does.
func (c *arrivalConn) NetConn() net.Conn { return c.Conn }

// handling notes that the request read from the connection is being
// handled: the bytes read from now on are not its first.
func (c *arrivalConn) handling() {
	c.mu.Lock()
	c.awaiting.Store(false)
	c.mu.Unlock()
}

// requestStart returns when the current request's first bytes arrived,
// or now when they were not seen.
func (c *arrivalConn) requestStart(now time.Time) time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.start.IsZero() {
		return now
	}
	return c.start
}

// served notes that the connection's response ended at end: the next
// bytes read begin the next request.
func (c *arrivalConn) served(end time.Time) {
	c.mu.Lock()
	c.readyAt, c.start = end, time.Time{}
	c.awaiting.Store(true)
	c.mu.Unlock()
}

type arrivalKey struct{}

// ConnContext is the proxy server's http.Server.ConnContext: it makes each
// request's t0 the arrival of its first bytes on a connection Listener
// accepted (through a TLS connection, or any that unwraps to one with
// NetConn).
func ConnContext(ctx context.Context, c net.Conn) context.Context {
	for {
		switch t := c.(type) {
		case *arrivalConn:
			return context.WithValue(ctx, arrivalKey{}, t)
		case interface{ NetConn() net.Conn }:
			c = t.NetConn()
		default:
			return ctx
		}
	}
}

// arrivalOf returns the timed connection r came on, nil when it came on
// another, or over HTTP/2.
func arrivalOf(r *http.Request) *arrivalConn {
	if r.ProtoMajor != 1 {
		return nil
	}
	c, _ := r.Context().Value(arrivalKey{}).(*arrivalConn)
	return c
}

// startOf is r's t0, the start of its clocks: when its first bytes
// reached the proxy, else now.
func startOf(r *http.Request) time.Time {
	now := time.Now()
	if c := arrivalOf(r); c != nil {
		return c.requestStart(now)
	}
	return now
}
