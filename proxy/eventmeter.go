package proxy

import (
	"io"
	"sync"
	"time"

	"github.com/itlproxy/itlproxy/metrics"
	"github.com/itlproxy/itlproxy/proxy/events"
)

// eventMeter is the upstream's body of an event stream (server-sent
// events, or Ollama's newline-delimited JSON) as httputil.ReverseProxy
// reads it, and the measurement of its events: TTFT at the first
// token-bearing event, one ITL sample per gap between consecutive ones,
// each event at the stamp of the read that completed it, all recorded on
// the response's sink. Every byte is returned exactly as read.
//
// Measuring stays off the forwarding path: a read is only stamped (its
// time, and the model's streams in flight then, which the load bands need)
// and held (a copy of its bytes) before its bytes go to the client; it is
// split, classified and recorded when the reverse proxy asks for the next
// read, once those bytes have been written and before the wait for the
// upstream, on the same goroutine (measureHeld). Every stamp is the
// read's own, so every gap is exactly as long as if it were measured at
// once; an observation lags its read by the time the client's write
// takes. What the proxy adds on the way, the read's own delay and each
// write to the client, is timed by the stream's forwardClock
// (forwarding.go), whose stamps the meter and the client's writer note
// and the meter consumes.
type eventMeter struct {
	rc   io.ReadCloser // the upstream's body
	sink *sink
	scan *events.Scanner // nil when its bytes cannot be read (an encoding)
	// readErr is how reading ended: io.EOF, another error, or nil (never
	// ended).
	readErr error
	idle    *idleTimer // nil without an idle timeout
	tally   events.Tally

	// held is the last read, forwarded and not yet measured (a pooled
	// buffer, nil when there is none), and heldAt its stamp.
	held   *[]byte
	heldAt events.Stamp
	// clock times the reads' and the writes' way through the proxy.
	clock forwardClock
}

// newEventMeter returns the meter of body, an event stream of endpoint's
// API recorded on s; parse is false when its bytes cannot be read (an
// encoding), idle nil without an idle timeout.
func newEventMeter(body io.ReadCloser, s *sink, endpoint events.Endpoint, maxEvent int, parse bool, idle *idleTimer) *eventMeter {
	m := &eventMeter{rc: body, sink: s, idle: idle, tally: events.NewTally()}
	if parse {
		m.scan = events.NewScanner(endpoint, maxEvent, m.onEvent)
	}
	s.readEvents()
	return m
}

func (m *eventMeter) Read(p []byte) (int, error) {
	turned := time.Now()
	// The held read is measured before the write that carried it is
	// handed to the sink: that write began after the read's gap ended.
	began, wrote := m.clock.turn(turned)
	measured := m.measureHeld()
	if wrote {
		m.sink.clientWrite(began, turned)
	}
	issued := turned
	if measured {
		issued = time.Now()
	}
	m.awaitUpstream()
	n, err := m.rc.Read(p)
	m.upstreamAnswered()
	if n > 0 {
		m.hold(p[:n], turned, issued)
	}
	if err != nil && m.readErr == nil {
		m.readErr = err
	}
	return n, err
}

func (m *eventMeter) Close() error { return m.rc.Close() }

// awaitUpstream starts the idle countdown before a read of the upstream:
// it counts only while the proxy waits for the upstream, so that the time
// ReverseProxy spends writing to a client that reads slowly is not taken
// for the upstream's silence. After the stream's end marker it no longer
// counts: the stream is complete for the client, whatever the connection
// does next.
func (m *eventMeter) awaitUpstream() {
	if m.idle != nil && !m.tally.Done {
		m.idle.reset()
	}
}

// upstreamAnswered pauses the idle countdown: a read has returned.
func (m *eventMeter) upstreamAnswered() {
	if m.idle != nil {
		m.idle.pause()
	}
}

// hold stamps a read of the stream and holds its bytes to be measured
// once they have been forwarded; the proxy turned to the upstream for it
// at turned and issued it at issued.
func (m *eventMeter) hold(p []byte, turned, issued time.Time) {
	if m.scan == nil {
		return
	}
	now := time.Now()
	m.clock.read(turned, issued, now)
	m.heldAt = events.Stamp{At: now, Load: m.sink.stream.InFlight()}
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
// bytes have gone to the client by now. It reports whether there was one.
func (m *eventMeter) measureHeld() bool {
	if m.held == nil {
		return false
	}
	m.scan.Write(*m.held, m.heldAt)
	heldReads.Put(m.held)
	m.held = nil
	return true
}

// writing notes that a write of the stream's bytes to the client begins
// now (clientWriter).
func (m *eventMeter) writing() {
	now := time.Now()
	if began, ok := m.clock.write(now); ok {
		m.sink.clientWrite(began, now)
	}
}

// drain measures the read still held, at the stream's end at at, when
// the last write to the client has returned: what the end reads is then
// complete. When reading the stream ended, it ends the scanner too, which
// counts a stream cut in the middle of an event.
func (m *eventMeter) drain(at time.Time) {
	began, wrote := m.clock.turn(at)
	if m.scan != nil {
		m.measureHeld()
	}
	if wrote {
		m.sink.clientWrite(began, at)
	}
	if m.scan != nil && m.readErr != nil && m.scan.End() && m.readErr == io.EOF {
		m.sink.parseFailure(metrics.ParseTruncated)
	}
}

// onEvent records one event, which arrived with the read stamped at.
func (m *eventMeter) onEvent(e events.Event, at events.Stamp) {
	switch {
	case e.Oversized:
		m.sink.parseFailure(metrics.ParseEventTooLarge)
		return
	case e.Invalid:
		m.sink.parseFailure(metrics.ParseInvalidJSON)
		return
	}
	tok, ok := m.tally.Add(e, at.At)
	if !ok {
		return
	}
	if tok.First {
		m.sink.firstToken(at.At.Sub(m.sink.start), at.At)
	} else {
		m.sink.gap(tok.Gap, tok.Tokens, at.At, at.Load)
	}
	if d, ok := m.clock.ownDelay(); ok {
		m.sink.ownDelay(d)
	}
	if tok.Tokens > 0 {
		m.sink.eventTokens(tok.Tokens)
	}
}

// end stops the meter and adds what its stream said to e: its usage (the
// output counted as its token-bearing events when it reported none), its
// TPOT and tokens per event, the model it named and the upstream's own
// timing.
func (m *eventMeter) end(e *responseEnd) {
	if m.idle != nil {
		m.idle.stop()
	}
	t := &m.tally
	e.usage = usage{input: t.Input, output: t.Output}
	e.reported = e.usage
	if e.usage.output < 0 && m.scan != nil {
		e.usage.output = t.Events
	}
	if tpot, ok := t.TPOT(); ok {
		e.stream.TPOT = tpot
	}
	e.stream.AverageTokens = t.AverageTokens()
	e.stream.Events = t.Events
	e.model = t.Model
	e.engine = e.engine.over(engineTimes{tpot: t.EngineTPOT, ttft: t.EngineTTFT})
}
