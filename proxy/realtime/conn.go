package realtime

import (
	"strings"
	"sync"
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

func (s Side) other() Side { return 1 - s }

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
// forwards them first and hands them over as it does (Arrived, Measure).
// Its methods are safe for concurrent use: each direction is copied by a
// goroutine of its own.
type Conn struct {
	mu     sync.Mutex
	obs    Observer
	sides  [2]side
	res    responses
	closed bool
	// endedBy is the side that ended the connection first, by a Close
	// frame or by closing its end, once known.
	endedBy    Side
	endedKnown bool
}

// side is what the Conn follows of one direction: the frames a side
// sends, and the bytes read from it and not yet measured.
type side struct {
	c      *Conn
	from   Side
	frames frameReader
	noted  []byte
	at     time.Time
}

// New returns the Conn of a connection whose server accepted it with the
// extensions cfg names.
func New(cfg Config, obs Observer) *Conn {
	c := &Conn{obs: obs}
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
// about to forward. They are measured by Measure(from), or sooner, when
// bytes that arrive later from the other side are measured: the
// measurement then sees the two directions in the order their bytes
// arrived (a response.create before the response.created it caused). p
// must not change until Measure(from) returns.
func (c *Conn) Arrived(from Side, p []byte, at time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return
	}
	s := &c.sides[from]
	s.measure() // normally nothing: Measure follows each Arrived
	s.noted, s.at = p, at
}

// Measure measures the bytes from one side that Arrived noted, now that
// they have been forwarded.
func (c *Conn) Measure(from Side) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return
	}
	if o := &c.sides[from.other()]; o.noted != nil && o.at.Before(c.sides[from].at) {
		o.measure()
	}
	c.sides[from].measure()
}

// Observe is Arrived and Measure at once, for bytes already forwarded.
func (c *Conn) Observe(from Side, p []byte, at time.Time) {
	c.Arrived(from, p, at)
	c.Measure(from)
}

func (s *side) measure() {
	if s.noted == nil {
		return
	}
	p := s.noted
	s.noted = nil
	s.frames.write(p, s.at)
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

// Close ends the measurement when the connection is over, at at: the
// bytes still noted are measured, a message cut short is counted, and the
// responses still in flight end as the side that left decides (ClientGone
// or ServerGone; Cancelled after the client's response.cancel). Later
// calls do nothing.
func (c *Conn) Close(at time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return
	}
	first := Client
	if c.sides[Server].noted != nil && (c.sides[Client].noted == nil || c.sides[Server].at.Before(c.sides[Client].at)) {
		first = Server
	}
	c.sides[first].measure()
	c.sides[first.other()].measure()
	c.closed = true
	for i := range c.sides {
		if c.sides[i].frames.end() {
			c.obs.Unreadable(Truncated)
		}
	}
	outcome := ClientGone
	if c.endedKnown && c.endedBy == Server {
		outcome = ServerGone
	}
	c.res.closeAll(outcome, at)
}

// The frameReader's messages, per side.

func (s *side) message(data []byte, at time.Time) { s.c.event(s.from, data, at) }

func (s *side) closeFrame() { s.c.ended(s.from) }

func (s *side) unreadable(f Failure) { s.c.obs.Unreadable(f) }
