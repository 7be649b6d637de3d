package metrics

import "time"

// Stall causes, the values of itlproxy_stalls_total's cause label: why a
// gap was longer than the stall threshold, from what the proxy saw while
// it was open.
const (
	// StallPrefill: another stream of the same upstream server waited for
	// its first token through the gap and got it at its end: the server
	// prefilled that request's prompt, and its running streams waited.
	StallPrefill = "prefill"
	// StallClient: the proxy's writes of the stream to its client were
	// blocked for most of the gap (the client read slowly, or not at all),
	// and the proxy did not read the upstream meanwhile.
	StallClient = "client"
	// StallUpstream: neither: the server stalled on its own (preemption,
	// a swap of the KV cache, a pause of its process, the network).
	StallUpstream = "upstream"
)

// maxListedStalls is how many of a stream's stalls it lists (Stalls), the
// first ones; the rest are counted all the same.
const maxListedStalls = 32

// Stall is one stall of a stream: a gap over the stall threshold.
type Stall struct {
	// Gap is the gap's index among the stream's gaps, from 1.
	Gap int
	// Length is the gap's, and At when it ended (the stamp of the event
	// that ended it).
	Length time.Duration
	At     time.Time
	// Cause is one of StallPrefill, StallClient and StallUpstream; ""
	// while it is undecided (a stream of the server that may be its
	// prefill still waits for its first token).
	Cause string
	// Prefill is the request id of the prefill that caused it, for
	// StallPrefill.
	Prefill string
}

// stalls is what a stream keeps to judge its stalls: the server it was
// sent to and its place there, its writes to the client since its last
// token, and its stalls.
type stalls struct {
	server *Server // nil: none known (every stall is then the upstream's or the client's)
	on     serverPlace
	writes clientWrites
	// list holds the stream's stalls in order, the first maxListedStalls
	// and any still undecided; undecided counts those.
	list      []Stall
	undecided int
	past      int // stalls decided past maxListedStalls
}

// clientWrites are a stream's writes to its client since its last token
// (at since), each as its start and end after since: enough to tell how
// much of the gap now open they took. Writes never overlap one another
// nor a read's arrival, and each is handed once the reads it carries have
// been measured (or at worst just before): the few last ones are kept one
// by one, so that those that began after the gap's end are left out of
// it, and older ones are summed.
type clientWrites struct {
	since  time.Time // zero: before the first token
	folded time.Duration
	recent [4]struct{ began, ended time.Duration }
	n      int // writes since since
}

// add notes a write from began to ended.
func (w *clientWrites) add(began, ended time.Time) {
	if w.since.IsZero() {
		return
	}
	b, e := max(began.Sub(w.since), 0), ended.Sub(w.since)
	if e <= b {
		return
	}
	slot := &w.recent[w.n%len(w.recent)]
	if w.n >= len(w.recent) {
		w.folded += slot.ended - slot.began
	}
	slot.began, slot.ended = b, e
	w.n++
}

// within is how long the writes took of the gap of d that began at since.
func (w *clientWrites) within(d time.Duration) time.Duration {
	blocked := w.folded
	for i := range min(w.n, len(w.recent)) {
		r := w.recent[i]
		if end := min(r.ended, d); end > r.began {
			blocked += end - r.began
		}
	}
	return blocked
}

// reset starts the writes of a gap that opens at at.
func (w *clientWrites) reset(at time.Time) {
	w.since, w.folded, w.n = at, 0, 0
}

// stalled records a stall of d, ended at at, the stream's gap number gap:
// the client's when its writes took most of it, else judged against the
// server, now or, while a stream of the server that may be its prefill
// still waits for its first token, later (decide).
func (s *Stream) stalled(gap int, d time.Duration, at time.Time) {
	st := Stall{Gap: gap, Length: d, At: at}
	if 2*s.stall.writes.within(d) > d {
		st.Cause = StallClient
	} else {
		st.Cause, st.Prefill = s.stall.server.judge(s, at.Add(-d), at, false)
	}
	if st.Cause != "" {
		s.countStall(st.Cause)
	} else {
		s.stall.undecided++
	}
	if st.Cause != "" && len(s.stall.list) >= maxListedStalls {
		s.stall.past++
		return
	}
	s.stall.list = append(s.stall.list, st)
}

// decide judges the stream's undecided stalls again at now, from what its
// server has seen since: each is decided once no stream that may be its
// prefill still waits, or once as long as it lasted has passed since it
// ended, or when the stream ends (final).
func (s *Stream) decide(now time.Time, final bool) {
	kept := s.stall.list[:0]
	for i := range s.stall.list {
		st := &s.stall.list[i]
		if st.Cause == "" {
			force := final || !now.Before(st.At.Add(st.Length))
			a := st.At.Add(-st.Length)
			if st.Cause, st.Prefill = s.stall.server.judge(s, a, st.At, force); st.Cause != "" {
				s.stall.undecided--
				s.countStall(st.Cause)
			}
		}
		if len(kept) >= maxListedStalls && st.Cause != "" {
			s.stall.past++
			continue
		}
		kept = append(kept, *st)
	}
	s.stall.list = kept
}

// countStall counts a stall of cause. A cause's series appears with its
// first stall of the model and endpoint: three series made with every
// stream would be paid for by every model, stalling or not.
func (s *Stream) countStall(cause string) {
	s.m.stalls.WithLabelValues(s.labels.Model, s.labels.Endpoint, cause).Inc()
}

// Stalls are the stream's stalls in order, the first 32 (all decided once
// it has ended), and how many more it had.
func (s *Stream) Stalls() (list []Stall, more int) { return s.stall.list, s.stall.past }

// ClientWrite records one write of the stream's bytes to its client, from
// began to its return at ended: observed once, and added to the stream's
// total (WriteWait). Hand each write once the reads whose bytes it
// carries have been measured: it counts against the gap then open.
func (s *Stream) ClientWrite(began, ended time.Time) {
	d := ended.Sub(began)
	s.fwd.write.Observe(d.Seconds())
	s.fwd.writeWait += d
	s.stall.writes.add(began, ended)
}

// NoteClientWrite notes a write to the client that carried the stream's
// bytes among others', observed once elsewhere (a Realtime connection's,
// WriteObserver), from began to ended: as ClientWrite, for the stalls'
// causes only.
func (s *Stream) NoteClientWrite(began, ended time.Time) { s.stall.writes.add(began, ended) }
