package events

import "io"

// UsageStripper is the response body of a stream whose request had usage
// injected (WithUsageRequested): it passes the upstream's bytes through,
// event by event, minus what the injection added: the usage-only chunk
// before [DONE], and the "usage":null member some servers then put in every
// other chunk. The events are those the Scanner sees (the same
// splitter cuts them), and every byte outside what it takes out passes as
// it came. Complete events are passed on as soon as their blank line
// arrives; only an event split across reads waits for its end, and never
// past max bytes: a longer one passes unchanged, as does an event whose
// data is on several lines.
type UsageStripper struct {
	src   io.ReadCloser
	max   int
	split *sseSplitter

	buf  []byte // reads from src
	in   []byte // read, not yet passed on from in[pos:]
	pos  int
	inAt int64  // the stream offset of in[0]
	out  []byte // ready to pass on
	err  error  // the source's error, returned once out is drained
	// dropLF: a dropped event's last line end was a '\r' that ended a
	// read; a '\n' starting the next read completes it, and goes too.
	dropLF bool
}

// NewUsageStripper returns the stripper of src, which reads src through a
// buffer of readSize bytes and holds at most max bytes of one event.
func NewUsageStripper(src io.ReadCloser, max, readSize int) *UsageStripper {
	u := &UsageStripper{src: src, max: max, buf: make([]byte, readSize)}
	u.split = newSSESplitter(u, max)
	return u
}

// Read returns the next bytes of the stream without what injection added.
func (u *UsageStripper) Read(p []byte) (int, error) {
	for len(u.out) == 0 && u.err == nil {
		n, err := u.src.Read(u.buf)
		u.take(u.buf[:n])
		if u.err = err; err != nil {
			// The end: what is left (an event cut short) passes unchanged.
			u.out = append(u.out, u.in[u.pos:]...)
			u.in, u.pos = nil, 0
			u.split.end()
		}
	}
	n := copy(p, u.out)
	u.out = u.out[n:]
	if len(u.out) == 0 {
		u.out = nil
		return n, u.err
	}
	return n, nil
}

// Close closes the source.
func (u *UsageStripper) Close() error { return u.src.Close() }

// take splits the bytes of one read, passing on every complete event
// (handleEvent) and what lies between events, and keeping the start of an
// incomplete one, up to max bytes.
func (u *UsageStripper) take(b []byte) {
	read := b
	if u.dropLF && len(b) > 0 {
		u.dropLF = false
		if b[0] == '\n' && u.pos == len(u.in) {
			b = b[1:]
			u.inAt++
		}
	}
	u.in = append(u.in, b...)
	u.split.write(read)
	// Comments and blank lines after the last event have been read whole.
	u.passTo(int(u.split.start - u.inAt))
	if len(u.in)-u.pos > u.max {
		u.passTo(len(u.in))
	}
	u.in = u.in[:copy(u.in, u.in[u.pos:])]
	u.inAt += int64(u.pos)
	u.pos = 0
}

// passTo passes on, unchanged, what is left of in before i.
func (u *UsageStripper) passTo(i int) {
	if i > u.pos {
		u.out = append(u.out, u.in[u.pos:i]...)
		u.pos = i
	}
}

func (u *UsageStripper) handleEvent(ev rawEvent) {
	start, end := int(ev.Start-u.inAt), int(ev.End-u.inAt)
	if start < u.pos {
		return // its start was passed on past the bound: the rest goes as it is
	}
	u.passTo(start)
	raw := u.in[start:end]
	u.pos = end
	if ev.Oversized || ev.DataAt < 0 {
		u.out = append(u.out, raw...)
		return
	}
	at := int(ev.DataAt - ev.Start)
	drop, from, to := injectedUsage(raw[at : at+len(ev.Data)])
	switch {
	case drop:
		u.dropLF = raw[len(raw)-1] == '\r' && end == len(u.in)
	case from >= 0:
		u.out = append(append(u.out, raw[:at+from]...), raw[at+to:]...)
	default:
		u.out = append(u.out, raw...)
	}
}

// injectedUsage reports what asking for usage added to a chat or
// completions chunk: the whole chunk (drop: the usage-only chunk that
// include_usage adds), or the "usage":null member at data[from:to] (from
// is -1 when there is none).
func injectedUsage(data []byte) (drop bool, from, to int) {
	c, ok := parseChunk(data)
	switch {
	case !ok:
		return false, -1, -1
	case c.hasUsage && !c.token && emptyChoices(data):
		return true, -1, -1
	}
	from, to = nullUsageMember(data)
	return false, from, to
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
