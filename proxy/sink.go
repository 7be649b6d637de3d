package proxy

import (
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/itlproxy/itlproxy/metrics"
	"github.com/itlproxy/itlproxy/proxy/recorder"
)

// sink records one measured response: an exchange's (an event stream, a
// JSON body, or nothing to read) or one response of a Realtime
// connection. What the response's reader finds goes in here once, and
// every consumer reads it from here: the first token and each gap go to
// the stream's metrics.Stream (histograms, SLO counters, load bands), its
// recorder timeline and its span's notable gaps; the end goes to the
// metrics, the recorder's entry and the span's attributes, in end, the
// one function that records a response's end whatever its protocol.
type sink struct {
	metrics *metrics.Metrics
	labels  metrics.Labels
	ids     metrics.IDs
	// start is where the response's clock starts: the request's t0, or a
	// Realtime response's start.
	start time.Time
	// turn is the response's place in its conversation as its request
	// numbers it, 0 when unknown (metrics.Metrics.StartTurn).
	turn int
	// upstream is the label of the upstream server the request was sent
	// to, "" unless the proxy balances over several.
	upstream string
	// server is the record of the upstream server the request was sent
	// to, against which the stream's stalls are judged (the single
	// upstream's, or the one the proxy balanced it to).
	server *metrics.Server
	// stream is the response's stream, nil unless it counts as one.
	stream *metrics.Stream
	// ttft is the stream's time to first token, -1 before it.
	ttft time.Duration
	// recorder records the stream when it ends, nil for none; timeline
	// holds its gaps meanwhile, nil until its events are read (or without
	// a recorder).
	recorder *recorder.Recorder
	timeline *recorder.Timeline
	// span is where the response's attributes and notable gaps go, nil
	// unless traced; notable keeps those gaps meanwhile.
	span    trace.Span
	notable *notableGaps
}

// newSink returns the sink of a response labelled l, known by ids, whose
// clock started at start, of turn turn (0: unknown); span is nil unless it
// is traced.
func newSink(m *metrics.Metrics, l metrics.Labels, ids metrics.IDs, start time.Time, turn int, rec *recorder.Recorder, span trace.Span) sink {
	s := sink{metrics: m, labels: l, ids: ids, start: start, turn: turn, ttft: -1, recorder: rec, span: span}
	if span != nil {
		s.notable = &notableGaps{}
	}
	return s
}

// startStream counts the response as a stream from now on.
func (s *sink) startStream() {
	if s.stream == nil {
		s.stream = s.metrics.StartTurn(s.labels, s.ids, s.turn)
		if s.upstream != "" {
			s.stream.SetUpstream(s.upstream)
		}
		s.stream.SetServer(s.server)
	}
}

// setUpstream notes the upstream server the request goes to: its label
// ("" for the single upstream) and its record.
func (s *sink) setUpstream(label string, server *metrics.Server) {
	s.server = server
	if label != "" {
		s.upstream, s.ids.Upstream = label, label
	}
	if s.stream != nil {
		if label != "" {
			s.stream.SetUpstream(label)
		}
		s.stream.SetServer(server)
	}
}

// sent notes that the request has been written to its server at at: the
// stream, if it is one, waits for its first token there from then on. It
// runs on the transport's goroutine: st is the stream as it was when the
// request was sent.
func sent(st *metrics.Stream, at time.Time) {
	if st != nil {
		st.Sent(at)
	}
}

// readEvents starts the timeline of a stream whose events are about to be
// read.
func (s *sink) readEvents() {
	s.startStream()
	if s.timeline == nil {
		s.timeline = s.recorder.Start()
	}
}

// setRequestID replaces the request id the response is known by, before
// its first token.
func (s *sink) setRequestID(id string) {
	s.ids.Request = id
	if s.stream != nil {
		s.stream.SetRequestID(id)
	}
}

// parseFailure counts what the response's reader could not read.
func (s *sink) parseFailure(reason string) { s.metrics.ParseFailure(s.labels, reason) }

// firstToken records the stream's first token-bearing event, ttft after
// its start, which arrived at at.
func (s *sink) firstToken(ttft time.Duration, at time.Time) {
	s.ttft = ttft
	s.stream.FirstTokenAt(ttft, at)
}

// gap records a gap of d, ended at at by an event of tokens tokens (0:
// unknown) with load streams of the model in flight.
func (s *sink) gap(d time.Duration, tokens int64, at time.Time, load int64) {
	n := s.stream.GapInFlight(d, tokens, load, at)
	s.timeline.Gap(d, tokens)
	s.notable.add(s.stream.Gaps().Count, d, at, n)
}

// ownDelay records the own delay of a token-bearing event
// (forwarding.go).
func (s *sink) ownDelay(d time.Duration) { s.stream.OwnDelay(d) }

// clientWrite records one write of the stream's bytes to its client,
// from began to its return at ended: each relay hands each write once,
// after the reads whose bytes it carries (metrics.Stream.ClientWrite).
func (s *sink) clientWrite(began, ended time.Time) { s.stream.ClientWrite(began, ended) }

// addWriteWait adds to the stream's total writes to its client observed
// by its connection (a Realtime response's).
func (s *sink) addWriteWait(d time.Duration) { s.stream.AddWriteWait(d) }

// eventTokens records the tokens one token-bearing event carried, when
// the upstream reports them per event.
func (s *sink) eventTokens(n int64) { s.stream.EventTokens(n) }

// usage is the token usage an upstream reported; -1 means not reported.
type usage struct {
	input, output int64
}

