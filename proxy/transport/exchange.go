package transport

import (
	"bufio"
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/textproto"
	"sync"
	"time"
)

// readBufferSize is the buffer a connection reads its response through,
// held while the response is read: events are a few hundred bytes, and a
// read larger than the buffer bypasses it.
const readBufferSize = 2 << 10

var (
	readers = sync.Pool{New: func() any { return bufio.NewReaderSize(nil, readBufferSize) }}
	writers = sync.Pool{New: func() any { return bufio.NewWriterSize(nil, 2<<10) }}
)

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
		t.release(addr, conn, false)
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
		if trace := httptrace.ContextClientTrace(ctx); trace != nil && trace.WroteRequest != nil {
			// As http.Transport does: the request is written (or failed).
			trace.WroteRequest(httptrace.WroteRequestInfo{Err: err})
		}
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
