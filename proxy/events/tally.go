package events

import "time"

// Tally is one stream's running count, kept by whoever reads the stream's
// events (the proxy's meter, itlbench's client), so that both ends of a
// comparison do the same per-stream arithmetic: which events are
// token-bearing and how far apart, how many tokens each carried, the
// usage, TPOT. Use NewTally; Add costs no allocation.
type Tally struct {
	// First and Last are the stamps of the first and last token-bearing
	// events; Events counts them.
	First, Last time.Time
	Events      int64
	// Input and Output are the latest counts the stream reported (counts
	// arrive in parts and cumulatively: Anthropic's input at the start,
	// output at the end), -1 until reported.
	Input, Output int64
	// Done: the stream's end marker arrived. Failed: the upstream reported
	// an error. Incomplete: it ended the response early, and said so.
	Done, Failed, Incomplete bool
	// EngineTPOT and EngineTTFT are the upstream's own timing of the
	// stream, when it reported it (Event.EngineTPOT); 0 otherwise.
	EngineTPOT, EngineTTFT time.Duration
	// Model is the model the response first named (Event.Model), "" until
	// one does: copied once per stream.
	Model string

	// When token-bearing events carry cumulative usage (vLLM's
	// continuous_usage_stats), each event's own count is the difference
	// from the previous one.
	perEvent   bool  // the first token-bearing event carried usage
	lastOutput int64 // the last cumulative output count seen
}

// NewTally returns the tally of a stream that has not started.
func NewTally() Tally { return Tally{Input: -1, Output: -1} }

// Token is a token-bearing event as Tally.Add counted it.
type Token struct {
	// First: the stream's first token-bearing event. Gap is the time since
	// the previous one otherwise.
	First bool
	Gap   time.Duration
	// Tokens: how many tokens the event carried, when the stream reports
	// its counts per event (an event without a count of its own carries
	// one); 0 when unknown.
	Tokens int64
}

// Add counts e, which arrived at at, and reports whether it was
// token-bearing, and how. Invalid and Oversized events count for nothing.
func (t *Tally) Add(e Event, at time.Time) (tok Token, ok bool) {
	if e.Invalid || e.Oversized {
		return tok, false
	}
	t.Done = t.Done || e.Done
	t.Failed = t.Failed || e.Failed
	t.Incomplete = t.Incomplete || e.Incomplete
	if e.EngineTPOT > 0 {
		t.EngineTPOT = e.EngineTPOT
	}
	if e.EngineTTFT > 0 {
		t.EngineTTFT = e.EngineTTFT
	}
	if t.Model == "" && len(e.Model) > 0 {
		t.Model = string(e.Model)
	}
	if e.Token && t.Events == 0 {
		t.perEvent = e.HasUsage && e.OutputTokens >= 0
	}
	var tokens int64
	if e.HasUsage {
		if e.InputTokens >= 0 {
			t.Input = e.InputTokens
		}
		if e.OutputTokens >= 0 {
			tokens = e.OutputTokens - t.lastOutput
			t.Output, t.lastOutput = e.OutputTokens, e.OutputTokens
		}
	}
	if !e.Token {
		return tok, false
	}
	switch {
	case !t.perEvent:
		tokens = 0
	case tokens < 1:
		tokens = 1 // an event without a count of its own: one token
	}
	tok = Token{First: t.Events == 0, Tokens: tokens}
	if t.Events == 0 {
		t.First = at
	} else {
		tok.Gap = at.Sub(t.Last)
	}
	t.Last = at
	t.Events++
	return tok, true
}

// OutputTokens returns the reported output tokens, else the number of
// token-bearing events.
func (t *Tally) OutputTokens() int64 {
	if t.Output >= 0 {
		return t.Output
	}
	return t.Events
}

// TPOT returns the stream's time per output token,
// (Last - First) / (N - 1) with N = OutputTokens; ok is false when N < 2
// or no event was token-bearing.
func (t *Tally) TPOT() (tpot time.Duration, ok bool) {
	n := t.OutputTokens()
	if n < 2 || t.Events == 0 {
		return 0, false
	}
	return t.Last.Sub(t.First) / time.Duration(n-1), true
}

// AverageTokens returns the stream's output tokens per token-bearing
// event, from its final usage, when its events did not report their own
// counts; 0 when they did, or when it is unknown.
func (t *Tally) AverageTokens() float64 {
	if t.perEvent || t.Output < 0 || t.Events == 0 {
		return 0
	}
	return float64(t.Output) / float64(t.Events)
}
