package realtime

import "time"

// Observer receives a connection's measurements. The Conn calls it with
// its lock held, one call at a time, from either direction's goroutine:
// it must not call back into the Conn.
type Observer interface {
	// Start is called when a response begins, at response.created: its
	// clock started at s.At. The ResponseObserver it returns receives the
	// rest of the response.
	Start(s Start) ResponseObserver
	// Unreadable counts what the measurement could not read; the bytes
	// were forwarded all the same.
	Unreadable(f Failure)
	// Wrote: a write of the server's bytes to the client, which carried
	// the events of a response in flight (End.ClientWriteWait), took d
	// from its start to its return; called once per write, however many
	// responses it carried.
	Wrote(d time.Duration)
}

// ResponseObserver receives one response's measurements, as they happen.
type ResponseObserver interface {
	// FirstDelta: the response's first output delta arrived at at, ttft
	// after the response began.
	FirstDelta(ttft time.Duration, at time.Time)
	// Gap: an output delta arrived at at, d after the one before it.
	Gap(d time.Duration, at time.Time)
	// OwnDelay: the delta just reported (by FirstDelta or Gap) spent d
	// between the bytes of the read that completed it being available to
	// the proxy (Written.Available) and the start of their write to the
	// client; called only when Conn.Measure was given the write's times.
	OwnDelay(d time.Duration)
	// ClientWrite: a write of the server's bytes to the client while the
	// response was in flight, from its Start on, ran from began to ended
	// (Observer.Wrote observes it once); called before the deltas those
	// bytes complete are reported.
	ClientWrite(began, ended time.Time)
	// End: the response ended; called once, last.
	End(e End)
}

// Start describes a response that began.
type Start struct {
	// ResponseID is the id the server gave it (response.id), "" when none.
	ResponseID string
	// At is when it began: when the client's response.create that asked
	// for it passed the proxy, or, when no response.create was waiting
	// (the server began it: server-side voice activity detection), when
	// response.created passed.
	At time.Time
	// ByServer: the server began it.
	ByServer bool
}

// End is how a response ended.
type End struct {
	Outcome Outcome
	// At is when it ended: when response.done (or the error that ended
	// it) passed, or when the connection ended.
	At time.Time
	// Deltas counts its output deltas.
	Deltas int64
	// InputTokens and OutputTokens are response.done's
	// response.usage.input_tokens and output_tokens, -1 when it reported
	// none; OutputTokens is then the number of output deltas, and
	// UsageReported false.
	InputTokens, OutputTokens int64
	UsageReported             bool
	// TPOT is its time per output token, (last delta - first delta) / (N
	// - 1) with N = OutputTokens; -1 when N < 2.
	TPOT time.Duration
	// AverageTokens is OutputTokens per delta when response.done reported
	// them, else 0.
	AverageTokens float64
	// CancelRequested: the client sent a response.cancel for it.
	CancelRequested bool
	// ClientWriteWait sums the writes of the server's bytes to the client
	// while it was in flight, from the one that carried its
	// response.created to the one that carried its end, each from its
	// start to its return (Observer.Wrote).
	ClientWriteWait time.Duration
}

// Outcome is how a response ended.
type Outcome uint8

// The outcomes.
const (
	// Completed: response.done with status completed (or a status the
	// measurement does not know).
	Completed Outcome = iota + 1
	// Cancelled: response.done with status cancelled (the client's
	// response.cancel, or the caller speaking over the response), or a
	// connection that ended after the client's response.cancel.
	Cancelled
	// Incomplete: response.done with status incomplete (a token limit, a
	// content filter).
	Incomplete
	// Failed: response.done with status failed, or an error event that
	// names the response.
	Failed
	// ClientGone: the client ended the connection (a Close frame, or its
	// end of the connection closed) mid-response.
	ClientGone
	// ServerGone: the server ended the connection mid-response.
	ServerGone
)

// Failure is why the measurement could not read something.
type Failure uint8

// The failures.
const (
	// TooLarge: a message over Config.MaxMessageBytes (or a compressed
	// one that inflates past 64 MiB, which is then given up as one that
	// does not inflate).
	TooLarge Failure = iota + 1
	// InvalidJSON: a text message that is not one JSON object.
	InvalidJSON
	// InvalidFrame: frames that break RFC 6455 (or RFC 7692's use of the
	// RSV1 bit); the direction is not read after them.
	InvalidFrame
	// InvalidCompression: a compressed message that does not inflate;
	// with context takeover, also every compressed message after it, the
	// window they refer to being lost.
	InvalidCompression
	// UnknownExtension: a message under an extension the measurement does
	// not know.
	UnknownExtension
	// Truncated: the connection ended inside a frame or a message.
	Truncated
)
