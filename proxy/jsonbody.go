package proxy

import (
	"io"

	"github.com/itlproxy/itlproxy/metrics"
	"github.com/itlproxy/itlproxy/proxy/events"
)

// jsonBody is the upstream's non-streamed JSON body as
// httputil.ReverseProxy reads it: passed through, with a copy kept, up to
// max bytes, to read its usage, model and the upstream's timing once it
// has all arrived. Its parse failures are counted on the response's sink.
type jsonBody struct {
	rc       io.ReadCloser
	sink     *sink
	endpoint events.Endpoint
	max      int
	buf      []byte
	over     bool // the body grew past max, and is not kept
	read     bool // the body has been read to its end, and parsed

	usage usage  // the usage it reported, when it did
	model string // the model it named, "" for none
	// engine is the upstream's own timing it reported, 0 where none.
	engine engineTimes
}

func newJSONBody(body io.ReadCloser, s *sink, endpoint events.Endpoint, max int) *jsonBody {
	return &jsonBody{rc: body, sink: s, endpoint: endpoint, max: max, usage: noUsage}
}

func (b *jsonBody) Read(p []byte) (int, error) {
	n, err := b.rc.Read(p)
	if n > 0 && !b.over {
		if len(b.buf)+n > b.max {
			b.over, b.buf = true, nil
		} else {
			b.buf = append(b.buf, p[:n]...)
		}
	}
	if err == io.EOF && !b.read {
		b.read = true
		b.parse()
		b.buf = nil
	}
	return n, err
}

func (b *jsonBody) Close() error { return b.rc.Close() }

// parse reads the whole body for its usage.
func (b *jsonBody) parse() {
	if b.over {
		b.sink.parseFailure(metrics.ParseBodyTooLarge)
		return
	}
	e := events.ParseJSON(b.endpoint, b.buf)
	if e.Invalid {
		b.sink.parseFailure(metrics.ParseInvalidJSON)
		return
	}
	if e.HasUsage {
		b.usage = usage{input: e.InputTokens, output: e.OutputTokens}
	}
	if len(e.Model) > 0 {
		b.model = string(e.Model)
	}
	b.engine = engineTimes{tpot: e.EngineTPOT, ttft: e.EngineTTFT}
}

// end adds what the body said to e: its usage, model and timing, where
// the body's figure wins over the headers'.
func (b *jsonBody) end(e *responseEnd) {
	e.usage, e.reported = b.usage, b.usage
	e.model = b.model
	e.engine = e.engine.over(b.engine)
}
