package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strings"
	"time"

	"github.com/itlproxy/itlproxy/proxy/events"
)

const (
	// readBufferBytes is each worker's read buffer: reads return what has
	// arrived, up to this, so events that arrive together share a stamp.
	readBufferBytes = 4 << 10
	// maxEventBytes bounds one buffered SSE event, as itlproxy's default
	// ITLPROXY_MAX_EVENT_BYTES does; larger events are counted invalid.
	maxEventBytes = 1 << 20
	// maxBodyBytes bounds a non-streamed response body read for its usage.
	maxBodyBytes = 16 << 20
)

// worker sends one request at a time, on its own goroutine: the only
// goroutine a stream costs itlbench (the transport adds its own per
// connection). Its buffer and scanner are reused from request to request.
type worker struct {
	b *bench
	// stats are where its requests record, one per model: the bench's, or
	// the set of a sweep level's phase (sweeplevel.go).
	stats []*modelStats
	buf   []byte
	scan  *events.Scanner
	// stamps reads the send times an upstream may put into events.
	stamps transitStamps
	s      streamState

	session   string // the current session's id, "" without -turns
	model     int    // the current session's model
	turnsLeft int
}

// streamState is what a worker knows of the request in flight.
type streamState struct {
	st    *modelStats
	start time.Time // just before the request was sent
	ttft  time.Duration
	// ok: the request succeeded; canceled: the run was stopped under it.
	ok, canceled bool
	// tally counts the stream's events and does its arithmetic (TPOT,
	// output tokens) exactly as itlproxy's meter does.
	tally events.Tally
}

func newWorker(b *bench) *worker {
	w := &worker{b: b, stats: b.stats, buf: make([]byte, readBufferBytes)}
	w.scan = events.NewScanner(b.cfg.endpoint, maxEventBytes, w.event)
	return w
}

// next picks the model of the next request, and its session.
func (w *worker) next() int {
	turns := w.b.cfg.turns
	if turns == 0 {
		return w.b.pick()
	}
	if w.turnsLeft == 0 {
		w.model = w.b.pick()
		w.session = fmt.Sprintf("itlbench-%s-%d", w.b.runID, w.b.sessions.Add(1))
		w.turnsLeft = turns
	}
	w.turnsLeft--
	return w.model
}

// do sends one request to model m and measures it.
func (w *worker) do(ctx context.Context, m int) {
	b := w.b
	st := w.stats[m]
	st.sent.Add(1)
	b.enter()
	defer b.inFlight.Add(-1)
	w.s = streamState{st: st, tally: events.NewTally()}
	defer w.judge()

	reqCtx, cancel := ctx, context.CancelFunc(func() {})
	if b.cfg.timeout > 0 {
		reqCtx, cancel = context.WithTimeout(ctx, b.cfg.timeout)
	}
	defer cancel()
	req, err := http.NewRequestWithContext(reqCtx, http.MethodPost, b.cfg.target, bytes.NewReader(b.bodies[m]))
	if err != nil {
		st.fail(errConnect, 0, err.Error())
		return
	}
	req.Header = b.header.Clone()
	if w.session != "" {
		req.Header.Set(b.cfg.sessionHeader, w.session)
	}
	w.s.start = time.Now()
	resp, err := b.client.Do(req)
	if err != nil {
		w.failed(ctx, errConnect, err)
		return
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 300))
		// Drained (within reason) so that the connection is reused.
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20))
		st.fail(errStatus, resp.StatusCode, b.redact(fmt.Sprintf("HTTP %s: %s", resp.Status, bytes.TrimSpace(msg))))
		return
	}
	mediaType, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	if mediaType == "text/event-stream" || mediaType == "application/x-ndjson" && b.cfg.endpoint.NDJSON() {
		w.readStream(ctx, resp.Body)
	} else {
		w.readWhole(ctx, resp.Body)
	}
}

