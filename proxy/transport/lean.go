package transport

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/textproto"
	"net/url"
	"sync"
	"syscall"
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
// response). What differs: a connection the server closes while idle is
// found out when it is next taken, by a non-blocking peek, not at once.
type Lean struct {
	// Dial opens a connection to host:port.
	Dial func(ctx context.Context, network, addr string) (net.Conn, error)
	// ResponseHeaderTimeout bounds the wait for the response's headers
	// once the request is written; 0 means none.
	ResponseHeaderTimeout time.Duration
	// MaxIdlePerHost bounds the idle connections kept per host.
	MaxIdlePerHost int
	// IdleTimeout closes a connection idle that long, when it is next
	// looked at.
	IdleTimeout time.Duration
	// Fallback carries every request Lean does not.
	Fallback *http.Transport

	mu   sync.Mutex
	idle map[string][]idleConn // by host:port, the most recently used last
}

type idleConn struct {
	c     net.Conn
	since time.Time
}

// readBufferSize is the buffer a connection reads its response through,
// held while the response is read: events are a few hundred bytes, and a
// read larger than the buffer bypasses it.
const readBufferSize = 2 << 10

var (
	readers = sync.Pool{New: func() any { return bufio.NewReaderSize(nil, readBufferSize) }}
	writers = sync.Pool{New: func() any { return bufio.NewWriterSize(nil, 2<<10) }}
)

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
// one.
func (t *Lean) conn(ctx context.Context, addr string) (net.Conn, bool, error) {
	now := time.Now()
	t.mu.Lock()
	for list := t.idle[addr]; len(list) > 0; list = t.idle[addr] {
		ic := list[len(list)-1]
		t.idle[addr] = list[:len(list)-1]
		t.mu.Unlock()
		if (t.IdleTimeout <= 0 || now.Sub(ic.since) < t.IdleTimeout) && stillOpen(ic.c) {
			return ic.c, true, nil
		}
		ic.c.Close()
		t.mu.Lock()
	}
	t.mu.Unlock()
	c, err := t.Dial(ctx, "tcp", addr)
	return c, false, err
}

// stillOpen peeks at an idle connection without blocking: a server that
// closed it has sent its end (or a reset); one that keeps it sends
// nothing.
func stillOpen(c net.Conn) bool {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return true
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return false
	}
	open := false
	err = rc.Read(func(fd uintptr) bool {
		var b [1]byte
		n, _, err := syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		// Nothing to read (EAGAIN) is an open, idle connection; bytes a
		// server sent unasked, an end or an error are not.
		open = n < 0 && (err == syscall.EAGAIN || err == syscall.EWOULDBLOCK)
		return true
	})
	return err == nil && open
}

