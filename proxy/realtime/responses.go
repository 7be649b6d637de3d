package realtime

import (
	"bytes"
	"time"

	"github.com/itlproxy/itlproxy/proxy/events"
)

// Bounds on what a connection keeps, whatever its peers send: the
// response.create events waiting for their response.created, the
// responses in flight (the Realtime API runs one per conversation, and
// out-of-band responses beside it), the bytes of an id kept to tell them
// apart, and the gaps a response holds while its start is not yet known.
const (
	maxPending = 8
	maxActive  = 16
	maxIDBytes = 64
	maxHeld    = 4096
)

// id is an event's or a response's id, cut at maxIDBytes.
type id struct {
	b [maxIDBytes]byte
	n uint8
}

func makeID(b []byte) id {
	var v id
	v.n = uint8(copy(v.b[:], b))
	return v
}

func (v *id) is(b []byte) bool {
	return bytes.Equal(v.b[:v.n], b[:min(len(b), maxIDBytes)])
}

// pendingCreate is a client's response.create that has not yet been
// answered by a response.created.
type pendingCreate struct {
	at      time.Time
	eventID id
	cancel  bool // a response.cancel followed it
}

// response is a response in flight.
type response struct {
	id     id
	start  time.Time
	obs    ResponseObserver // nil while waiting
	tally  events.Tally
	cancel bool
	// waiting: it began (response.created, at created) while bytes the
	// client sent before were still being forwarded or measured, one of
	// which may be the response.create that asked for it; its start, and
	// so its Observer, wait for them. held are its gaps meanwhile.
	waiting bool
	created time.Time
	held    []heldGap
	// firstWritten is the forwarding of the first delta, held with it.
	firstWritten Written
	// writeWait sums the writes to the client while it is in flight.
	writeWait time.Duration
}

type heldGap struct {
	d       time.Duration
	at      time.Time
	written Written
}

// responses matches a connection's events into responses.
type responses struct {
	pending []pendingCreate // oldest first, at most maxPending
	active  []*response     // at most maxActive
}

// event reads one text message from side from: on the side's goroutine,
// then, with the lock, applies it.
func (c *Conn) event(from Side, data []byte, at time.Time) {
	e := events.ParseRealtime(data)
	if e.Type == events.RealtimeOther && !e.Invalid {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return
	}
	if e.Invalid {
		c.obs.Unreadable(InvalidJSON)
		return
	}
	r := &c.res
	switch e.Type {
	case events.RealtimeResponseCreate:
		if from == Client {
			r.create(e.EventID, at)
		}
	case events.RealtimeResponseCancel:
		if from == Client {
			r.cancel(e.ResponseID)
		}
	case events.RealtimeResponseCreated:
		if from == Server {
			a := r.created(c.obs, e.ResponseID, at, c.clientBefore(at))
			if s := &c.sides[from]; a != nil && s.written.known() {
				// The write that carried its response.created is its first.
				a.writeWait += s.written.write()
				s.wroteResponse = true
			}
		}
	case events.RealtimeDelta:
		if a := r.find(e.ResponseID); from == Server && a != nil && e.Token {
			a.delta(c.obs, r, e.Event, at, c.sides[from].written)
		}
	case events.RealtimeResponseDone:
		if i := r.index(e.ResponseID); from == Server && i >= 0 {
			r.end(c.obs, i, doneOutcome(e.Status), e.Event, at)
		}
	case events.RealtimeError:
		if from == Server {
			r.failed(c.obs, e, at)
		}
	}
}

// create notes a response.create, which the next response.created
// answers.
func (r *responses) create(eventID []byte, at time.Time) {
	if len(r.pending) == maxPending {
		r.pending = append(r.pending[:0], r.pending[1:]...)
	}
	r.pending = append(r.pending, pendingCreate{at: at, eventID: makeID(eventID)})
}

// cancel notes a response.cancel: of the response it names, or, naming
// none, of the responses in flight (or of the last response.create, when
// none is yet).
func (r *responses) cancel(responseID []byte) {
	if len(responseID) > 0 {
		if a := r.find(responseID); a != nil {
			a.cancel = true
		}
		return
	}
	for _, a := range r.active {
		a.cancel = true
	}
	if len(r.active) == 0 && len(r.pending) > 0 {
		r.pending[len(r.pending)-1].cancel = true
	}
}

// created starts a response, and returns it (nil when it is not
// followed): its clock starts at the oldest response.create waiting, or,
// when none is, at its response.created (the server began it), unless
// bytes the client sent before it are still on their way (clientBusy):
// then it waits for them (resolve).
func (r *responses) created(obs Observer, responseID []byte, at time.Time, clientBusy bool) *response {
	if len(r.active) == maxActive || len(responseID) > 0 && r.find(responseID) != nil {
		return nil
	}
	a := &response{id: makeID(responseID), created: at, tally: events.NewTally()}
	r.active = append(r.active, a)
	if len(r.pending) == 0 && clientBusy {
		a.waiting = true
		return a
	}
	r.start(obs, a)
	return a
}

// wrote adds a write of the server's bytes to the client, w, to each
// response in flight, and reports whether there was one.
func (r *responses) wrote(w Written) bool {
	for _, a := range r.active {
		a.writeWait += w.write()
		if a.obs != nil {
			a.obs.ClientWrite(w.Start, w.End)
		}
	}
	return len(r.active) > 0
}

