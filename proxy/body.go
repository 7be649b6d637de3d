package proxy

import (
	"io"
	"sync"
)

// heldBody is a request body the proxy has read (to find the model) and
// replays to the upstream. The transport may read it more than once (a
// retry on a fresh connection calls GetBody), but once the response's
// headers have arrived it makes no new reader: release then lets the
// prompt, often tens of kilobytes, go before the stream, which can last
// minutes. It goes only once the last reader made has been read to its end
// or closed: an upstream may answer before it has read the whole request,
// and the transport goes on sending it.
type heldBody struct {
	mu       sync.Mutex
	b        []byte
	last     *heldReader // the reader the transport is sending, if any
	released bool
}

// reader returns a new reader of the body, as http.Request.GetBody does.
func (h *heldBody) reader() io.ReadCloser {
	r := &heldReader{h: h}
	h.mu.Lock()
	h.last = r
	h.mu.Unlock()
	return r
}

// release drops the body as soon as the last reader is done with it;
// earlier readers, from abandoned attempts, then reach its end.
func (h *heldBody) release() {
	h.mu.Lock()
	h.released = true
	if h.last == nil || h.last.done {
		h.b = nil
	}
	h.mu.Unlock()
}

type heldReader struct {
	h    *heldBody
	off  int
	done bool // read to the end, or closed
}

func (r *heldReader) Read(p []byte) (int, error) {
	r.h.mu.Lock()
	defer r.h.mu.Unlock()
	if r.off >= len(r.h.b) {
		r.finish()
		return 0, io.EOF
	}
	n := copy(p, r.h.b[r.off:])
	r.off += n
	return n, nil
}

func (r *heldReader) Close() error {
	r.h.mu.Lock()
	r.finish()
	r.h.mu.Unlock()
	return nil
}

// finish marks the reader done, and drops a released body it was the last
// reader of. r.h.mu is held.
func (r *heldReader) finish() {
	r.done = true
	if r.h.released && r == r.h.last {
		r.h.b = nil
	}
}
