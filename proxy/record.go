package proxy

import (
	"time"

	"github.com/itlproxy/itlproxy/metrics"
	"github.com/itlproxy/itlproxy/proxy/recorder"
)

// record hands the stream that ended at end to the recorder, with its
// timeline: what was measured and the ids, never the request's or the
// response's content or headers.
func (ex *exchange) record(e responseEnd, end time.Time) {
	recordStream(ex.recorder, ex.m.timeline, ex.ids, ex.req.labels, ex.m.stream, e, ex.req.t0, end)
	ex.m.timeline = nil
}

// recordStream hands stream s, labelled l and known by ids, which started
// at start and ended at end as e says, to rec (nil: none) with its
// timeline tl. An exchange's stream and a Realtime response are recorded
// here alike.
func recordStream(rec *recorder.Recorder, tl *recorder.Timeline, ids metrics.IDs, l metrics.Labels, s *metrics.Stream, e responseEnd, start, end time.Time) {
	if rec == nil {
		return
	}
	gaps := s.Gaps()
	rec.Record(tl, recorder.Stream{
		RequestID:    ids.Request,
		SessionID:    ids.Session,
		TraceID:      ids.Trace,
		Model:        l.Model,
		Endpoint:     l.Endpoint,
		Tenant:       l.Tenant,
		Class:        l.Class,
		Start:        start,
		Duration:     end.Sub(start),
		Outcome:      e.stream.Outcome,
		TTFT:         e.ttft,
		TPOT:         e.stream.TPOT,
		OutputTokens: e.usage.output,
		ITLObjective: s.Objectives().ITL,
		Gaps:         gaps.Count,
		LongestGap:   gaps.Longest,
		LongestGapAt: gaps.LongestAt,
	})
}
