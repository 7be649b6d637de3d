package proxy

import (
	"net/http"
	"strconv"
	"time"

	"github.com/itlproxy/itlproxy/proxy/events"
)

// ndjsonType is the media type of Ollama's streams (newline-delimited
// JSON), read as a stream on the endpoints that send it.
const ndjsonType = "application/x-ndjson"

// engineTimes is the upstream's own account of a response: its time per
// output token and time to first token, 0 where it reported none.
type engineTimes struct {
	tpot, ttft time.Duration
}

// from takes the timing an event or body reported, keeping what it had
// where the event reported nothing.
func (t *engineTimes) from(e events.Event) {
	if e.EngineTPOT > 0 {
		t.tpot = e.EngineTPOT
	}
	if e.EngineTTFT > 0 {
		t.ttft = e.EngineTTFT
	}
}

// tgiTimePerToken is the header in which TGI's /generate reports its
// decode time per token, in whole milliseconds.
const tgiTimePerToken = "X-Time-Per-Token"

// readEngineHeaders reads the timing an upstream reports in the headers
// of a successful response: TGI's x-time-per-token. The body's figure,
// when it has one, wins.
func (m *meter) readEngineHeaders(endpoint events.Endpoint, resp *http.Response) {
	v := resp.Header[tgiTimePerToken]
	if endpoint != events.TGIGenerate || resp.StatusCode/100 != 2 || len(v) == 0 {
		return
	}
	if ms, err := strconv.ParseInt(v[0], 10, 64); err == nil && ms > 0 && ms < int64(time.Hour/time.Millisecond) {
		m.engine.tpot = time.Duration(ms) * time.Millisecond
	}
}

// engineTimes is the upstream's timing of the response: a stream's from
// its events, a body's from the body or the headers.
func (m *meter) engineTimes() engineTimes {
	t := m.engine
	if m.sse {
		t.from(events.Event{EngineTPOT: m.tally.EngineTPOT, EngineTTFT: m.tally.EngineTTFT})
	}
	return t
}
