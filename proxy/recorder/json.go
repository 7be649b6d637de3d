package recorder

import (
	"encoding/json"
	"time"
)

// entryJSON is an Entry as /debug/streams shows it: durations in seconds,
// null when unknown.
type entryJSON struct {
	RequestID    string    `json:"request_id"`
	SessionID    string    `json:"session_id,omitempty"`
	TraceID      string    `json:"trace_id,omitempty"`
	Model        string    `json:"model"`
	Endpoint     string    `json:"endpoint"`
	Tenant       string    `json:"tenant"`
	Class        string    `json:"class"`
	Upstream     string    `json:"upstream,omitempty"`
	Start        time.Time `json:"start"`
	Duration     float64   `json:"duration_seconds"`
	Outcome      string    `json:"outcome"`
	TTFT         *float64  `json:"ttft_seconds"`
	TPOT         *float64  `json:"tpot_seconds"`
	OutputTokens *int64    `json:"output_tokens"`
	ITLObjective *float64  `json:"itl_objective_seconds"`
	Gaps         int       `json:"gaps"`
	LongestGap   float64   `json:"longest_gap_seconds"`
	LongestGapAt int       `json:"longest_gap_index"`
	// ClientWriteWait: the stream's writes to the client, summed.
	ClientWriteWait float64     `json:"client_write_wait_seconds"`
	Stalls          []stallJSON `json:"stalls"`
	StallsPast      int         `json:"stalls_past,omitempty"`
	Timeline        []gapJSON   `json:"timeline"`
	Rest            *restJSON   `json:"rest,omitempty"`
}

// stallJSON is a stall: its gap's index and length, its cause, and the
// request whose prefill caused it.
type stallJSON struct {
	Gap       int     `json:"gap"`
	Seconds   float64 `json:"seconds"`
	Cause     string  `json:"cause"`
	RequestID string  `json:"request_id,omitempty"`
}

type gapJSON struct {
	Seconds float64 `json:"seconds"`
	Tokens  int32   `json:"tokens,omitempty"`
}

type restJSON struct {
	Gaps    int     `json:"gaps"`
	Total   float64 `json:"total_seconds"`
	Longest float64 `json:"longest_seconds"`
	Tokens  int64   `json:"tokens,omitempty"`
}

// MarshalJSON writes the entry with its whole recorded timeline.
func (e *Entry) MarshalJSON() ([]byte, error) {
	j := entryJSON{
		RequestID: e.RequestID, SessionID: e.SessionID, TraceID: e.TraceID,
		Model: e.Model, Endpoint: e.Endpoint, Tenant: e.Tenant, Class: e.Class, Upstream: e.Upstream,
		Start: e.Start.UTC(), Duration: e.Duration.Seconds(), Outcome: e.Outcome,
		TTFT: known(e.TTFT), TPOT: known(e.TPOT),
		Gaps: e.Gaps, LongestGap: e.LongestGap.Seconds(), LongestGapAt: e.LongestGapAt,
		ClientWriteWait: e.ClientWriteWait.Seconds(),
		Stalls:          make([]stallJSON, len(e.Stalls)),
		StallsPast:      e.StallsPast,
		Timeline:        make([]gapJSON, len(e.Timeline)),
	}
	for i, st := range e.Stalls {
		j.Stalls[i] = stallJSON{Gap: st.Gap, Seconds: st.Length.Seconds(), Cause: st.Cause, RequestID: st.Prefill}
	}
	if e.OutputTokens >= 0 {
		j.OutputTokens = &e.OutputTokens
	}
	if e.ITLObjective > 0 {
		j.ITLObjective = known(e.ITLObjective)
	}
	for i, g := range e.Timeline {
		j.Timeline[i] = gapJSON{Seconds: g.Length.Seconds(), Tokens: g.Tokens}
	}
	if e.Rest.Gaps > 0 {
		j.Rest = &restJSON{Gaps: e.Rest.Gaps, Total: e.Rest.Total.Seconds(), Longest: e.Rest.Longest.Seconds(), Tokens: e.Rest.Tokens}
	}
	return json.Marshal(j)
}

func known(d time.Duration) *float64 {
	if d < 0 {
		return nil
	}
	s := d.Seconds()
	return &s
}
