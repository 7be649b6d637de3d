package proxy

import (
	"context"
	"io"
	"sync/atomic"
	"time"

	"github.com/itlproxy/itlproxy/metrics"
	"github.com/itlproxy/itlproxy/proxy/events"
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

// streamMeter turns the events of one stream into observations: TTFT at
// the first token-bearing event (one that carries output), one ITL sample
// per gap between consecutive token-bearing events, each event stamped
// when the read that completed it returned.
type streamMeter struct {
	ex   *exchange
	scan *events.StreamScanner // nil when the body cannot be parsed

	now         time.Time  // when the read being split returned
	first, last time.Time  // stamps of the first and last token-bearing events
	events      int64      // token-bearing events
	usage       usage      // the latest counts the stream reported
	errorEvent  bool       // the upstream reported an error in the stream
	incomplete  bool       // the upstream ended the response early, and said so
	done        bool       // the upstream sent the stream's end marker ([DONE], response.completed, ...)
	readErr     error      // how reading ended: io.EOF, another error, or nil (never ended)
	idle        *idleTimer // nil without an idle timeout

	// Several tokens per event: when token-bearing events carry cumulative
	// usage (vLLM's continuous_usage_stats), each event's own count is the
	// difference from the previous one.
	perEvent   bool  // the first token-bearing event carried usage
	lastOutput int64 // the last cumulative output count seen
}

// usage is the token usage an upstream reported; -1 means not reported.
type usage struct {
	input, output int64
}

var noUsage = usage{input: -1, output: -1}

func newStreamMeter(ex *exchange, maxEvent int, parse bool) *streamMeter {
	m := &streamMeter{ex: ex, usage: noUsage}
	if parse {
		m.scan = events.NewStreamScanner(ex.endpoint, maxEvent, m.handleEvent)
	}
	return m
}

func (m *streamMeter) read(p []byte) {
	if m.idle != nil {
		m.idle.reset()
	}
	if m.scan == nil {
		return
	}
	m.now = time.Now()
	m.scan.Write(p)
}

func (m *streamMeter) stop(err error) {
	if m.readErr != nil {
		return
	}
	m.readErr = err
	if m.scan != nil && m.scan.End() && err == io.EOF {
		m.ex.rec.ParseFailure(m.ex.labels, metrics.ParseTruncated)
	}
}

func (m *streamMeter) handleEvent(e events.Event) {
	switch {
	case e.Oversized:
		m.ex.rec.ParseFailure(m.ex.labels, metrics.ParseEventTooLarge)
		return
	case e.Invalid:
		m.ex.rec.ParseFailure(m.ex.labels, metrics.ParseInvalidJSON)
		return
	}
	m.done = m.done || e.Done
	m.errorEvent = m.errorEvent || e.Failed
	m.incomplete = m.incomplete || e.Incomplete
	// The event's own tokens, when events carry cumulative usage.
	var tokens int64
	if e.Token && m.events == 0 {
		m.perEvent = e.HasUsage && e.OutputTokens >= 0
	}
	if e.HasUsage {
		// Counts arrive in parts (Anthropic: input at the start, output at
		// the end) and cumulatively: keep the latest of each.
		if e.InputTokens >= 0 {
			m.usage.input = e.InputTokens
		}
		if e.OutputTokens >= 0 {
			tokens = e.OutputTokens - m.lastOutput
			m.usage.output, m.lastOutput = e.OutputTokens, e.OutputTokens
		}
	}
	if e.Token {
		if !m.perEvent {
			tokens = 0
		} else if tokens < 1 {
			tokens = 1 // an event without a count of its own: one token
		}
		m.token(tokens)
	}
}

// token stamps a token-bearing event carrying tokens tokens (0: unknown).
func (m *streamMeter) token(tokens int64) {
	if m.events == 0 {
		m.first = m.now
		m.ex.stream.FirstToken(m.now.Sub(m.ex.t0))
	} else {
		m.ex.stream.Gap(m.now.Sub(m.last), tokens)
	}
	if tokens > 0 {
		m.ex.stream.EventTokens(tokens)
	}
	m.last = m.now
	m.events++
}

// averageTokens returns the stream's output tokens per token-bearing
// event, from its final usage, when its events did not report their own
// counts; 0 when they did, or when it is unknown.
func (m *streamMeter) averageTokens() float64 {
	if m.perEvent || m.usage.output < 0 || m.events == 0 {
		return 0
	}
	return float64(m.usage.output) / float64(m.events)
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
	case m.scan != nil:
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
	case m.incomplete:
		return metrics.OutcomeIncomplete
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