// start starts a's clock, at the oldest response.create waiting, else at
// its response.created, and hands it to obs with what it held.
func (r *responses) start(obs Observer, a *response) {
	a.start = a.created
	byServer := len(r.pending) == 0
	if !byServer {
		a.start, a.cancel = r.pending[0].at, a.cancel || r.pending[0].cancel
		r.pending = append(r.pending[:0], r.pending[1:]...)
	}
	a.obs = obs.Start(Start{ResponseID: string(a.id.b[:a.id.n]), At: a.start, ByServer: byServer})
	if a.waiting {
		a.waiting = false
		if a.tally.Events > 0 {
			a.obs.FirstDelta(a.tally.First.Sub(a.start), a.tally.First)
			forwarded(a.obs, a.tally.First, a.firstWritten)
		}
		for _, g := range a.held {
			a.obs.Gap(g.d, g.at)
			forwarded(a.obs, g.at, g.written)
		}
		a.held = nil
	}
}

// resolve starts the responses waiting, now that the client's bytes are
// measured (or the connection is over).
func (r *responses) resolve(obs Observer) {
	for _, a := range r.active {
		if a.waiting {
			r.start(obs, a)
		}
	}
}

// index returns the index of the response in flight that responseID
// names; when it names none, the only one in flight. -1 when there is no
// such response.
func (r *responses) index(responseID []byte) int {
	if len(responseID) == 0 {
		if len(r.active) == 1 {
			return 0
		}
		return -1
	}
	for i, a := range r.active {
		if a.id.is(responseID) {
			return i
		}
	}
	return -1
}

func (r *responses) find(responseID []byte) *response {
	if i := r.index(responseID); i >= 0 {
		return r.active[i]
	}
	return nil
}

// delta counts an output delta, which arrived at at and was forwarded as
// w says. A response whose start is not yet known holds its gaps (a few:
// the client's bytes take microseconds to measure), up to maxHeld: then it
// starts without waiting more.
func (a *response) delta(obs Observer, r *responses, e events.Event, at time.Time, w Written) {
	tok, ok := a.tally.Add(e, at)
	switch {
	case !ok:
		return
	case a.waiting && tok.First:
		a.firstWritten = w
		return
	case a.waiting && len(a.held) < maxHeld:
		a.held = append(a.held, heldGap{tok.Gap, at, w})
		return
	case a.waiting:
		r.start(obs, a)
		a.obs.Gap(tok.Gap, at)
	case tok.First:
		a.obs.FirstDelta(at.Sub(a.start), at)
	default:
		a.obs.Gap(tok.Gap, at)
	}
	forwarded(a.obs, at, w)
}

// forwarded reports a delta's own delay, when its write is known.
func forwarded(obs ResponseObserver, at time.Time, w Written) {
	if w.known() {
		obs.OwnDelay(w.ownDelay(at))
	}
}

// failed reads an error event: it ends the response it names; one that
// answers a waiting response.create means that no response will answer
// it.
func (r *responses) failed(obs Observer, e events.RealtimeEvent, at time.Time) {
	if len(e.ResponseID) > 0 {
		if i := r.index(e.ResponseID); i >= 0 {
			r.end(obs, i, Failed, e.Event, at)
		}
		return
	}
	if len(e.EventID) == 0 {
		return
	}
	for i := range r.pending {
		if r.pending[i].eventID.n > 0 && r.pending[i].eventID.is(e.EventID) {
			r.pending = append(r.pending[:i], r.pending[i+1:]...)
			return
		}
	}
}

func doneOutcome(s events.ResponseStatus) Outcome {
	switch s {
	case events.StatusCancelled:
		return Cancelled
	case events.StatusIncomplete:
		return Incomplete
	case events.StatusFailed:
		return Failed
	}
	return Completed
}

// end ends the response at index i, with the counts of last (its
// response.done, or the error that ended it).
func (r *responses) end(obs Observer, i int, outcome Outcome, last events.Event, at time.Time) {
	a := r.active[i]
	if a.waiting {
		r.start(obs, a)
	}
	r.active = append(r.active[:i], r.active[i+1:]...)
	last.Token = false
	a.tally.Add(last, at)
	a.finish(outcome, at)
}

func (a *response) finish(outcome Outcome, at time.Time) {
	t := &a.tally
	e := End{
		Outcome: outcome, At: at, Deltas: t.Events,
		InputTokens: t.Input, OutputTokens: t.OutputTokens(), UsageReported: t.Output >= 0,
		TPOT: -1, AverageTokens: t.AverageTokens(), CancelRequested: a.cancel, ClientWriteWait: a.writeWait,
	}
	if tpot, ok := t.TPOT(); ok {
		e.TPOT = tpot
	}
	a.obs.End(e)
}

// closeAll ends the responses in flight when the connection ends:
// Cancelled those the client had asked to cancel, the rest by outcome.
func (r *responses) closeAll(obs Observer, outcome Outcome, at time.Time) {
	r.resolve(obs)
	for _, a := range r.active {
		o := outcome
		if a.cancel {
			o = Cancelled
		}
		a.finish(o, at)
	}
	r.active, r.pending = nil, nil
}
