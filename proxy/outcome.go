package proxy

import (
	"io"
	"time"

	"github.com/itlproxy/itlproxy/metrics"
)

// failure is why the upstream gave no response, if it did not.
type failure uint8

const (
	answered       failure = iota // the upstream answered, or was never asked
	clientLeft                    // the client went away before the upstream answered
	upstreamFailed                // the upstream could not be reached, or did not answer in time
)

// responseEnd is how a response ended, as its meter saw it: what the
// exchange records.
type responseEnd struct {
	// stream is the stream's end, for an exchange that counts as one.
	stream metrics.StreamEnd
	// usage is the tokens to count: the reported usage, the output of an
	// event stream read without any counted as its token-bearing events;
	// -1 when unknown.
	usage usage
	// ttft is the stream's time to first token, -1 without one.
	ttft time.Duration
	// engine is the upstream's own timing of the response, where reported.
	engine engineTimes
	// model is the model the response named, "" when it named none.
	model string
}

// end stops the meter and returns how the response ended. code is the
// status the client got, f why the upstream gave none if it did not, and
// clientGone whether the client's request context was canceled.
func (m *meter) end(code int, f failure, clientGone bool) responseEnd {
	e := responseEnd{usage: m.body, ttft: -1, engine: m.engineTimes(), model: m.bodyModel}
	e.stream.TPOT = -1
	if m.idle != nil {
		m.idle.stop()
	}
	if m.sse {
		t := &m.tally
		e.usage = usage{input: t.Input, output: t.Output}
		if e.usage.output < 0 && m.scan != nil {
			e.usage.output = t.Events
		}
		if tpot, ok := t.TPOT(); ok {
			e.stream.TPOT = tpot
		}
		e.stream.AverageTokens = t.AverageTokens()
		e.stream.Events = t.Events
		e.model = t.Model
		if t.Events > 0 {
			e.ttft = t.First.Sub(m.t0)
		}
	}
	if m.stream != nil {
		e.stream.Outcome = m.outcome(code, f, clientGone)
		e.stream.OutputTokens = e.usage.output
		e.stream.InputTokens = e.usage.input
	}
	return e
}

// outcome decides how the stream ended: the one place that does.
func (m *meter) outcome(code int, f failure, clientGone bool) string {
	switch {
	case f == clientLeft:
		return metrics.OutcomeClientCanceled
	case f == upstreamFailed:
		return metrics.OutcomeUpstreamError
	case m.sse:
		return m.eventStreamOutcome(clientGone)
	case clientGone:
		return metrics.OutcomeClientCanceled
	case code/100 == 2:
		return metrics.OutcomeCompleted
	case code/100 == 5:
		return metrics.OutcomeUpstreamError
	}
	return metrics.OutcomeRejected
}

// eventStreamOutcome is the outcome of a stream the upstream answered
// with an event stream.
func (m *meter) eventStreamOutcome(clientGone bool) string {
	switch {
	case m.tally.Failed:
		return metrics.OutcomeUpstreamError
	case m.tally.Incomplete:
		return metrics.OutcomeIncomplete
	case m.tally.Done:
		// After [DONE] the stream is complete for the client, whatever
		// happens to the connection next: SDKs close it as soon as they read
		// [DONE], often before the chunked terminator arrives (and the idle
		// countdown no longer runs).
		return metrics.OutcomeCompleted
	case m.idle != nil && m.idle.fired.Load():
		return metrics.OutcomeIdleTimeout
	case m.readErr == io.EOF:
		return metrics.OutcomeCompleted
	case m.readErr != nil && !clientGone:
		return metrics.OutcomeUpstreamError
	}
	// Reading failed because the client went away, or stopped because
	// writing to the client failed.
	return metrics.OutcomeClientCanceled
}
