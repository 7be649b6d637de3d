package metrics

import (
	"slices"
	"sync"
	"time"
)

// Server is one upstream server as the stalls of its streams are judged:
// the streams sent to it that still wait for their first token, and the
// last first tokens it gave, each with when its request was sent. The
// proxy keeps one per server it sends streams to (the single upstream, or
// each server it balances over), and judges each stall of a stream
// against its own server only. Its state is per server and per stall:
// a stream touches it when it is sent, at its first token and at its
// end, never per event. Its methods are safe for concurrent use.
type Server struct {
	mu      sync.Mutex
	waiting []*Stream // sent, no first token yet; each knows its place (serverPlace)
	firsts  [serverFirsts]firstToken
	next    int // where the next first token goes in firsts
}

// serverFirsts is how many first tokens a server remembers: enough for
// the ones that land near a stall's end before it is judged, on a server
// that starts dozens of streams a second.
const serverFirsts = 64

// firstToken is a stream's first token on a server: when its request was
// sent, when the token came, and the request's id.
type firstToken struct {
	request  string
	sent, at time.Time
}

// serverPlace is a stream's place on its server, under the server's
// lock: when its request was sent (zero: not yet), its index in waiting
// plus 1 (0: not there), and whether it is past waiting (its first token
// came, or it ended).
type serverPlace struct {
	sent time.Time
	at   int
	done bool
}

// NewServer returns the record of an upstream server.
func NewServer() *Server { return &Server{} }

// SetServer notes the upstream server the stream is sent to (again, when
// a request is sent to another server), nil for none known; call it
// before Sent.
func (s *Stream) SetServer(v *Server) {
	if s.stall.server == v {
		return
	}
	if old := s.stall.server; old != nil {
		old.leave(s, time.Time{})
	}
	s.stall.server = v
	s.stall.on = serverPlace{}
}

// Sent notes that the stream's request was written to its server at at:
// from then on until its first token, a stall of another stream of the
// server may be its prefill. It may be called from another goroutine than
// the stream's others (the transport's).
func (s *Stream) Sent(at time.Time) {
	v := s.stall.server
	if v == nil {
		return
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	p := &s.stall.on
	if p.done || !p.sent.IsZero() {
		return
	}
	v.waiting = append(v.waiting, s)
	p.sent, p.at = at, len(v.waiting)
}

// leave takes s off v's waiting streams for good: its first token came at
// first, which v remembers, or (first zero) it ended without one.
func (v *Server) leave(s *Stream, first time.Time) {
	v.mu.Lock()
	defer v.mu.Unlock()
	p := &s.stall.on
	if p.done {
		return
	}
	p.done = true
	if p.at > 0 {
		i, last := p.at-1, len(v.waiting)-1
		v.waiting[i] = v.waiting[last]
		v.waiting[i].stall.on.at = i + 1
		v.waiting[last] = nil
		v.waiting = v.waiting[:last]
		p.at = 0
	}
	if !first.IsZero() && !p.sent.IsZero() {
		v.firsts[v.next] = firstToken{request: s.ids.Request, sent: p.sent, at: first}
		v.next = (v.next + 1) % len(v.firsts)
	}
}

// judge decides the cause of a stall of self from a to b, from what v
// has seen, but the client's: StallPrefill and the request of the prefill
// when one ended it, else StallUpstream; or "" while a stream that may
// still turn out to be its prefill waits for its first token, unless
// final. A nil Server knows of no prefill.
//
// A prefill ends a stall when the stream's first token came at the
// stall's end (in its last quarter, or within an eighth of its length
// after it, the order in which the proxy read the two streams), and its
// request was sent before the stall began or in its first eighth (the
// proxy's stamps of a request's write and of another stream's read are
// not in strict order), or while another such prefill, whose first token
// came within the stall, was still waiting: an engine prefills the
// prompts that arrive during a prefill before it decodes again. A short
// request sent into a stall that had already begun, whose first token
// lands at its end, did not cause it: it waited behind it. Among several,
// the earliest sent is named.
func (v *Server) judge(self *Stream, a, b time.Time, final bool) (cause, request string) {
	if v == nil {
		return StallUpstream, ""
	}
	d := b.Sub(a)
	slack := d / 8
	from, until := b.Add(-d/4), b.Add(slack)
	v.mu.Lock()
	defer v.mu.Unlock()
	var buf [serverFirsts]firstToken
	in := buf[:0]
	for _, f := range v.firsts {
		if f.at.After(a) && !f.at.After(until) {
			in = append(in, f)
		}
	}
	slices.SortFunc(in, func(x, y firstToken) int { return x.at.Compare(y.at) })
	reach := a.Add(slack) // a request sent by then may be the stall's prefill
	named := -1
	for i, f := range in {
		if f.sent.After(reach) {
			continue
		}
		if !f.at.Before(from) && (named < 0 || f.sent.Before(in[named].sent)) {
			named = i
		}
		if f.at.After(reach) {
			reach = f.at
		}
	}
	if named >= 0 {
		return StallPrefill, in[named].request
	}
	if !final {
		for _, w := range v.waiting {
			if w != self && !w.stall.on.sent.After(reach) {
				return "", "" // it may still be the prefill
			}
		}
	}
	return StallUpstream, ""
}
