package transport

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net/http"
	"time"
)

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
	b.t.release(b.addr, b.c.Conn, false)
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
	b.t.release(b.addr, b.c.Conn, b.eof && b.keep && b.writeErr == nil && !canceled)
}
