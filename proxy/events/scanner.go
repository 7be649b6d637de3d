package events

import "time"

// Scanner splits an event stream (server-sent events, or newline-delimited
// JSON) into events and classifies each: the proxy's measurement and
// itlbench's client-side one both read streams through it, so that the
// two ends of a comparison count exactly the same events as
// token-bearing. Each Write carries the Stamp of the read it holds, and
// every event that Write completes is handed on with that Stamp: the
// event arrived when the read that completed it returned.
type Scanner struct {
	split splitter
	parse func([]byte) Event
	on    func(Event, Stamp)
	at    Stamp // the Stamp of the Write being split
}

// Stamp is what a stream's reader noted of one read: when it returned,
// and the load then, in whatever unit the reader counts it (the proxy:
// its model's streams in flight; 0 for a reader that counts none).
type Stamp struct {
	At   time.Time
	Load int64
}

// splitter cuts a stream into events: sseSplitter, or ndjsonSplitter for
// the APIs that stream newline-delimited JSON.
type splitter interface {
	write(p []byte)
	end() (truncated bool)
}

// NewScanner returns a scanner of an endpoint's stream that calls on for
// each event (each line, for an NDJSON endpoint) with the Stamp of the
// read that completed it, and buffers at most maxEventBytes of one event
// (larger ones are reported as Oversized).
func NewScanner(endpoint Endpoint, maxEventBytes int, on func(Event, Stamp)) *Scanner {
	s := &Scanner{on: on, parse: parserFor(endpoint)}
	if endpoint.NDJSON() {
		s.split = newNDJSONSplitter(s, maxEventBytes)
	} else {
		s.split = newSSESplitter(s, maxEventBytes)
	}
	return s
}

// Write feeds the next bytes of the stream, one read's, as read, with
// that read's stamp; events may be split across writes anywhere.
func (s *Scanner) Write(p []byte, at Stamp) {
	s.at = at
	s.split.write(p)
}

// End is called at the end of the stream. It reports whether the stream
// stopped inside an event, which is dropped, as a client's parser drops
// it.
func (s *Scanner) End() (truncated bool) { return s.split.end() }

func (s *Scanner) handleEvent(ev rawEvent) { s.on(classify(ev, s.parse), s.at) }
