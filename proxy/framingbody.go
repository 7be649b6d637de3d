package proxy

import "bytes"

// Following a chunked request body as Go's chunked reader and its trailer
// reading do (net/http/internal/chunked.go, body.readTrailer).

// followChunkSize reads a chunk-size line, and returns what follows it.
func (f *framing) followChunkSize(p []byte) []byte {
	i := bytes.IndexByte(p, '\n')
	if i < 0 {
		if f.line = append(f.line, p...); len(f.line) >= goBufferSize {
			f.stop() // Go's read buffer fills before the line ends
		}
		return nil
	}
	line, rest := p[:i+1], p[i+1:]
	if len(f.line) > 0 {
		line = append(f.line, line...)
	}
	f.line = f.line[:0]
	if len(line) > goBufferSize {
		f.stop()
		return nil
	}
	f.chunkSize(line)
	return rest
}

// chunkSize reads a whole chunk-size line, LF included.
func (f *framing) chunkSize(line []byte) {
	// CRLF, and no other CR: RFC 9112 refuses a bare LF here (errata 7633).
	if cr := bytes.IndexByte(line, '\r'); cr < 0 || cr != len(line)-2 {
		f.stop()
		return
	}
	line = line[:len(line)-2]
	f.overhead += int64(len(line)) + 2
	size, _, _ := bytes.Cut(bytes.TrimRight(line, " \t"), []byte(";"))
	n, ok := parseHex(size)
	if !ok {
		f.stop()
		return
	}
	// Go's arithmetic, overflow included.
	f.overhead = max(f.overhead-(16+2*int64(n)), 0)
	switch {
	case f.overhead > maxChunkOverhead:
		f.stop()
	case n == 0:
		f.state = inTrailer
	default:
		f.left, f.state = n, inChunkData
	}
}

// parseHex reads a chunk size: 1 to 16 hex digits, nothing else.
func parseHex(b []byte) (n uint64, ok bool) {
	if len(b) == 0 || len(b) > 16 {
		return 0, false
	}
	for _, c := range b {
		switch {
		case '0' <= c && c <= '9':
			c -= '0'
		case 'a' <= c && c <= 'f':
			c -= 'a' - 10
		case 'A' <= c && c <= 'F':
			c -= 'A' - 10
		default:
			return 0, false
		}
		n = n<<4 | uint64(c)
	}
	return n, true
}

// followTrailer reads what follows the last chunk: CRLF, or header lines
// up to a blank one, which Go reads only when a CRLF CRLF ends within its
// 4 KiB read buffer; and returns what follows it.
func (f *framing) followTrailer(p []byte) []byte {
	if len(f.line) == 0 && len(p) >= 2 && p[0] == '\r' && p[1] == '\n' {
		f.endRequest()
		return p[2:]
	}
	f.line = append(f.line, p...)
	b := f.line
	switch {
	case len(b) < 2:
		return nil
	case b[0] == '\r' && b[1] == '\n':
		return f.endTrailer(2)
	case bytes.Index(b[:min(len(b), goBufferSize)], []byte("\r\n\r\n")) < 0:
		if len(b) >= goBufferSize {
			f.stop()
		}
		return nil
	}
	fields, next := firstBlankLine(b)
	if next < 0 || !eachField(fields, func(_, _ []byte) {}) {
		f.stop()
		return nil
	}
	return f.endTrailer(next)
}

// endTrailer ends the request after the first n bytes of f.line, and
// returns a copy of the rest (f.line's array is used again).
func (f *framing) endTrailer(n int) []byte {
	rest := append([]byte(nil), f.line[n:]...)
	f.line = f.line[:0]
	f.endRequest()
	return rest
}

// firstBlankLine returns the lines before the first blank one, and where
// the line after it starts (-1: no blank line).
func firstBlankLine(b []byte) (lines []byte, next int) {
	for i := 0; i < len(b); {
		j := bytes.IndexByte(b[i:], '\n')
		switch {
		case j < 0:
			return nil, -1
		case j == 0 || j == 1 && b[i] == '\r':
			return b[:i], i + j + 1
		}
		i += j + 1
	}
	return nil, -1
}
