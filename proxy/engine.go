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

// over returns t with o's figures where o has them.
func (t engineTimes) over(o engineTimes) engineTimes {
	if o.tpot > 0 {
		t.tpot = o.tpot
	}
	if o.ttft > 0 {
		t.ttft = o.ttft
	}
	return t
}

// tgiTimePerToken is the header in which TGI's /generate reports its
// decode time per token, in whole milliseconds.
const tgiTimePerToken = "X-Time-Per-Token"

// engineHeaders reads the timing an upstream reports in the headers of a
// successful response of endpoint: TGI's x-time-per-token. The body's
// figure, when it has one, wins.
func engineHeaders(endpoint events.Endpoint, resp *http.Response) engineTimes {
	v := resp.Header[tgiTimePerToken]
	if endpoint != events.TGIGenerate || resp.StatusCode/100 != 2 || len(v) == 0 {
		return engineTimes{}
	}
	if ms, err := strconv.ParseInt(v[0], 10, 64); err == nil && ms > 0 && ms < int64(time.Hour/time.Millisecond) {
		return engineTimes{tpot: time.Duration(ms) * time.Millisecond}
	}
	return engineTimes{}
}