var noUsage = usage{input: -1, output: -1}

// responseEnd is how a response ended, as its reader saw it: what the
// sink records.
type responseEnd struct {
	// stream is the stream's end, for a response that counts as one.
	stream metrics.StreamEnd
	// usage is the tokens to count: the reported usage, the output of an
	// event stream read without any counted as its token-bearing events;
	// -1 when unknown. reported is the usage as the upstream reported it,
	// -1 each when it did not: all the GenAI conventions' token usage may
	// carry.
	usage, reported usage
	// engine is the upstream's own timing of the response, where reported.
	engine engineTimes
	// model is the model the response named, "" when it named none.
	model string
}

// newResponseEnd is the end of a response of which nothing was read.
func newResponseEnd() responseEnd {
	return responseEnd{usage: noUsage, reported: noUsage, stream: metrics.StreamEnd{TPOT: -1}}
}

// end records how the response ended, at at: its stream (outcome, TPOT,
// goodput) and its recorder entry, its tokens and the upstream's own
// timing, and its span's attributes and notable gaps. Whoever owns the
// span ends it.
func (s *sink) end(e responseEnd, at time.Time) {
	// The tokens first: a stream counted as ended has its tokens counted.
	s.metrics.Tokens(s.labels, e.usage.input, e.usage.output)
	s.metrics.ReportedTokens(s.labels, s.upstream, e.reported.input, e.reported.output)
	s.metrics.Engine(s.labels, e.engine.tpot, e.engine.ttft, e.stream.TPOT)
	if s.stream != nil {
		s.stream.End(e.stream)
		s.record(e, at)
	}
	if s.span != nil {
		s.endSpan(e)
	}
}

// record hands the stream that ended at at to the recorder, with its
// timeline: what was measured and the ids, never the request's or the
// response's content or headers.
func (s *sink) record(e responseEnd, at time.Time) {
	if s.recorder == nil {
		return
	}
	gaps := s.stream.Gaps()
	l := s.labels
	list, past := s.stream.Stalls()
	var stalls []recorder.Stall
	for i, st := range list {
		if i == recorder.MaxStalls {
			past += len(list) - i
			break
		}
		stalls = append(stalls, recorder.Stall{Gap: st.Gap, Length: st.Length, Cause: st.Cause, Prefill: st.Prefill})
	}
	s.recorder.Record(s.timeline, recorder.Stream{
		RequestID:    s.ids.Request,
		SessionID:    s.ids.Session,
		TraceID:      s.ids.Trace,
		Model:        l.Model,
		Endpoint:     l.Endpoint,
		Tenant:       l.Tenant,
		Class:        l.Class,
		Upstream:     s.upstream,
		Start:        s.start,
		Duration:     at.Sub(s.start),
		Outcome:      e.stream.Outcome,
		TTFT:         s.ttft,
		TPOT:         e.stream.TPOT,
		OutputTokens: e.usage.output,
		ITLObjective: s.stream.Objectives().ITL,
		Gaps:         gaps.Count,
		LongestGap:   gaps.Longest,
		LongestGapAt: gaps.LongestAt,

		ClientWriteWait: s.stream.WriteWait(),
		Stalls:          stalls,
		StallsPast:      past,
	})
	s.timeline = nil
}

// endSpan sets the span's attributes of the response: its usage and
// model and, for a stream, its outcome, timing and notable gaps.
func (s *sink) endSpan(e responseEnd) {
	attrs := make([]attribute.KeyValue, 0, 10)
	if e.model != "" {
		attrs = append(attrs, attribute.String("gen_ai.response.model", metrics.KeepID(e.model)))
	}
	if e.usage.input >= 0 {
		attrs = append(attrs, attribute.Int64("gen_ai.usage.input_tokens", e.usage.input))
	}
	if e.usage.output >= 0 {
		attrs = append(attrs, attribute.Int64("gen_ai.usage.output_tokens", e.usage.output))
	}
	if s.stream != nil {
		attrs = append(attrs, attribute.String("itlproxy.outcome", e.stream.Outcome))
		attrs = s.spanTiming(attrs, e)
		stalls, _ := s.stream.Stalls()
		s.notable.events(s.span, stalls)
	}
	s.span.SetAttributes(attrs...)
}

// spanTiming appends the stream's timing: TTFT and TPOT in seconds, as
// the metrics have them, and its gaps.
func (s *sink) spanTiming(attrs []attribute.KeyValue, e responseEnd) []attribute.KeyValue {
	if s.ttft >= 0 {
		attrs = append(attrs, attribute.Float64("itlproxy.ttft", s.ttft.Seconds()))
	}
	if e.stream.TPOT >= 0 {
		attrs = append(attrs, attribute.Float64("itlproxy.tpot", e.stream.TPOT.Seconds()))
	}
	gaps := s.stream.Gaps()
	attrs = append(attrs, attribute.Int("itlproxy.gap.count", gaps.Count))
	if gaps.Count > 0 {
		attrs = append(attrs,
			attribute.Float64("itlproxy.gap.longest", gaps.Longest.Seconds()),
			attribute.Int("itlproxy.gap.longest_index", gaps.LongestAt))
	}
	if s.notable.past > 0 {
		attrs = append(attrs, attribute.Int("itlproxy.gap.events_dropped", s.notable.past))
	}
	attrs = append(attrs, attribute.Float64("itlproxy.client_write_wait", s.stream.WriteWait().Seconds()))
	return attrs
}
