package proxy

import (
	"io"

	"github.com/itlproxy/itlproxy/metrics"
)

// failure is why the upstream gave no response, if it did not.
type failure uint8

const (
	answered       failure = iota // the upstream answered, or was never asked
	clientLeft                    // the client went away before the upstream answered
	upstreamFailed                // the upstream could not be reached, or did not answer in time
)

// outcome decides how the exchange's stream ended, the one place that
// does: code is the status the client got, clientGone whether the
// client's request context was canceled.
func (ex *exchange) outcome(clientGone bool) string {
	code := ex.code
	switch {
	case ex.failure == clientLeft:
		return metrics.OutcomeClientCanceled
	case ex.failure == upstreamFailed:
		return metrics.OutcomeUpstreamError
	case ex.events != nil:
		return ex.events.outcome(clientGone)
	case clientGone:
		return metrics.OutcomeClientCanceled
	case code/100 == 2:
		return metrics.OutcomeCompleted
	case code/100 == 5:
		return metrics.OutcomeUpstreamError
	}
	return metrics.OutcomeRejected
}

// outcome is the outcome of a stream the upstream answered with an event
// stream.
func (m *eventMeter) outcome(clientGone bool) string {
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
