package proxy

import (
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
)

// Full duplex: the response may start before the request body has been
// read to its end.
//
// Upstreams do start early: an inference server that decodes the prompt
// with a streaming JSON decoder answers as soon as the JSON value ends,
// before it has read what follows it (a final newline, the chunked
// terminator), and a server that refuses a request (429, 413) need not read
// its body at all. The proxy's transport is then still copying the client's
// body to the upstream, on its own goroutine, while ReverseProxy writes the
// response to the client.
//
// Go's HTTP/1 server does not allow that unless asked: when a handler's
// response starts with request body unread (net/http chunkWriter.writeHeader),
// the server reads up to 256 KiB of what is left (maxPostHandlerReadBytes)
// and discards it, closing the body at its end; past that it answers
// "Connection: close". That read races with the transport's: the bytes it
// takes never reach the upstream, and once it has closed the body the
// transport's next read fails, so the transport abandons the upstream
// connection and the response it was relaying is cut: the client sees a 200
// and then an unexpected EOF. A client that sends the rest of its body only
// once it has seen the response start waits forever instead, as the server
// withholds the response until the body is in.
//
// EnableFullDuplex turns that off for one request, leaving the body to the
// transport alone. Go's HTTP/2 server always works this way (its writer
// accepts the call and does nothing). Measured routes have read their body
// whole before they forward it, so for them it changes nothing; it is asked
// for every forwarded exchange all the same, so that no route depends on
// when its body was read.
//
// What the server no longer does, the proxy does for an HTTP/1 body still on
// its way from the client when the response starts (clientBody): the
// response says "Connection: close". And if the body has not reached its end
// when the exchange is over (the upstream answered without reading it all),
// the connection must not serve another request: the server aborts the
// transport's read still in progress when the handler returns, and a chunked
// body left in that error state would have the server read the rest of it
// as the next request. So the proxy tells the server that the body will not
// be read (abandon): it closes the connection after the response, its write
// side first so that a client still sending does not lose the response to a
// reset, without reading more of the body.

// fullDuplex lets the transport go on reading r's body while the response
// is written. It returns the body for the transport to read when it is an
// HTTP/1 body still to come from the client (not held: read whole before),
// or nil. Only an HTTP/1 writer that hides its EnableFullDuplex (a wrapper
// without Unwrap) refuses; that is worth one warning, as forwarded bodies
// may then be cut.
func (p *Proxy) fullDuplex(w http.ResponseWriter, r *http.Request, held bool) *clientBody {
	if err := http.NewResponseController(w).EnableFullDuplex(); err != nil && r.ProtoMajor == 1 {
		p.duplexWarning.Do(func() {
			p.log.Warn("the response writer cannot read a request while it writes the response; forwarded request bodies may be cut", zap.Error(err))
		})
	}
	if held || r.ProtoMajor != 1 || r.Body == nil || r.Body == http.NoBody || r.ContentLength == 0 {
		return nil
	}
	return &clientBody{rc: r.Body}
}

// clientBody is the body of an HTTP/1 request as the transport reads it
// from the client's connection: it notes when it has been read to its end.
type clientBody struct {
	rc      io.ReadCloser
	ended   atomic.Bool
	reading sync.Mutex // held while a read is in progress
}

type clientBodyKey struct{}

func (b *clientBody) Read(p []byte) (int, error) {
	b.reading.Lock()
	defer b.reading.Unlock()
	n, err := b.rc.Read(p)
	if err == io.EOF {
		b.ended.Store(true)
	}
	return n, err
}

func (b *clientBody) Close() error { return b.rc.Close() }

// unfinished reports whether the client is still sending the body.
func (b *clientBody) unfinished() bool { return b != nil && !b.ended.Load() }

// closeAfterResponse makes a final response to r close the client's
// connection when r's body is still on its way, or when r's framing asks
// for it (smuggling.go).
func closeAfterResponse(r *http.Request, status int, h http.Header) {
	if status < 200 {
		return
	}
	if b, _ := r.Context().Value(clientBodyKey{}).(*clientBody); b.unfinished() || closesAfter(r) {
		h.Set("Connection", "close")
	}
}

// abandon gives up, once the exchange is over, a body not read to its end.
func (b *clientBody) abandon(w http.ResponseWriter) {
	if !b.unfinished() {
		return
	}
	// A MaxBytesReader going past its limit is the one public way to tell
	// the server that the body will not be read: it then closes the
	// connection after the response as it does for a body it refuses.
	_, _ = http.MaxBytesReader(w, io.NopCloser(strings.NewReader("x")), 0).Read(make([]byte, 1))
	// And it does not read on, up to 256 KiB, looking for the body's end.
	if http.NewResponseController(w).SetReadDeadline(time.Now()) != nil {
		return
	}
	// The transport's read in progress, if any, now ends at once: wait for
	// it, or the server, finding a read in progress as the handler returns,
	// would end it itself and lift the deadline.
	b.reading.Lock()
	defer b.reading.Unlock()
}

// upstreamError is handleUpstreamError for a request whose body may still
// be on its way.
func (p *Proxy) upstreamError(w http.ResponseWriter, r *http.Request, err error) {
	closeAfterResponse(r, http.StatusBadGateway, w.Header())
	p.handleUpstreamError(w, r, err)
}
