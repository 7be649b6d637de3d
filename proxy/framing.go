package proxy

import (
	"bytes"
	"context"
	"net"
	"net/http"
	"strconv"
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
// carry (headers, then a Content-Length or chunked body) and note, request
// by request, whether the headers named both fields; the handler takes its
// request's verdict and refuses an ambiguous one.

// maxFramingHeader bounds the header block a connection holds while
// following it; past it, following stops (Go refuses such headers anyway).
const maxFramingHeader = 1 << 20

// GuardListener wraps ln so that the proxy can refuse requests with
// ambiguous framing. Use it for cleartext HTTP/1.x listeners, together with
// ConnContext as the server's ConnContext.
func GuardListener(ln net.Listener) net.Listener { return guardListener{ln} }

type guardListener struct{ net.Listener }

func (l guardListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &framingConn{Conn: c}, nil
}

type framingKey struct{}

// ConnContext makes a connection's framing verdicts available to the
// proxy's handler (http.Server.ConnContext).
func ConnContext(ctx context.Context, c net.Conn) context.Context {
	if fc, ok := c.(*framingConn); ok {
		return context.WithValue(ctx, framingKey{}, fc)
	}
	return ctx
}

// ambiguousFraming reports whether the request was sent with both a
// Content-Length and a Transfer-Encoding.
func ambiguousFraming(r *http.Request) bool {
	fc, ok := r.Context().Value(framingKey{}).(*framingConn)
	return ok && fc.next()
}

// framingConn follows the requests on one connection as the server reads
// them. Reads happen on the server's goroutine for the connection, the
// verdicts are taken on the handler's: hence the lock.
type framingConn struct {
	net.Conn
	mu       sync.Mutex
	f        framing
	verdicts []bool // one per request whose headers were read, oldest first
}

func (c *framingConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if n > 0 {
		c.mu.Lock()
		c.verdicts = c.f.follow(p[:n], c.verdicts)
		c.mu.Unlock()
	}
	return n, err
}

// next takes the verdict of the oldest request not yet served.
func (c *framingConn) next() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.verdicts) == 0 {
		return false
	}
	v := c.verdicts[0]
	c.verdicts = c.verdicts[1:]
	return v
}

// framing is the state of following HTTP/1.x requests through a byte
// stream.
type framing struct {
	state    framingState
	header   []byte // the header block read so far
	body     int64  // bytes left of a Content-Length body or a chunk
	line     []byte // a chunk-size or trailer line read so far
	upgrades bool   // the current request asks to switch protocols
}

type framingState int

const (
	inHeader    framingState = iota
	inBody                   // a Content-Length body: body bytes left
	inChunkSize              // a chunk-size line
	inChunkData              // chunk data: body bytes left, then CRLF
	inTrailer                // trailer lines, up to a blank one
	stopped                  // not HTTP/1.x framing any more (upgrade, HTTP/2, confusion)
)

// follow consumes p and appends a verdict for each request whose header
// block ends in it.
func (f *framing) follow(p []byte, verdicts []bool) []bool {
	for len(p) > 0 && f.state != stopped {
		switch f.state {
		case inHeader:
			f.header = append(f.header, p...)
			end, next := headerEnd(f.header)
			if end < 0 {
				if len(f.header) > maxFramingHeader {
					f.state = stopped
				}
				return verdicts
			}
			rest := f.header[next:]
			verdicts = append(verdicts, f.headers(f.header[:end]))
			p = append([]byte(nil), rest...)
			f.header = f.header[:0]
		case inBody:
			n := min(int64(len(p)), f.body)
			f.body -= n
			p = p[n:]
			if f.body == 0 {
				f.endRequest()
			}
		case inChunkData:
			if f.body > 0 {
				n := min(int64(len(p)), f.body)
				f.body -= n
				p = p[n:]
				continue
			}
			// The CRLF after the data: read it as an empty line.
			var line []byte
			if line, p = f.readLine(p); line == nil {
				return verdicts
			}
			if len(line) != 0 {
				f.state = stopped
			} else {
				f.state = inChunkSize
			}
		case inChunkSize:
			var line []byte
			if line, p = f.readLine(p); line == nil {
				return verdicts
			}
			if i := bytes.IndexByte(line, ';'); i >= 0 {
				line = line[:i]
			}
			size, err := strconv.ParseInt(string(bytes.TrimSpace(line)), 16, 64)
			switch {
			case err != nil || size < 0:
				f.state = stopped
			case size == 0:
				f.state = inTrailer
			default:
				f.body, f.state = size, inChunkData
			}
		case inTrailer:
			var line []byte
			if line, p = f.readLine(p); line == nil {
				return verdicts
			}
			if len(line) == 0 {
				f.endRequest()
			}
		}
	}
	return verdicts
}

