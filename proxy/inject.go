package proxy

import (
	"bytes"
	"io"
)

// Usage injection (Config.InjectUsage).
//
// OpenAI-compatible servers report a stream's token usage only when the
// request asks for it (stream_options.include_usage), and many clients do
// not. With injection on, the proxy asks on their behalf, reads the usage,
// and takes out of the stream what asking added — the usage-only chunk
// before [DONE], and the "usage":null member some servers then put in every
// other chunk — so that the client receives the bytes the upstream would
// have sent had nothing been injected.

// withUsageRequested returns body with stream_options.include_usage set to
// true, changing only that part of the JSON: the member is added, or its
// value replaced. It returns nil when there is nothing to do or nothing it
// can do safely: the client asked for usage itself, or the body is not a
// JSON object, or stream_options is neither an object nor null.
func withUsageRequested(body []byte) []byte {
	s := jsonScan{b: body}
	if !s.open('{') {
		return nil
	}
	members := 0
	optStart, optEnd := -1, -1
	for s.more('}', &members) {
		if string(s.key()) != "stream_options" {
			s.skip()
			continue
		}
		s.peek()
		optStart = s.i
		s.skip()
		optEnd = s.i
	}
	closeAt := s.i - 1 // the top-level object's '}'
	if !s.end() {
		return nil
	}
	if optStart < 0 { // no stream_options: add the member
		member := `"stream_options":{"include_usage":true}`
		if members > 0 {
			member = "," + member
		}
		return splice(body, closeAt, closeAt, member)
	}
	opts := jsonScan{b: body[:optEnd], i: optStart}
	if opts.null() {
		return splice(body, optStart, optEnd, `{"include_usage":true}`)
	}
	if !opts.open('{') {
		return nil
	}
	inner := 0
	for opts.more('}', &inner) {
		if string(opts.key()) != "include_usage" {
			opts.skip()
			continue
		}
		opts.peek()
		valStart := opts.i
		if bytes.HasPrefix(body[valStart:], []byte("true")) {
			return nil // asked for it
		}
		opts.skip()
		return splice(body, valStart, opts.i, "true")
	}
	member := `"include_usage":true`
	if inner > 0 {
		member += ","
	}
	open := bytes.IndexByte(body[optStart:optEnd], '{') + optStart
	return splice(body, open+1, open+1, member)
}

// splice returns b with b[from:to] replaced by with.
func splice(b []byte, from, to int, with string) []byte {
	out := make([]byte, 0, len(b)-(to-from)+len(with))
	out = append(out, b[:from]...)
	out = append(out, with...)
	return append(out, b[to:]...)
}

// usageStripper is the response body of a stream whose request had usage
// injected: it passes the upstream's bytes through, event by event, minus
// what the injection added. Complete events are passed on as soon as their
// blank line arrives; only an event split across reads waits for its end.
// An event larger than max passes unchanged.
type usageStripper struct {
	src io.ReadCloser
	max int

	buf []byte // reads from src
	in  []byte // read, not yet passed on: the start of an incomplete event
	out []byte // ready to pass on
	err error  // the source's error, returned once out is drained
}

func (u *usageStripper) Read(p []byte) (int, error) {
	if u.buf == nil {
		u.buf = make([]byte, copyBufferSize)
	}
	for len(u.out) == 0 && u.err == nil {
		n, err := u.src.Read(u.buf)
		u.in = append(u.in, u.buf[:n]...)
		u.err = err
		u.cut(err != nil)
	}
	n := copy(p, u.out)
	u.out = u.out[n:]
	if len(u.out) == 0 {
		u.out = nil
		return n, u.err
	}
	return n, nil
}

func (u *usageStripper) Close() error { return u.src.Close() }

// cut moves every complete event of in to out, rewritten; at the end of
// the stream (or past max) the rest goes unchanged.
func (u *usageStripper) cut(atEnd bool) {
	for {
		end := eventEnd(u.in, atEnd)
		if end < 0 {
			break
		}
		u.out = append(u.out, stripInjected(u.in[:end])...)
		u.in = u.in[end:]
	}
	if atEnd || len(u.in) > u.max {
		u.out = append(u.out, u.in...)
		u.in = nil
	}
}

// eventEnd returns the length of the first complete event of b, its blank
// line included, or -1. Lines end in "\r\n", "\n" or "\r"; a '\r' last in b
// could start a "\r\n" and waits, unless the stream has ended.
func eventEnd(b []byte, atEnd bool) int {
	lineStart := 0
	for i := 0; i < len(b); i++ {
		if b[i] != '\n' && b[i] != '\r' {
			continue
		}
		next := i + 1
		if b[i] == '\r' {
			if next == len(b) && !atEnd {
				return -1
			}
			if next < len(b) && b[next] == '\n' {
				next++
			}
		}
		if i == lineStart { // a blank line: the event ends here
			return next
		}
		lineStart = next
		i = next - 1
	}
	return -1
}

// stripInjected returns an event as it would have been without injected
// usage: nothing for the usage-only chunk, a chunk without its
// "usage":null member, any other event as it is. Only events whose data is
// on one "data: " line are rewritten.
func stripInjected(ev []byte) []byte {
	start := bytes.Index(ev, []byte("data:"))
	if start < 0 || (start > 0 && ev[start-1] != '\n' && ev[start-1] != '\r') {
		return ev
	}
	dataStart := start + len("data:")
	if dataStart < len(ev) && ev[dataStart] == ' ' {
		dataStart++
	}
	dataEnd := dataStart + lineEnd(ev[dataStart:])
	if dataEnd < dataStart || bytes.Contains(ev[dataEnd:], []byte("data:")) {
		return ev
	}
	data := ev[dataStart:dataEnd]
	c, ok := parseChunk(data)
	if !ok {
		return ev
	}
	if c.hasUsage && !c.token && emptyChoices(data) {
		return nil // the chunk include_usage adds
	}
	from, to := nullUsageMember(data)
	if from < 0 {
		return ev
	}
	out := make([]byte, 0, len(ev)-(to-from))
	out = append(out, ev[:dataStart+from]...)
	return append(out, ev[dataStart+to:]...)
}

// emptyChoices reports whether a chunk's choices is an empty array.
func emptyChoices(data []byte) bool {
	s := jsonScan{b: data}
	s.open('{')
	for n := 0; s.more('}', &n); {
		if string(s.key()) == "choices" {
			if !s.open('[') {
				return false
			}
			m := 0
			return !s.more(']', &m)
		}
		s.skip()
	}
	return false
}

// nullUsageMember returns where a top-level "usage":null member of data
// starts and ends, with the comma and white space that separate it from
// its neighbour, or -1.
func nullUsageMember(data []byte) (from, to int) {
	s := jsonScan{b: data}
	s.open('{')
	prevEnd := -1 // where the previous member's value ended
	for n := 0; s.more('}', &n); {
		s.peek()
		keyStart := s.i
		if string(s.key()) == "usage" && s.null() {
			if prevEnd >= 0 { // remove from the comma after the previous value
				return prevEnd, s.i
			}
			// The first member: remove up to the next member's key.
			end := s.i
			if s.peek() == ',' {
				s.i++
				s.peek()
				end = s.i
			}
			return keyStart, end
		}
		s.skip()
		prevEnd = s.i
	}
	return -1, -1
}