// readStream reads an event stream to its end, stamping each read as it
// returns and scanning it for events (w.event).
func (w *worker) readStream(ctx context.Context, body io.Reader) {
	var err error
	w.stamps = transitStamps{}
	for err == nil {
		var n int
		n, err = body.Read(w.buf)
		if n > 0 {
			w.stamps.write(w.buf[:n], w.scan, time.Now())
		}
	}
	truncated := w.scan.End()
	s := &w.s
	t := &s.tally
	s.st.tokenEvents.Add(t.Events)
	s.st.outputTokens.Add(t.OutputTokens())
	if t.Output >= 0 {
		s.st.withUsage.Add(1)
	}
	if tpot, ok := t.TPOT(); ok {
		s.st.tpot.record(tpot)
	}
	switch {
	case t.Failed:
		s.st.fail(errStreamError, 0, "the server reported an error in the stream")
	case t.Done || err == io.EOF && !truncated:
		// After [DONE] the stream is complete, whatever happens to the
		// connection next (itlproxy decides the same).
		if !t.Done {
			s.st.noDone.Add(1)
		}
		w.succeeded()
	case err == io.EOF:
		s.st.fail(errStreamCut, 0, "the body ended inside an event")
	default:
		w.failed(ctx, errStreamCut, err)
	}
}

// event is called by the scanner for each event a read completed, with
// that read's stamp.
func (w *worker) event(e events.Event, at events.Stamp) {
	s := &w.s
	transit, stamped := w.stamps.take(at.At)
	if e.Invalid || e.Oversized {
		s.st.invalidEvents.Add(1)
		return
	}
	tok, ok := s.tally.Add(e, at.At)
	if ok && stamped {
		s.st.transit.record(transit)
	}
	switch {
	case !ok:
	case tok.First:
		s.ttft = at.At.Sub(s.start)
		s.st.ttft.record(s.ttft)
	default:
		s.st.itl.record(tok.Gap)
	}
}

// readWhole reads a non-streamed response for its usage.
func (w *worker) readWhole(ctx context.Context, body io.Reader) {
	data, err := io.ReadAll(io.LimitReader(body, maxBodyBytes))
	if err != nil {
		w.failed(ctx, errStreamCut, err)
		return
	}
	_, _ = io.Copy(io.Discard, body) // past the bound: read, not kept
	s := &w.s
	e := events.ParseJSON(w.b.cfg.endpoint, data)
	if e.Invalid {
		s.st.invalidEvents.Add(1)
	}
	if e.HasUsage && e.OutputTokens >= 0 {
		s.st.outputTokens.Add(e.OutputTokens)
		s.st.withUsage.Add(1)
	}
	if e.Failed {
		s.st.fail(errStreamError, 0, "the server reported an error in the response body")
		return
	}
	w.succeeded()
}

func (w *worker) succeeded() {
	w.s.ok = true
	w.s.st.ok.Add(1)
	w.s.st.duration.record(time.Since(w.s.start))
}

// failed counts a request that ended with err: canceled when the run was
// stopped, a timeout when -timeout ran out, else kind.
func (w *worker) failed(ctx context.Context, kind errKind, err error) {
	switch {
	case ctx.Err() != nil:
		w.s.canceled = true
		w.s.st.canceled.Add(1)
		return
	case errors.Is(err, context.DeadlineExceeded):
		kind = errTimeout
	}
	w.s.st.fail(kind, 0, w.b.redact(err.Error()))
}

// judge counts the request that ended against the objectives, when
// there are any: it met them when it succeeded with tokens, its TTFT
// within -slo-ttft and its mean gap between token events within -slo-itl
// (a request's ITL as vLLM's and AIPerf's goodput judge it; a stream of
// one token has no gap to judge). A request the run canceled is not
// judged.
func (w *worker) judge() {
	o, s := w.b.cfg.objectives, &w.s
	if o == (objectives{}) || s.canceled {
		return
	}
	s.st.judged.Add(1)
	t := &s.tally
	met := s.ok && t.Events > 0 && (o.ttft == 0 || s.ttft <= o.ttft)
	if met && o.itl > 0 && t.Events > 1 {
		met = t.Last.Sub(t.First)/time.Duration(t.Events-1) <= o.itl
	}
	if met {
		s.st.met.Add(1)
	}
}

// redact hides every extra header's value (credentials) in a message
// that is about to be shown.
func (b *bench) redact(msg string) string {
	for _, vs := range b.cfg.header {
		for _, v := range vs {
			if len(v) >= 4 {
				msg = strings.ReplaceAll(msg, v, "[redacted]")
			}
		}
	}
	return msg
}