// headerEnd finds the blank line that ends a header block: the block is
// b[:end] and what follows starts at b[next]. Line ends may be CRLF or a
// bare LF, as Go's parser accepts both. end is -1 when the block goes on.
func headerEnd(b []byte) (end, next int) {
	for i := bytes.IndexByte(b, '\n'); i >= 0 && i+1 < len(b); {
		switch {
		case b[i+1] == '\n':
			return i, i + 2
		case b[i+1] == '\r' && i+2 < len(b) && b[i+2] == '\n':
			return i, i + 3
		}
		j := bytes.IndexByte(b[i+1:], '\n')
		if j < 0 {
			break
		}
		i += 1 + j
	}
	return -1, 0
}

// readLine returns the next line of p, without its CRLF or LF, and what
// follows it; or nil and nothing when the line continues in a later read.
func (f *framing) readLine(p []byte) (line, rest []byte) {
	i := bytes.IndexByte(p, '\n')
	if i < 0 {
		if f.line = append(f.line, p...); len(f.line) > maxFramingHeader {
			f.state = stopped
		}
		return nil, nil
	}
	line = bytes.TrimSuffix(append(f.line, p[:i]...), []byte("\r"))
	f.line = f.line[:0]
	return append([]byte{}, line...), p[i+1:]
}

// headers reads a request's header block, sets how its body is framed,
// and returns whether it is ambiguous.
func (f *framing) headers(block []byte) (ambiguous bool) {
	lines := bytes.Split(block, []byte("\n"))
	for i := range lines {
		lines[i] = bytes.TrimSuffix(lines[i], []byte("\r"))
	}
	if bytes.HasPrefix(lines[0], []byte("PRI * HTTP/2")) || bytes.HasPrefix(lines[0], []byte("CONNECT ")) {
		f.state = stopped
		return false
	}
	var length, chunked, hasLength, hasTE bool
	var n int64
	f.upgrades = false
	for _, l := range lines[1:] {
		name, value, ok := bytes.Cut(l, []byte(":"))
		if !ok {
			continue
		}
		value = bytes.TrimSpace(value)
		switch {
		case bytes.EqualFold(name, []byte("Content-Length")):
			hasLength = true
			v, err := strconv.ParseInt(string(value), 10, 64)
			if err == nil && v >= 0 {
				length, n = true, v
			}
		case bytes.EqualFold(name, []byte("Transfer-Encoding")):
			hasTE = true
			chunked = chunked || bytes.EqualFold(value, []byte("chunked"))
		case bytes.EqualFold(name, []byte("Upgrade")):
			f.upgrades = true
		}
	}
	switch {
	case hasTE && !chunked:
		f.state = stopped // Go refuses it (501) and closes the connection
	case chunked:
		f.state = inChunkSize
	case length && n > 0:
		f.body, f.state = n, inBody
	default:
		f.endRequest()
	}
	return hasLength && hasTE
}

// endRequest starts on the next request, unless this one may switch the
// connection to another protocol.
func (f *framing) endRequest() {
	f.state = inHeader
	if f.upgrades {
		f.state = stopped
	}
}
