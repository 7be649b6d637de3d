package proxy

import (
	"context"
	"io"
	"sync/atomic"
	"time"

	"github.com/itlproxy/itlproxy/metrics"
)

// sseBody is the upstream's event-stream body as httputil.ReverseProxy
// reads it. Every byte is returned exactly as read; on the side, each read
// is stamped and fed to the stream's meter.
type sseBody struct {
	rc io.ReadCloser
	m  *streamMeter
}

func (b *sseBody) Read(p []byte) (int, error) {
	n, err := b.rc.Read(p)
	if n > 0 {
		b.m.read(p[:n])
	}
	if err != nil {
		b.m.stop(err)
	}
	return n, err
}

func (b *sseBody) Close() error { return b.rc.Close() }

// streamMeter turns the events of one stream into observations, as
// DESIGN.md defines them: TTFT at the first token-bearing event, one ITL
// sample per gap between consecutive token-bearing events, each event
// stamped when the read that completed it returned.
type streamMeter struct {
	ex       *exchange
	splitter *sseSplitter // nil when the body cannot be parsed

	now         time.Time  // when the read being split returned
	first, last time.Time  // stamps of the first and last token-bearing events
	events      int64      // token-bearing events
	usage       usage      // the last usage the stream reported
	errorEvent  bool       // the upstream reported an error in the stream
	done        bool       // the upstream sent the stream's end marker ([DONE])
	readErr     error      // how reading ended: io.EOF, another error, or nil (never ended)
	idle        *idleTimer // nil without an idle timeout
}

func newStreamMeter(ex *exchange, maxEvent int, parse bool) *streamMeter {
	m := &streamMeter{ex: ex, usage: noUsage}
	if parse {
		m.splitter = newSSESplitter(m, maxEvent)
	}
	return m
}

func (m *streamMeter) read(p []byte) {
	if m.idle != nil {
		m.idle.reset()
	}
	if m.splitter == nil {
		return
	}
	m.now = time.Now()
	m.splitter.write(p)
}

func (m *streamMeter) stop(err error) {
	if m.readErr != nil {
		return
	}
	m.readErr = err
	if m.splitter != nil && m.splitter.end() && err == io.EOF {
		m.ex.rec.ParseFailure(m.ex.labels, metrics.ParseTruncated)
	}
}

var doneData = []byte("[DONE]")

func (m *streamMeter) handleEvent(ev sseEvent) {
	e := classify(ev)
	switch {
	case e.Oversized:
		m.ex.rec.ParseFailure(m.ex.labels, metrics.ParseEventTooLarge)
		return
	case e.Invalid:
		m.ex.rec.ParseFailure(m.ex.labels, metrics.ParseInvalidJSON)
		return
	case e.Done:
		m.done = true
		return
	}
	if e.HasUsage {
		m.usage = usage{input: e.InputTokens, output: e.OutputTokens}
	}
	if e.Failed {
		m.errorEvent = true
	}
	if e.Token {
		m.token()
	}
}

func (m *streamMeter) token() {
	if m.events == 0 {
		m.first = m.now
		m.ex.stream.FirstToken(m.now.Sub(m.ex.t0))
	} else {
		m.ex.stream.Gap(m.now.Sub(m.last))
	}
	m.last = m.now
	m.events++
}

// tpot returns the stream's time per output token, or -1 when it has none:
// N = the reported completion tokens, else the token-bearing events, and
// only when N >= 2.
func (m *streamMeter) tpot() time.Duration {
	n := m.usage.output
	if n < 0 {
		n = m.events
	}
	if n < 2 || m.events == 0 {
		return -1
	}
	return m.last.Sub(m.first) / time.Duration(n-1)
}

// outputTokens returns the reported completion tokens, else the number of
// token-bearing events, or -1 when the stream was not parsed.
func (m *streamMeter) outputTokens() int64 {
	switch {
	case m.usage.output >= 0:
		return m.usage.output
	case m.splitter != nil:
		return m.events
	}
	return -1
}

// outcome decides how the stream ended. clientGone reports whether the
// client's request context was canceled.
func (m *streamMeter) outcome(clientGone bool) string {
	switch {
	case m.idle != nil && m.idle.fired.Load():
		return metrics.OutcomeIdleTimeout
	case m.errorEvent:
		return metrics.OutcomeUpstreamError
	case m.done, m.readErr == io.EOF:
		// After [DONE] the stream is complete for the client, whatever
		// happens to the connection next: SDKs close it as soon as they read
		// [DONE], often before the chunked terminator arrives.
		return metrics.OutcomeCompleted
	case m.readErr != nil && !clientGone:
		return metrics.OutcomeUpstreamError
	}
	// Reading failed because the client went away, or stopped because
	// writing to the client failed.
	return metrics.OutcomeClientCanceled
}

// idleTimer ends a stream whose upstream goes silent: when no bytes have
// arrived for d, it cancels the upstream request, so that the read in
// progress fails and the client sees the stream cut.
type idleTimer struct {
	d     time.Duration
	t     *time.Timer
	fired atomic.Bool // set from the timer's goroutine
}

func startIdleTimer(d time.Duration, cancel context.CancelFunc) *idleTimer {
	it := &idleTimer{d: d}
	it.t = time.AfterFunc(d, func() {
		it.fired.Store(true)
		cancel()
	})
	return it
}

// reset restarts the countdown: bytes arrived.
func (it *idleTimer) reset() { it.t.Reset(it.d) }

func (it *idleTimer) stop() { it.t.Stop() }
