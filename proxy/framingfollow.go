package proxy

import (
	"bytes"
	"net/http"
	"strings"
)

// Following HTTP/1.x requests through a connection's bytes, as Go's server
// reads them (net/http's readRequest and chunked reader, net/textproto's
// header reader). Where Go's reading would fail, the follower stops: Go
// then closes the connection, or, if it ever goes on, the next request
// finds no verdict and is refused. The follower may be stricter than Go,
// never laxer.

const (
	// maxQueued bounds the verdicts waiting for their requests: Go reads
	// one request at a time, so only what its 4 KiB read buffer held can
	// be ahead of the one it serves.
	maxQueued = 1024
	// goBufferSize is the size of the buffer Go's server reads a
	// connection through; it bounds a chunk-size line and a trailer.
	goBufferSize = 4 << 10
	// maxChunkOverhead is how far Go lets chunk-size lines outgrow the
	// data they carry (16 bytes a chunk and twice its size are free).
	maxChunkOverhead = 16 << 10
)

// verdict is what the bytes of one request said about it.
type verdict struct {
	method, target, proto string // the request line, as sent
	length                int64  // Request.ContentLength, as Go sets it
	chunked               bool   // Go reads the body as chunked
	ambiguous             bool   // both Content-Length and Transfer-Encoding were sent
}

// names reports whether r is the request v was taken from, as far as the
// request line and the framing of its body tell.
func (v *verdict) names(r *http.Request) bool {
	return r.Method == v.method && r.RequestURI == v.target && r.Proto == v.proto &&
		r.ContentLength == v.length && (len(r.TransferEncoding) > 0) == v.chunked
}

type framingState int

const (
	inHeader    framingState = iota
	inBody                   // a Content-Length body: left bytes to go
	inChunkSize              // a chunk-size line
	inChunkData              // chunk data: left bytes to go
	inChunkEnd               // the CRLF after chunk data
	inTrailer                // the trailer section, up to a blank line
	holding                  // after a request that may switch protocols: bytes held
	stopped                  // not following any more
)

// after says what follows a request, once its body has ended.
type after int

const (
	nextRequest after = iota
	maySwitch         // CONNECT or Upgrade: requests again only if the handler did not switch
	notHTTP1          // another version: Go closes the connection, or speaks HTTP/2 on it
)

// framing is the state of following HTTP/1.x requests through a byte
// stream.
type framing struct {
	state framingState
	// limit bounds a header block, and the bytes held after a request
	// that may switch protocols: Go reads no further before it calls the
	// handler again.
	limit int
	// optionsByGo: Go's server answers OPTIONS * itself.
	optionsByGo bool

	queue    []verdict // one per request the handler will see, oldest first
	header   []byte    // a header block read so far
	scanned  int       // how far header was searched for its end
	line     []byte    // a chunk-size line, chunk end or trailer read so far
	left     uint64    // bytes left of a Content-Length body or a chunk
	overhead int64     // chunk-size bytes beyond what the data excuses
	skip     int       // CR and LF bytes Go skips before a request after a POST
	post     bool      // the current request is a POST
	then     after     // what follows the current request
	held     []byte    // bytes read while holding
}

// newFraming starts following a connection of srv (nil: Go's defaults).
func newFraming(srv *http.Server) framing {
	maxHeader, optionsByGo := http.DefaultMaxHeaderBytes, true
	if srv != nil {
		if srv.MaxHeaderBytes > 0 {
			maxHeader = srv.MaxHeaderBytes
		}
		optionsByGo = !srv.DisableGeneralOptionsHandler
	}
	// Go reads a header block up to MaxHeaderBytes plus 4 KiB, after what
	// its read buffer already held.
	return framing{limit: maxHeader + 2*goBufferSize, optionsByGo: optionsByGo}
}

// follow consumes p.
func (f *framing) follow(p []byte) {
	for len(p) > 0 {
		switch f.state {
		case inHeader:
			p = f.followHeader(p)
		case inBody, inChunkData:
			n := min(uint64(len(p)), f.left)
			f.left -= n
			p = p[n:]
			switch {
			case f.left > 0:
			case f.state == inBody:
				f.endRequest()
			default:
				f.state = inChunkEnd
			}
		case inChunkSize:
			p = f.followChunkSize(p)
		case inChunkEnd:
			// Go reads two bytes after the data and wants CRLF.
			n := min(2-len(f.line), len(p))
			f.line, p = append(f.line, p[:n]...), p[n:]
			if len(f.line) == 2 {
				if string(f.line) != "\r\n" {
					f.stop()
					return
				}
				f.line, f.state = f.line[:0], inChunkSize
			}
		case inTrailer:
			p = f.followTrailer(p)
		case holding:
			if len(f.held)+len(p) > f.limit {
				f.stop()
				return
			}
			f.held = append(f.held, p...)
			return
		default:
			return
		}
	}
}

