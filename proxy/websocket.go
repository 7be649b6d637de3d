package proxy

import (
	"context"
	"errors"
	"io"
	"time"

	"github.com/itlproxy/itlproxy/proxy/realtime"
)

// wsTee is the upstream end of a connection that switched to WebSocket,
// as httputil.ReverseProxy copies it (after a 101, it copies between the
// client's hijacked connection and the response body, which is the
// upstream connection). It copies each direction itself, through io.Copy's
// fast paths (WriterTo for the upstream's bytes, ReaderFrom for the
// client's), so that each read is stamped, forwarded, and only then
// measured: the measuring adds nothing to the time a byte takes to cross.
type wsTee struct {
	upstream io.ReadWriteCloser
	conn     *realtime.Conn
	ctx      context.Context // the forwarded request's
}

// ended tells the measurement which side ended the connection, unless the
// shutdown closed it: then the proxy's client side is what went away.
func (t *wsTee) ended(side realtime.Side) {
	if t.ctx != nil && context.Cause(t.ctx) == errShutdownCut {
		side = realtime.Client
	}
	t.conn.Ended(side)
}

// errUpstreamClosed ends a switched connection whose upstream closed it.
var errUpstreamClosed = errors.New("itlproxy: the upstream closed the connection")

// wsCopyBuffer is the size of each direction's copy buffer, io.Copy's own.
const wsCopyBuffer = 32 << 10

// WriteTo copies the upstream's bytes to the client.
func (t *wsTee) WriteTo(client io.Writer) (int64, error) {
	return t.copy(client, t.upstream, realtime.Server)
}

// ReadFrom copies the client's bytes to the upstream.
func (t *wsTee) ReadFrom(client io.Reader) (int64, error) {
	return t.copy(t.upstream, client, realtime.Client)
}

// copy copies from one side to the other until either fails, and tells
// the measurement which side ended the connection: the one whose read
// ended, or the one a write could not reach.
func (t *wsTee) copy(dst io.Writer, src io.Reader, from realtime.Side) (int64, error) {
	to := realtime.Server
	if from == realtime.Server {
		to = realtime.Client
	}
	buf := make([]byte, wsCopyBuffer)
	var written int64
	// turned is when the copy last turned back to the upstream, as its
	// write to the client returned, before it measured (forwarding.go).
	var turned, issued time.Time
	for {
		if from == realtime.Server {
			issued = time.Now()
		}
		n, rerr := src.Read(buf)
		if n > 0 {
			now := time.Now()
			t.conn.Arrived(from, buf[:n], now)
			var fw realtime.Written
			if from == realtime.Server {
				// The upstream's deltas: their way to the client is timed.
				fw.Available = availableAt(turned, issued, now)
				fw.Start = time.Now()
			}
			w, werr := dst.Write(buf[:n])
			if from == realtime.Server {
				fw.End = time.Now()
				turned = fw.End
			}
			t.conn.Measure(from, fw)
			written += int64(w)
			if werr == nil && w < n {
				werr = io.ErrShortWrite
			}
			if werr != nil {
				t.ended(to)
				return written, werr
			}
		}
		if rerr != nil {
			t.ended(from)
			if rerr == io.EOF && from == realtime.Client {
				return written, nil
			}
			if rerr == io.EOF {
				// The upstream ended the connection: there is no one left to
				// talk to. Without an error, httputil.ReverseProxy would
				// half-close the client's side and wait for the client to
				// close its own, which a client that is not reading never
				// does; with one, it ends both, as nginx does.
				return written, errUpstreamClosed
			}
			return written, rerr
		}
	}
}

// Read and Write serve a copy that takes neither fast path: each read is
// measured before it is returned, each write as it is made.

func (t *wsTee) Read(p []byte) (int, error) {
	n, err := t.upstream.Read(p)
	if n > 0 {
		t.conn.Observe(realtime.Server, p[:n], time.Now())
	}
	if err != nil {
		t.ended(realtime.Server)
	}
	return n, err
}

func (t *wsTee) Write(p []byte) (int, error) {
	t.conn.Arrived(realtime.Client, p, time.Now())
	n, err := t.upstream.Write(p)
	t.conn.Measure(realtime.Client, realtime.Written{})
	if err != nil {
		t.ended(realtime.Server)
	}
	return n, err
}

func (t *wsTee) Close() error { return t.upstream.Close() }
