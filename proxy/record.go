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
	l, gaps := ex.req.labels, ex.m.stream.Gaps()
	ex.recorder.Record(ex.m.timeline, recorder.Stream{
		RequestID:    ex.ids.Request,
		SessionID:    ex.ids.Session,
		TraceID:      ex.ids.Trace,
		Model:        l.Model,
		Endpoint:     l.Endpoint,
		Tenant:       l.Tenant,
		Class:        l.Class,
		Start:        ex.req.t0,
		Duration:     end.Sub(ex.req.t0),
		Outcome:      e.stream.Outcome,
		TTFT:         e.ttft,
		TPOT:         e.stream.TPOT,
		OutputTokens: e.usage.output,
		ITLObjective: ex.m.stream.Objectives().ITL,
		Gaps:         gaps.Count,
		LongestGap:   gaps.Longest,
		LongestGapAt: gaps.LongestAt,
	})
	ex.m.timeline = nil
}
