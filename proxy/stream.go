package proxy

import (
	"context"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"github.com/itlproxy/itlproxy/metrics"
	"github.com/itlproxy/itlproxy/proxy/events"
	"github.com/itlproxy/itlproxy/proxy/recorder"
)

// meter measures one response as it passes: an event stream's events as
// they arrive, or a JSON body's usage at its end. It owns the response's
// measurement: the stream's metrics.Stream, when the exchange counts as a
// stream, and what it records per event: TTFT at the first token-bearing
// event, one ITL sample per gap between consecutive ones, each event
// stamped when the read that completed it returned. It knows nothing of
// the exchange that owns it; at the end it says how the response ended
// (end, outcome.go).
//
// Measuring stays off the forwarding path: a read is only stamped (its
// time, and the model's streams in flight then, which the load bands need)
// and held (a copy of its bytes) before its bytes go to the client; it is
// split, classified and recorded when the reverse proxy asks for the next
// read, once those bytes have been written and before the wait for the
// upstream, on the same goroutine (measureHeld). Every stamp is the
// read's own, so every gap is exactly as long as if it were measured at
// once; an observation lags its read by the time the client's write
// takes.
type meter struct {
	metrics *metrics.Metrics
	labels  metrics.Labels
	t0      time.Time
	stream  *metrics.Stream // nil unless the exchange counts as a stream

	sse     bool                  // the response is an event stream
	scan    *events.StreamScanner // nil unless its events can be read
	readErr error                 // how reading ended: io.EOF, another error, or nil (never ended)
	idle    *idleTimer            // nil without an idle timeout

	// held is the last read, forwarded and not yet measured (a pooled
	// buffer, nil when there is none), heldAt when it returned and
	// heldInFlight the model's streams in flight then.
	held         *[]byte
	heldAt       time.Time
	heldInFlight int64

	now      time.Time // when the read being measured returned
	inFlight int64     // the model's streams in flight then
	tally    events.Tally
	// timeline records the stream's gaps for the recorder; nil without one.
	timeline *recorder.Timeline
	// notable keeps the gaps the span shows, nil unless traced.
	notable *notableGaps

	body usage // a non-streamed response's usage, when it reported one
	// bodyModel is the model a non-streamed response named, "" for none
	// (a stream's is in its tally).
	bodyModel string
	// engine is the upstream's own timing of a non-streamed response, when
	// its body or headers reported it (a stream's is in its tally).
	engine engineTimes
}

func newMeter(m *metrics.Metrics, labels metrics.Labels, t0 time.Time) meter {
	return meter{metrics: m, labels: labels, t0: t0, tally: events.NewTally(), body: noUsage}
}

// startStream counts the exchange as a stream from now on.
func (m *meter) startStream(ids metrics.IDs) {
	if m.stream == nil {
		m.stream = m.metrics.StartStream(m.labels, ids)
	}
}

// usage is the token usage an upstream reported; -1 means not reported.
type usage struct {
	input, output int64
}

var noUsage = usage{input: -1, output: -1}

// readEvents sets the meter to read an event stream of endpoint's API;
// parse is false when its bytes cannot be read (an encoding).
func (m *meter) readEvents(endpoint events.Endpoint, maxEvent int, parse bool) {
	m.sse = true
	if parse {
		m.scan = events.NewStreamScanner(endpoint, maxEvent, m.handleEvent)
	}
}

// sseBody is the upstream's event-stream body as httputil.ReverseProxy
// reads it. Every byte is returned exactly as read; on the side, each read
// is stamped and held, and measured when the next read begins.
type sseBody struct {
	rc io.ReadCloser
	m  *meter
}

func (b *sseBody) Read(p []byte) (int, error) {
	b.m.measureHeld()
	b.m.awaitUpstream()
	n, err := b.rc.Read(p)
	b.m.upstreamAnswered()
	if n > 0 {
		b.m.read(p[:n])
	}
	if err != nil && b.m.readErr == nil {
		b.m.readErr = err
	}
	return n, err
}

func (b *sseBody) Close() error { return b.rc.Close() }

// awaitUpstream starts the idle countdown before a read of the upstream:
// it counts only while the proxy waits for the upstream, so that the time
// ReverseProxy spends writing to a client that reads slowly is not taken
// for the upstream's silence. After the stream's end marker it no longer
// counts: the stream is complete for the client, whatever the connection
// does next.
func (m *meter) awaitUpstream() {
	if m.idle != nil && !m.tally.Done {
		m.idle.reset()
	}
}

// upstreamAnswered pauses the idle countdown: a read has returned.
func (m *meter) upstreamAnswered() {
	if m.idle != nil {
		m.idle.pause()
	}
}

// read stamps a read of the stream and holds its bytes to be measured
// once they have been forwarded.
func (m *meter) read(p []byte) {
	if m.scan == nil {
		return
	}
	m.heldAt = time.Now()
	m.heldInFlight = 0
	if m.stream != nil {
		m.heldInFlight = m.stream.InFlight()
	}
	if m.held == nil {
		m.held = heldReads.Get().(*[]byte)
	}
	*m.held = append((*m.held)[:0], p...)
}

// heldReads recycles the buffers that hold a read between its forwarding
// and its measuring: a stream holds one only for that moment, never while
// it waits for the upstream.
var heldReads = sync.Pool{New: func() any { b := make([]byte, 0, 1<<10); return &b }}

