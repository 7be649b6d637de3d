package events

import "bytes"

// rawEvent is one dispatched event before it is read: a server-sent
// event, or one line of an NDJSON stream (its Data). Its slices belong to
// the splitter and are valid only during the handler call.
type rawEvent struct {
	// Type is the value of the event's last "event:" field, empty when it
	// had none (the spec's default type, "message").
	Type []byte
	// Data is the event's "data:" lines joined with '\n'.
	Data []byte
	// Oversized reports that the event grew past the splitter's bound; its
	// Type and Data were dropped.
	Oversized bool
	// Start and End place the event's raw bytes in the stream, as offsets
	// from its first byte: from the end of the blank line before it (or
	// the stream's start) to the end of its own blank line. When that
	// blank line ends in a '\r' that a write ended on, a '\n' starting the
	// next write completes the same line end: it belongs to the event, but
	// lies past End (the event was dispatched before it arrived).
	Start, End int64
	// DataAt is the offset of Data's first byte in the stream when the
	// event had one data line (Data is then those bytes as sent), else -1.
	DataAt int64
}

// eventHandler receives the events a splitter dispatches.
type eventHandler interface {
	handleEvent(ev rawEvent)
}

// bom is the UTF-8 byte order mark, which the spec strips from the start
// of a stream.
var bom = []byte("\xEF\xBB\xBF")

var newline = []byte{'\n'}

// sseSplitter cuts a byte stream into server-sent events as the spec's
// interpretation rules define them
// (https://html.spec.whatwg.org/multipage/server-sent-events.html#event-stream-interpretation):
// lines end in "\r\n", "\n" or "\r"; a blank line dispatches the event;
// lines starting with ':' are comments; "data" lines are joined with '\n';
// "id" and "retry" are read and ignored, as are unknown fields.
//
// It is fed the bytes of each read as they pass and never sees them again,
// so events may be split across writes anywhere, even between the '\r' and
// '\n' of one line end. It copies only what must outlive a write (a partial
// line, the data of an event not yet dispatched), and never more than max
// bytes of either: an event past that bound is dispatched as Oversized, so
// memory stays bounded however long a line the upstream sends.
type sseSplitter struct {
	h   eventHandler
	max int

	partialLine        // an unterminated line carried over to the next write
	data        []byte // the current event's data, lines joined with '\n'
	typ         []byte // the current event's type
	hasData     bool   // the current event has at least one data line
	afterCR     bool   // the last write ended in '\r': a leading '\n' ends the same line
	oversized   bool   // the current event overflowed: dispatch it as Oversized
	started     bool   // the first line has been seen (BOM handled)

	off    int64 // the stream offset of the next byte written
	start  int64 // the stream offset where the current event's raw bytes start
	dataAt int64 // the current event's DataAt
}

func newSSESplitter(h eventHandler, max int) *sseSplitter {
	return &sseSplitter{h: h, max: max}
}

// write feeds the next bytes of the stream.
func (s *sseSplitter) write(p []byte) {
	for len(p) > 0 {
		if s.afterCR {
			s.afterCR = false
			if p[0] == '\n' {
				p = p[1:]
				s.off++
				if s.start == s.off-1 { // it ends the blank line before the event
					s.start = s.off
				}
				continue
			}
		}
		i := lineEnd(p)
		if i < 0 {
			s.carry(p, s.max)
			s.off += int64(len(p))
			return
		}
		end := s.off + int64(i) // where the line ends
		line := s.complete(p[:i], s.max)
		if p[i] == '\r' {
			switch {
			case i+1 == len(p):
				s.afterCR = true
			case p[i+1] == '\n':
				i++
			}
		}
		p = p[i+1:]
		s.off += int64(i) + 1
		if s.discard {
			s.discard = false
			s.oversized = true
		} else {
			s.processLine(line, end)
		}
		s.line = s.line[:0]
	}
}

// lineEnd returns the index of the first '\r' or '\n' in p, or -1.
func lineEnd(p []byte) int {
	n := bytes.IndexByte(p, '\n')
	head := p
	if n >= 0 {
		head = p[:n]
	}
	if r := bytes.IndexByte(head, '\r'); r >= 0 {
		return r
	}
	return n
}

// partialLine is a line that continues in a later write, kept up to a
// bound: past it, the line is dropped up to its end.
type partialLine struct {
	line    []byte
	discard bool // the line overflowed: drop it up to its end
}

// complete returns the whole of a line whose end is in this write, rest
// being its part in it: the part carried from earlier writes and rest, or
// rest alone. A line past the bound is marked discarded, whether it
// arrived in one write or several.
func (l *partialLine) complete(rest []byte, max int) []byte {
	switch {
	case len(l.line) > 0 || l.discard:
		l.carry(rest, max)
		return l.line
	case len(rest) > max:
		l.discard = true
	}
	return rest
}

// carry keeps part of a line that continues in a later write.
func (l *partialLine) carry(b []byte, max int) {
	if l.discard {
		return
	}
	if len(l.line)+len(b) > max {
		l.discard = true
		l.line = nil
		return
	}
	l.line = appendBounded(l.line, b, max)
}

// appendBounded appends b to dst, which the caller has checked will stay
// within max bytes, growing dst's capacity no further than max (append
// alone could double it past the bound).
func appendBounded(dst, b []byte, max int) []byte {
	if need := len(dst) + len(b); need > cap(dst) {
		grown := make([]byte, len(dst), min(max, 2*need))
		copy(grown, dst)
		dst = grown
	}
	return append(dst, b...)
}

// processLine reads one line, whose line end starts at stream offset end.
func (s *sseSplitter) processLine(line []byte, end int64) {
	if !s.started {
		s.started = true
		line = bytes.TrimPrefix(line, bom)
	}
	if len(line) == 0 {
		s.dispatch()
		return
	}
	if line[0] == ':' {
		return // a comment: keep-alives look like this
	}
	name, value := line, []byte(nil)
	if c := bytes.IndexByte(line, ':'); c >= 0 {
		name, value = line[:c], line[c+1:]
		if len(value) > 0 && value[0] == ' ' {
			value = value[1:]
		}
	}
	switch string(name) {
	case "data":
		if s.oversized {
			return
		}
		if len(s.data)+1+len(value) > s.max {
			s.oversized = true
			s.data = nil
			return
		}
		if s.hasData {
			s.data = appendBounded(s.data, newline, s.max)
			s.dataAt = -1
		} else {
			s.dataAt = end - int64(len(value))
		}
		s.data = appendBounded(s.data, value, s.max)
		s.hasData = true
	case "event":
		s.typ = append(s.typ[:0], value...)
	}
}

func (s *sseSplitter) dispatch() {
	switch {
	case s.oversized:
		s.h.handleEvent(rawEvent{Oversized: true, Start: s.start, End: s.off, DataAt: -1})
	case s.hasData:
		s.h.handleEvent(rawEvent{Type: s.typ, Data: s.data, Start: s.start, End: s.off, DataAt: s.dataAt})
	}
	s.data, s.typ = s.data[:0], s.typ[:0]
	s.hasData, s.oversized = false, false
	s.start = s.off
}

// end is called at the end of the stream. It reports whether the stream
// stopped inside an event: a partial line, or lines not yet dispatched by a
// blank line. Such an event is dropped, as a client's parser drops it.
func (s *sseSplitter) end() (truncated bool) {
	truncated = len(s.line) > 0 || s.discard || s.hasData || s.oversized
	s.line, s.data, s.typ = nil, nil, nil
	s.hasData, s.oversized, s.discard, s.afterCR = false, false, false, false
	s.off, s.start = 0, 0
	return truncated
}
