package proxy

import (
	"context"
	"errors"
	"net"
	"net/http"
	"sync"
)

// Ambiguous framing (request smuggling).
//
// A request with both Content-Length and Transfer-Encoding can be read two
// ways; an intermediary that reads it one way while the next hop reads it
// the other lets an attacker hide a request inside another's body. Go's
// server resolves it as RFC 9112 section 6.3 says (Transfer-Encoding wins,
// Content-Length is dropped) and re-frames what it forwards, so nothing
// ambiguous reaches the upstream; but the RFC also says such a message
// "ought to be handled as an error", and a proxy should refuse rather than
// relay what looks like an attack. By the time a handler runs, Go has
// deleted the Content-Length: the evidence exists only in the bytes. So the
// listener's connections follow the HTTP/1.x framing of the requests they
// carry, as Go's server reads them (framingfollow.go), and note, request by
// request, whether the headers named both fields; the handler takes its
// request's verdict and refuses an ambiguous one.
//
// A verdict must reach its own request, and not every request Go reads
// reaches the handler: Go answers OPTIONS * itself (unless the server sets
// DisableGeneralOptionsHandler), and answers a request it cannot parse or
// will not serve (bad syntax or Host, headers too large, an unknown
// Transfer-Encoding or Expect, another HTTP version), then closes the
// connection. A request may also switch the connection to another protocol
// (CONNECT, Upgrade), after which its bytes are requests again only if the
// switch did not happen. So each verdict names its request (request line
// and body framing, as Go reads them); the follower queues no verdict for
// the OPTIONS * that Go answers, holds the bytes after a possible switch
// until the handler asks for another verdict, and stops wherever Go's
// parser would fail. A request whose verdict is missing or names another
// request is refused as well, and its connection closed: no request is
// ever judged by another request's verdict.

// The refusals, worded for the client.
var (
	errAmbiguousFraming  = errors.New("the request has both Content-Length and Transfer-Encoding, which the proxy refuses to relay")
	errUnfollowedFraming = errors.New("the proxy lost track of the framing of the requests on this connection, and refuses to relay what it cannot check")
)

// GuardListener wraps ln so that the proxy can refuse requests with
// ambiguous framing. Use it for cleartext listeners (HTTP/1.x, and h2c
// beside it), together with ConnContext as the server's ConnContext; on a
// TLS listener the follower would see ciphertext.
func GuardListener(ln net.Listener) net.Listener { return guardListener{ln} }

type guardListener struct{ net.Listener }

func (l guardListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &framingConn{Conn: c, f: newFraming(nil)}, nil
}

type framingKey struct{}

// ConnContext makes a connection's framing verdicts available to the
// proxy's handler (http.Server.ConnContext). It reads from the server in
// ctx the settings that decide what reaches the handler: MaxHeaderBytes and
// DisableGeneralOptionsHandler.
func ConnContext(ctx context.Context, c net.Conn) context.Context {
	fc, ok := c.(*framingConn)
	if !ok {
		return ctx
	}
	// The connection's goroutine, the only reader, starts after this.
	if srv, ok := ctx.Value(http.ServerContextKey).(*http.Server); ok {
		fc.f = newFraming(srv)
	}
	return context.WithValue(ctx, framingKey{}, fc)
}

// checkFraming returns why r must be refused, or nil: errAmbiguousFraming
// when it was sent with both a Content-Length and a Transfer-Encoding,
// errUnfollowedFraming when its connection's follower has no verdict
// naming it.
func checkFraming(r *http.Request) error {
	fc, ok := r.Context().Value(framingKey{}).(*framingConn)
	if !ok {
		return nil
	}
	// Go's HTTP/2 server (h2c) frames its requests with its own frames;
	// the one HTTP/2.0 request an HTTP/1 connection carries is PRI *.
	if r.ProtoMajor != 1 && r.Method != "PRI" {
		return nil
	}
	return fc.verdictFor(r)
}

// framingConn follows the requests on one connection as the server reads
// them. Reads happen on the server's goroutine for the connection, the
// verdicts are taken on the handler's: hence the lock.
type framingConn struct {
	net.Conn
	mu sync.Mutex
	f  framing
}

func (c *framingConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if n > 0 {
		c.mu.Lock()
		c.f.follow(p[:n])
		c.mu.Unlock()
	}
	return n, err
}

// verdictFor takes the verdict of the oldest request not yet served,
// which must be r.
func (c *framingConn) verdictFor(r *http.Request) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	v, ok := c.f.next()
	switch {
	case !ok || !v.names(r):
		c.f.stop()
		c.f.queue = nil
		return errUnfollowedFraming
	case v.ambiguous:
		return errAmbiguousFraming
	}
	return nil
}