// measureHeld measures the read held since the last one, if any: its
// bytes have gone to the client by now.
func (m *meter) measureHeld() {
	if m.held == nil {
		return
	}
	m.measure(*m.held, m.heldAt, m.heldInFlight)
	heldReads.Put(m.held)
	m.held = nil
}

// measure splits and records one read of the stream, which returned at at
// with inFlight streams of the model in flight.
func (m *meter) measure(p []byte, at time.Time, inFlight int64) {
	m.now, m.inFlight = at, inFlight
	m.scan.Write(p)
}

// drain measures the read still held: what the end reads is then
// complete. When reading the stream ended, it ends the scanner too, which
// counts a stream cut in the middle of an event.
func (m *meter) drain() {
	if m.scan == nil {
		return
	}
	m.measureHeld()
	if m.readErr != nil && m.scan.End() && m.readErr == io.EOF {
		m.metrics.ParseFailure(m.labels, metrics.ParseTruncated)
	}
}

func (m *meter) handleEvent(e events.Event) {
	switch {
	case e.Oversized:
		m.metrics.ParseFailure(m.labels, metrics.ParseEventTooLarge)
		return
	case e.Invalid:
		m.metrics.ParseFailure(m.labels, metrics.ParseInvalidJSON)
		return
	}
	tok, ok := m.tally.Add(e, m.now)
	if !ok || m.stream == nil {
		return
	}
	if tok.First {
		m.stream.FirstToken(m.now.Sub(m.t0))
	} else {
		recordGap(m.stream, m.timeline, m.notable, tok.Gap, tok.Tokens, m.now, m.inFlight)
	}
	if tok.Tokens > 0 {
		m.stream.EventTokens(tok.Tokens)
	}
}

// recordGap records a gap of d, ended at at by an event of tokens tokens
// (0: unknown) with inFlight streams of the model in flight, everywhere a
// stream's gaps are kept: on its metrics, its recorder timeline (nil
// without a recorder) and, when notable, its span's events (nil unless
// traced). An event stream's meter and a Realtime response both record
// their gaps here.
func recordGap(s *metrics.Stream, tl *recorder.Timeline, ng *notableGaps, d time.Duration, tokens int64, at time.Time, inFlight int64) {
	n := s.GapInFlight(d, tokens, inFlight)
	tl.Gap(d, tokens)
	ng.add(s.Gaps().Count, d, at, n)
}

// jsonBody passes a non-streamed response body through and keeps a copy,
// up to max bytes, for the meter to read its usage at the end.
type jsonBody struct {
	rc       io.ReadCloser
	m        *meter
	endpoint events.Endpoint
	max      int
	buf      []byte
	over     bool
	done     bool
}

func (b *jsonBody) Read(p []byte) (int, error) {
	n, err := b.rc.Read(p)
	if n > 0 && !b.over {
		if len(b.buf)+n > b.max {
			b.over, b.buf = true, nil
		} else {
			b.buf = append(b.buf, p[:n]...)
		}
	}
	if err == io.EOF && !b.done {
		b.done = true
		b.m.readJSON(b.endpoint, b.buf, b.over)
		b.buf = nil
	}
	return n, err
}

func (b *jsonBody) Close() error { return b.rc.Close() }

// readJSON reads a whole non-streamed body for its usage; over reports
// that it was larger than the bound, and not kept.
func (m *meter) readJSON(endpoint events.Endpoint, body []byte, over bool) {
	if over {
		m.metrics.ParseFailure(m.labels, metrics.ParseBodyTooLarge)
		return
	}
	e := events.ParseJSON(endpoint, body)
	if e.Invalid {
		m.metrics.ParseFailure(m.labels, metrics.ParseInvalidJSON)
		return
	}
	if e.HasUsage {
		m.body = usage{input: e.InputTokens, output: e.OutputTokens}
	}
	if len(e.Model) > 0 {
		m.bodyModel = string(e.Model)
	}
	m.engine.from(e)
}

// idleTimer ends a stream whose upstream goes silent: when a read of the
// upstream has waited d for bytes, it cancels the upstream request, so that
// the read fails and the client sees the stream cut. Each read that waits
// restarts the countdown (meter.awaitUpstream); when it runs out between
// reads, while the proxy writes to the client, it does nothing. Pausing is
// a flag, not a timer operation: one Reset per read is all the per-read
// cost.
type idleTimer struct {
	d       time.Duration
	t       *time.Timer
	waiting atomic.Bool // a read of the upstream is waiting
	fired   atomic.Bool // set from the timer's goroutine
}

func startIdleTimer(d time.Duration, cancel context.CancelFunc) *idleTimer {
	it := &idleTimer{d: d}
	it.t = time.AfterFunc(d, func() {
		if !it.waiting.Load() {
			return // between reads: the next read restarts the countdown
		}
		it.fired.Store(true)
		cancel()
	})
	return it
}

// reset restarts the countdown: a read waits for the upstream.
func (it *idleTimer) reset() {
	it.waiting.Store(true)
	it.t.Reset(it.d)
}

// pause stops the countdown from counting: the read has returned.
func (it *idleTimer) pause() { it.waiting.Store(false) }

// stop ends the countdown for good: the exchange is over.
func (it *idleTimer) stop() {
	it.waiting.Store(false)
	it.t.Stop()
}
