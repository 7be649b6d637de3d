package proxy

import (
	"io"
	"sync"
)

// heldBody is a request body the proxy has read (to find the model) and
// replays to the upstream. The transport may read it more than once (a
// retry on a fresh connection calls GetBody), but once the response's
// headers have arrived it is done with it: release lets the prompt, often
// tens of kilobytes, go before the stream, which can last minutes.
type heldBody struct {
	mu sync.Mutex
	b  []byte
}

// reader returns a new reader of the body, as http.Request.GetBody does.
func (h *heldBody) reader() io.ReadCloser { return &heldReader{h: h} }

// release drops the body; readers still reading it then reach its end.
func (h *heldBody) release() {
	h.mu.Lock()
	h.b = nil
	h.mu.Unlock()
}

type heldReader struct {
	h   *heldBody
	off int
}

func (r *heldReader) Read(p []byte) (int, error) {
	r.h.mu.Lock()
	defer r.h.mu.Unlock()
	if r.off >= len(r.h.b) {
		return 0, io.EOF
	}
	n := copy(p, r.h.b[r.off:])
	r.off += n
	return n, nil
}

func (r *heldReader) Close() error { return nil }
