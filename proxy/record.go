package proxy

import (
	"time"

	"github.com/itlproxy/itlproxy/proxy/recorder"
)

// record hands the stream that ended at end to the recorder, with its
// timeline: what was measured and the ids, never the request's or the
// response's content or headers.
func (ex *exchange) record(e responseEnd, end time.Time) {
	if ex.recorder == nil {
		return
	}
	ex.recorder.Record(ex.m.timeline, recorder.Stream{
		RequestID:    ex.ids.Request,
		SessionID:    ex.ids.Session,
		TraceID:      ex.ids.Trace,
		Model:        ex.labels.Model,
		Endpoint:     ex.labels.Endpoint,
		Tenant:       ex.labels.Tenant,
		Class:        ex.labels.Class,
		Start:        ex.t0,
		Duration:     end.Sub(ex.t0),
		Outcome:      e.stream.Outcome,
		TTFT:         e.ttft,
		TPOT:         e.stream.TPOT,
		OutputTokens: e.usage.output,
	})
	ex.m.timeline = nil
}