// put keeps c for the next request to addr, or closes it.
func (t *Lean) put(addr string, c net.Conn) {
	t.mu.Lock()
	if t.idle == nil {
		t.idle = map[string][]idleConn{}
	}
	if len(t.idle[addr]) < t.MaxIdlePerHost {
		t.idle[addr] = append(t.idle[addr], idleConn{c: c, since: time.Now()})
		c = nil
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

// Errors that decide a retry, as http.Transport's do.
type (
	// nothingWritten: the request was not sent at all.
	nothingWritten struct{ error }
	// closedBeforeResponse: the connection ended before the first byte of
	// the response.
	closedBeforeResponse struct{ error }
)

func (e nothingWritten) Unwrap() error       { return e.error }
func (e closedBeforeResponse) Unwrap() error { return e.error }

func retryable(req *http.Request, err error) bool {
	var nw nothingWritten
	if errors.As(err, &nw) {
		return req.Body == nil || req.Body == http.NoBody || req.GetBody != nil
	}
	var cb closedBeforeResponse
	return errors.As(err, &cb) && replayable(req)
}

// replayable is http.Request's own rule: an idempotent method, or one
// that says it is idempotent, with a body that can be sent again.
func replayable(req *http.Request) bool {
	switch req.Method {
	case "", http.MethodGet, http.MethodHead, http.MethodOptions, http.MethodTrace:
		return true
	}
	_, key := req.Header["Idempotency-Key"]
	_, xkey := req.Header["X-Idempotency-Key"]
	return key || xkey
}

func unwrapRetry(err error) error {
	var nw nothingWritten
	if errors.As(err, &nw) {
		return nw.error
	}
	var cb closedBeforeResponse
	if errors.As(err, &cb) {
		return cb.error
	}
	return err
}

// maxResponseHeaderBytes bounds a response's header block, as
// http.Transport's default does.
const maxResponseHeaderBytes = 10 << 20

// leanConn is one request's use of a connection: what reaches it of the
// request, and what the response's headers may still take of it.
type leanConn struct {
	net.Conn
	written    int64 // bytes of the request that reached the connection
	headerLeft int64 // bytes the header block may still read; <0: no bound
}

func (c *leanConn) Write(p []byte) (int, error) {
	n, err := c.Conn.Write(p)
	c.written += int64(n)
	return n, err
}

func (c *leanConn) Read(p []byte) (int, error) {
	if c.headerLeft < 0 {
		return c.Conn.Read(p)
	}
	if c.headerLeft == 0 {
		return 0, errHeaderTooLarge
	}
	if int64(len(p)) > c.headerLeft {
		p = p[:c.headerLeft]
	}
	n, err := c.Conn.Read(p)
	c.headerLeft -= int64(n)
	return n, err
}

var errHeaderTooLarge = errors.New("itlproxy: the response's headers are larger than 10 MiB")

// exchange sends req on c and reads its response.
func (t *Lean) exchange(req *http.Request, conn net.Conn, addr string) (*http.Response, error) {
	ctx := req.Context()
	if err := ctx.Err(); err != nil {
		conn.Close()
		return nil, err
	}
	b := &leanBody{t: t, addr: addr, c: leanConn{Conn: conn, headerLeft: maxResponseHeaderBytes}, ctx: ctx, written: make(chan error, 1)}
	c := &b.c
	// A canceled request ends whatever waits on its connection at once.
	b.stop = context.AfterFunc(ctx, func() { _ = conn.SetDeadline(time.Unix(1, 0)) })
	go func() {
		bw := writers.Get().(*bufio.Writer)
		bw.Reset(c)
		err := req.Write(bw)
		if err == nil {
			err = bw.Flush()
		}
		bw.Reset(nil)
		writers.Put(bw)
		b.written <- err
	}()
	b.br = readers.Get().(*bufio.Reader)
	b.br.Reset(c)
	if t.ResponseHeaderTimeout > 0 {
		_ = conn.SetReadDeadline(time.Now().Add(t.ResponseHeaderTimeout))
	}
	for {
		// Wait for the first byte of the response, or for a failed write.
		if _, err := b.br.Peek(1); err != nil {
			// No response: the connection is done for. Closing it ends a
			// write stuck on a server that does not read; then the write
			// says whether anything was sent.
			conn.Close()
			writeErr := <-b.written
			b.writeDone = true
			switch {
			case writeErr != nil && c.written == 0:
				return b.fail(nothingWritten{writeErr})
			case writeErr != nil:
				return b.fail(writeErr)
			case isTimeout(err) && ctx.Err() == nil:
				return b.fail(errHeaderTimeout)
			}
			return b.fail(closedBeforeResponse{err})
		}
		resp, err := http.ReadResponse(b.br, req)
		if err != nil {
			if isTimeout(err) && ctx.Err() == nil {
				err = errHeaderTimeout
			}
			return b.fail(err)
		}
		if resp.StatusCode >= 100 && resp.StatusCode <= 199 && resp.StatusCode != http.StatusSwitchingProtocols {
			// An informational response, relayed as http.Transport does
			// (httputil.ReverseProxy passes them on to its client); one
			// delivered there no longer counts against the header bound.
			if trace := httptrace.ContextClientTrace(ctx); trace != nil && trace.Got1xxResponse != nil {
				if err := trace.Got1xxResponse(resp.StatusCode, textproto.MIMEHeader(resp.Header)); err != nil {
					return b.fail(err)
				}
				c.headerLeft = maxResponseHeaderBytes
			}
			continue
		}
		_ = conn.SetReadDeadline(time.Time{})
		c.headerLeft = -1
		b.rc, b.keep = resp.Body, !resp.Close && !req.Close && resp.ProtoAtLeast(1, 1)
		resp.Body = b
		return resp, nil
	}
}

var errHeaderTimeout = timeoutError{"itlproxy: timeout awaiting response headers"}

// timeoutError is a net.Error that says it timed out, as http.Transport's
// header timeout does.
type timeoutError struct{ msg string }

func (e timeoutError) Error() string   { return e.msg }
func (e timeoutError) Timeout() bool   { return true }
func (e timeoutError) Temporary() bool { return true }

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// leanBody is a response's body: read to its end, with the request
// written whole, its connection is kept for the next request; closed
// early, it is closed.
type leanBody struct {
	rc        io.ReadCloser // Go's reader of the body, from http.ReadResponse
	t         *Lean
	addr      string
	c         leanConn
	br        *bufio.Reader // pooled, held until the body is done
	stop      func() bool   // stops the cancellation
	ctx       context.Context
	written   chan error // the write's end
	writeDone bool
	writeErr  error
	keep      bool // the connection may serve another request
	eof, done bool
}

// fail ends an exchange that has no response, and says why: the request's
// cancellation when it was canceled.
func (b *leanBody) fail(err error) (*http.Response, error) {
	b.stop()
	b.c.Close()
	if !b.writeDone {
		<-b.written
	}
	b.releaseReader()
	if cerr := b.ctx.Err(); cerr != nil {
		return nil, cerr
	}
	return nil, err
}

func (b *leanBody) releaseReader() {
	b.br.Reset(nil)
	readers.Put(b.br)
	b.br = nil
}

func (b *leanBody) Read(p []byte) (int, error) {
	if b.done {
		return 0, errors.New("itlproxy: read on a closed response body")
	}
	n, err := b.rc.Read(p)
	switch {
	case err == io.EOF:
		b.eof = true
		b.finish()
	case err != nil:
		if cerr := b.ctx.Err(); cerr != nil {
			err = cerr
		}
		b.finish()
	}
	return n, err
}

func (b *leanBody) Close() error {
	b.finish()
	return nil
}

// finish gives the connection back or closes it, once.
func (b *leanBody) finish() {
	if b.done {
		return
	}
	b.done = true
	canceled := !b.stop()
	if !b.writeDone && b.eof && b.keep {
		// The response is complete and the request's write has not ended:
		// it ends soon, or the server answered without reading it all, and
		// the connection is not reused (as http.Transport waits 50 ms).
		select {
		case b.writeErr = <-b.written:
			b.writeDone = true
		case <-time.After(50 * time.Millisecond):
		}
	}
	if !b.writeDone {
		b.c.Close() // ends the write
		<-b.written
		b.writeDone, b.keep = true, false
	}
	b.releaseReader()
	if b.eof && b.keep && b.writeErr == nil && !canceled {
		b.t.put(b.addr, b.c.Conn)
		return
	}
	b.c.Close()
}
