package realtime

import (
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gobwas/httphead"
	"github.com/gobwas/ws/wsflate"
)

// Side is one end of the connection.
type Side uint8

// The two ends: the client, whose frames go to the server, and the
// upstream server.
const (
	Client Side = iota
	Server
)

// Config configures a Conn.
type Config struct {
	// MaxMessageBytes bounds the message the measurement holds, after
	// decompression: a larger one is forwarded all the same, counted
	// (TooLarge) and not read.
	MaxMessageBytes int
	// Extensions is the Sec-WebSocket-Extensions of the server's 101
	// response, its values joined by commas: the extensions in effect.
	Extensions string
}

// Conn follows one WebSocket connection of the Realtime API from copies
// of the bytes that pass it each way, and reports each response it sees
// to its Observer. It never changes or holds up the bytes: the caller
// forwards them first and has them measured after (Arrived, Measure).
//
// Each direction is copied, and measured, by a goroutine of its own. Its
// frames, decompression and events are read on that goroutine, without a
// lock: one direction's measuring never waits for the other's. What the
// two share (the responses, how the connection ended) is behind a lock
// held only to apply an event, and to call the Observer.
type Conn struct {
	obs   Observer
	t0    time.Time // the origin of inFlight's stamps, on the monotonic clock
	sides [2]side

	mu     sync.Mutex
	res    responses
	closed bool
	// endedBy is the side that ended the connection first, by a Close
	// frame or by closing its end, once known.
	endedBy    Side
	endedKnown bool
}

// side is what the Conn follows of one direction: the frames a side
// sends.
type side struct {
	c    *Conn
	from Side
	// frames, noted, at and written belong to the side's goroutine (and
	// to Close, once measuring is false).
	frames frameReader
	noted  []byte
	at     time.Time
	// written is the forwarding of the bytes being measured: when their
	// write began and returned, zero when not known; wroteResponse: that
	// write carried a response's events, and is counted.
	written       Written
	wroteResponse bool
	// inFlight is the stamp (since Conn.t0, plus 1) of the bytes Arrived
	// noted and Measure has not finished with, 0 for none: a
	// response.created may have been caused by them.
	inFlight atomic.Int64
	// measuring: the side's goroutine is reading frames (under mu).
	measuring bool
	done      bool // frames ended (under mu)
}

// New returns the Conn of a connection whose server accepted it with the
// extensions cfg names.
func New(cfg Config, obs Observer) *Conn {
	c := &Conn{obs: obs, t0: time.Now()}
	deflate, unknown := parseExtensions(cfg.Extensions)
	for from := range c.sides {
		s := &c.sides[from]
		s.c, s.from = c, Side(from)
		s.frames = frameReader{to: s, max: cfg.MaxMessageBytes, unknownExtension: unknown}
		if deflate != nil {
			s.frames.deflate = true
			// Each side's parameter says whether that side's sender resets
			// its window (RFC 7692 section 7.1.1).
			s.frames.takeover = !deflate.ClientNoContextTakeover
			if Side(from) == Server {
				s.frames.takeover = !deflate.ServerNoContextTakeover
			}
		}
	}
	return c
}

// parseExtensions reads the extensions a 101 response accepted:
// permessage-deflate's parameters, and whether any other extension, whose
// framing the measurement does not know, is in effect.
func parseExtensions(header string) (deflate *wsflate.Parameters, unknown bool) {
	if strings.TrimSpace(header) == "" {
		return nil, false
	}
	opts, ok := httphead.ParseOptions([]byte(header), nil)
	if !ok {
		return nil, true
	}
	for _, opt := range opts {
		var p wsflate.Parameters
		if string(opt.Name) != wsflate.ExtensionName || deflate != nil || p.Parse(opt) != nil {
			unknown = true
			continue
		}
		deflate = &p
	}
	return deflate, unknown
}

// Arrived notes bytes just read from one side, at at, which the caller is
// about to forward; Measure(from) measures them once forwarded. p must
// not change until Measure(from) returns. Arrived takes no lock.
func (c *Conn) Arrived(from Side, p []byte, at time.Time) {
	s := &c.sides[from]
	s.noted, s.at = p, at
	// Published after noted and at: a response.created read now may be
	// the answer to these bytes.
	s.inFlight.Store(int64(at.Sub(c.t0)) + 1)
}

