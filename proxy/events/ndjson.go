package events

import "bytes"

// ndjsonSplitter cuts a newline-delimited JSON stream (Ollama's native
// API, application/x-ndjson) into lines, one value each, with the
// guarantees of sseSplitter: it is fed each read's bytes as they pass and
// never sees them again, copies only a line that continues in a later
// write, and never more than max bytes of it; a longer line is dispatched
// as Oversized when its end arrives. Lines end in '\n'; a '\r' before it
// is dropped, and blank lines are skipped. It dispatches to an
// eventHandler, each line as an event's data, so that one classifier reads
// both framings.
type ndjsonSplitter struct {
	h   eventHandler
	max int

	partialLine       // an unterminated line carried over to the next write
	off         int64 // the stream offset of the next byte written
	start       int64 // the stream offset where the current line starts
}

func newNDJSONSplitter(h eventHandler, max int) *ndjsonSplitter {
	return &ndjsonSplitter{h: h, max: max}
}

// write feeds the next bytes of the stream.
func (s *ndjsonSplitter) write(p []byte) {
	for len(p) > 0 {
		i := bytes.IndexByte(p, '\n')
		if i < 0 {
			s.carry(p, s.max)
			s.off += int64(len(p))
			return
		}
		line := s.complete(p[:i], s.max)
		p = p[i+1:]
		s.off += int64(i) + 1
		s.dispatch(line)
		s.line = s.line[:0]
		s.start = s.off
	}
}

// dispatch hands one line, without its '\n', to the handler.
func (s *ndjsonSplitter) dispatch(line []byte) {
	if s.discard {
		s.discard = false
		s.h.handleEvent(rawEvent{Oversized: true, Start: s.start, End: s.off, DataAt: -1})
		return
	}
	line = bytes.TrimSuffix(line, []byte{'\r'})
	if len(bytes.TrimSpace(line)) == 0 {
		return
	}
	s.h.handleEvent(rawEvent{Data: line, Start: s.start, End: s.off, DataAt: s.start})
}

// end is called at the end of the stream. A last line without its '\n' is
// still dispatched, as line readers (bufio.Scanner, Python's iter_lines)
// deliver it: cut mid-value, it reads as invalid JSON and is counted so.
// It reports whether that line had grown past the bound.
func (s *ndjsonSplitter) end() (truncated bool) {
	truncated = s.discard
	if len(s.line) > 0 && !s.discard {
		s.dispatch(s.line)
	}
	s.line, s.discard = nil, false
	s.off, s.start = 0, 0
	return truncated
}