// next takes the verdict of the oldest request not yet served. Asked for
// one with none waiting while holding, it resumes: Go has read another
// request, so the connection did not switch protocols.
func (f *framing) next() (verdict, bool) {
	if len(f.queue) == 0 && f.state == holding {
		held := f.held
		f.held, f.state = nil, inHeader
		f.follow(held)
	}
	if len(f.queue) == 0 {
		return verdict{}, false
	}
	v := f.queue[0]
	f.queue[0] = verdict{}
	f.queue = f.queue[1:]
	return v, true
}

// stop gives up following, and lets the buffers go.
func (f *framing) stop() {
	f.state = stopped
	f.header, f.line, f.held = nil, nil, nil
}

// followHeader reads a header block, and returns what follows it.
func (f *framing) followHeader(p []byte) []byte {
	if len(f.header) == 0 {
		// Go discards up to four CR or LF bytes before a request after a
		// POST (RFC 9112 section 2.2), peeking at four bytes.
		for f.skip > 0 && len(p) > 0 && (p[0] == '\r' || p[0] == '\n') {
			p, f.skip = p[1:], f.skip-1
		}
		if len(p) == 0 {
			return nil
		}
		f.skip = 0
	}
	buf, before := p, len(f.header)
	if before > 0 {
		f.header = append(f.header, p...)
		buf = f.header
	}
	end, next := headerEnd(buf, f.scanned)
	if end < 0 {
		if before == 0 {
			f.header = append(f.header, p...)
		}
		f.scanned = max(len(f.header)-2, 0)
		if len(f.header) > f.limit {
			f.stop()
		}
		return nil
	}
	f.request(buf[:end])
	if f.state != stopped {
		f.header, f.scanned = f.header[:0], 0
		if cap(f.header) > goBufferSize {
			f.header = nil // a large block does not stay for the connection's life
		}
	}
	return p[next-before:]
}

// headerEnd finds the blank line that ends a header block, searching from
// from: the block is b[:end] and what follows starts at b[next]. Line ends
// may be CRLF or a bare LF, as Go's header reader accepts both. end is -1
// when the block goes on.
func headerEnd(b []byte, from int) (end, next int) {
	for i := from; i < len(b); i++ {
		j := bytes.IndexByte(b[i:], '\n')
		if j < 0 {
			break
		}
		i += j
		switch {
		case i+1 < len(b) && b[i+1] == '\n':
			return i, i + 2
		case i+2 < len(b) && b[i+1] == '\r' && b[i+2] == '\n':
			return i, i + 3
		}
	}
	return -1, 0
}

// request reads a request's header block, queues its verdict, and sets
// how its body is framed and what follows it.
func (f *framing) request(block []byte) {
	first, fields := cutLine(block)
	line := string(first)
	method, rest, ok1 := strings.Cut(line, " ")
	target, proto, ok2 := strings.Cut(rest, " ")
	major, minor, ok3 := http.ParseHTTPVersion(proto)
	if !ok1 || !ok2 || !ok3 {
		f.stop() // Go answers 400 and closes
		return
	}
	var h bodyFields
	okFields := eachField(fields, h.add)
	v := verdict{method: method, target: target, proto: proto, ambiguous: h.lengths > 0 && h.encodings > 0}
	// Go ignores Transfer-Encoding in HTTP/1.0 requests, and knows only
	// a single "chunked".
	chunked := h.encodings > 0 && (major > 1 || major == 1 && minor >= 1)
	okEncoding := !chunked || h.encodings == 1 && asciiEqualFold(h.encoding, "chunked")
	n, okLength := h.contentLength()
	v.length, v.chunked = n, chunked
	switch {
	case chunked:
		v.length = -1
	case method == "PRI" && target == "*" && proto == "HTTP/2.0" && h.fields == 0:
		v.length = -1 // what Go sets for the HTTP/2 preface, read as a request
	}
	if !(f.optionsByGo && method == "OPTIONS" && target == "*") {
		f.queue = append(f.queue, v)
	}
	f.post, f.then = method == "POST", nextRequest
	switch {
	case major != 1:
		f.then = notHTTP1
	case method == "CONNECT" || h.upgrade:
		f.then = maySwitch
	}
	switch {
	case !okFields || !okEncoding || !okLength || len(f.queue) > maxQueued:
		f.stop() // Go answers 400 or 501 and closes
	case chunked:
		f.state, f.overhead = inChunkSize, 0
	case n > 0:
		f.state, f.left = inBody, uint64(n)
	default:
		f.endRequest()
	}
}

// endRequest goes on to what follows the request.
func (f *framing) endRequest() {
	switch f.then {
	case maySwitch:
		f.state = holding
	case notHTTP1:
		f.stop()
		return
	default:
		f.state = inHeader
	}
	if f.post {
		f.skip = 4
	}
}