// Written is how a read's bytes went to the other side: when they were
// available to the proxy (Available: when the read returned, or earlier,
// when they were already waiting while the proxy measured the read
// before; zero: when the read returned), and when their write began
// (Start) and returned (End).
type Written struct{ Available, Start, End time.Time }

// known reports whether the write's times were given.
func (w Written) known() bool { return !w.Start.IsZero() && !w.End.IsZero() }

// write is how long the write took.
func (w Written) write() time.Duration { return w.End.Sub(w.Start) }

// ownDelay is the time from the bytes being available, else from at (the
// read's return), to the start of their write.
func (w Written) ownDelay(at time.Time) time.Duration {
	if !w.Available.IsZero() {
		at = w.Available
	}
	return max(w.Start.Sub(at), 0)
}

// Measure measures the bytes from one side that Arrived noted, now that
// they have been forwarded, as w says (zero: not known); each output
// delta they complete is reported with its own delay
// (ResponseObserver.OwnDelay), and a write of the server's bytes that
// carried a response's events is counted once (Observer.Wrote), and in
// each of those responses' totals.
func (c *Conn) Measure(from Side, w Written) {
	s := &c.sides[from]
	s.written, s.wroteResponse = w, false
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return
	}
	s.measuring = true
	if from == Server && w.known() {
		// The responses in flight as the bytes came: theirs, or ones that
		// end with them.
		s.wroteResponse = c.res.wrote(w)
	}
	c.mu.Unlock()

	s.frames.write(s.noted, s.at)
	s.noted = nil

	c.mu.Lock()
	defer c.mu.Unlock()
	s.measuring = false
	s.inFlight.Store(0)
	if s.wroteResponse && !c.closed {
		c.obs.Wrote(w.write())
	}
	if from == Client {
		// The responses that began while these bytes were on their way
		// can now tell whether one of them asked for it.
		c.res.resolve(c.obs)
	}
	if c.closed {
		s.end() // Close came while this side was measuring
	}
}

// Observe is Arrived and Measure at once, for bytes already forwarded.
func (c *Conn) Observe(from Side, p []byte, at time.Time) {
	c.Arrived(from, p, at)
	c.Measure(from, Written{})
}

// clientBefore reports whether bytes the client sent, read before at, are
// still on their way to the upstream or being measured.
func (c *Conn) clientBefore(at time.Time) bool {
	v := c.sides[Client].inFlight.Load()
	return v != 0 && v-1 <= int64(at.Sub(c.t0))
}

// Ended says that one side ended the connection: reading from it ended,
// or writing to it failed. The first side to end it, by this or by a
// Close frame, is the one whose leaving ends the responses in flight.
func (c *Conn) Ended(by Side) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.ended(by)
}

func (c *Conn) ended(by Side) {
	if !c.endedKnown {
		c.endedBy, c.endedKnown = by, true
	}
}

// Close ends the measurement when the connection is over, at at: a
// message cut short is counted, and the responses still in flight end as
// the side that left decides (ClientGone or ServerGone; Cancelled after
// the client's response.cancel). Bytes not yet measured are not; later
// calls do nothing.
func (c *Conn) Close(at time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return
	}
	c.closed = true
	for i := range c.sides {
		if s := &c.sides[i]; !s.measuring {
			s.end()
		}
	}
	outcome := ClientGone
	if c.endedKnown && c.endedBy == Server {
		outcome = ServerGone
	}
	c.res.closeAll(c.obs, outcome, at)
}

// end ends the side's frames, counting a frame or message cut short.
// Called with mu held, once the side's goroutine no longer reads them.
func (s *side) end() {
	if s.done {
		return
	}
	s.done = true
	if s.frames.end() {
		s.c.obs.Unreadable(Truncated)
	}
}

// The frameReader's messages, per side.

func (s *side) message(data []byte, at time.Time) { s.c.event(s.from, data, at) }

func (s *side) closeFrame() {
	s.c.mu.Lock()
	defer s.c.mu.Unlock()
	s.c.ended(s.from)
}

func (s *side) unreadable(f Failure) {
	s.c.mu.Lock()
	defer s.c.mu.Unlock()
	if !s.c.closed {
		s.c.obs.Unreadable(f)
	}
}
