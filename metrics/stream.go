package metrics

import (
	"math"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus"
)

// IDs identify a request in exemplars, so that a point on a latency panel
// leads to the request, its session and its trace, and the upstream
// endpoint that served it (set by Stream.SetUpstream). Any may be empty.
// Those a client sent are kept for the stream's life and longer (the
// session tracker, the recorder, the span), so each is what KeepID makes
// of it: a bounded copy.
type IDs struct {
	Request, Session, Trace, Upstream string
}

// MaxIDBytes bounds each id kept: a session id or a user, a request id, a
// trace id.
const MaxIDBytes = 128

// KeepID returns what is kept of an id a client sent: its first MaxIDBytes
// bytes, cut at a character boundary, without invalid UTF-8 (which
// exemplars and spans refuse), in memory of its own, so that the header or
// body it was cut from, however large, is not kept with it. What is kept
// is what every output shows.
func KeepID(id string) string {
	if n := len(id); n > MaxIDBytes {
		n = MaxIDBytes
		for i := 0; i < utf8.UTFMax-1 && !utf8.RuneStart(id[n]); i++ {
			n--
		}
		id = id[:n]
	}
	if utf8.ValidString(id) {
		return strings.Clone(id)
	}
	return strings.ToValidUTF8(id, "")
}

// band is a label value for a range of positions or turns, up to upTo.
type band struct {
	upTo  int
	label string
}

var (
	// positionBands: where in the stream a gap falls, by the output position
	// of the token that ends it. Decode slows as the KV cache grows, so ITL
	// by band shows a stream degrading as it gets longer.
	positionBands = []band{{32, "1-32"}, {128, "33-128"}, {512, "129-512"}, {2048, "513-2048"}, {math.MaxInt, "2049+"}}
	// turnBands: the stream's place in its conversation (its turn), so
	// that "long conversations get slower" shows.
	turnBands = []band{{1, "1"}, {4, "2-4"}, {16, "5-16"}, {math.MaxInt, "17+"}}
)

func bandOf(bands []band, n int) int {
	i := 0
	for n > bands[i].upTo {
		i++
	}
	return i
}

// exemplarStep is how much longer than a stream's longest gap so far a gap
// must be to carry the exemplar: the native buckets' growth factor, so
// that each exemplar is at least a bucket above the stream's last.
const exemplarStep = nativeFactor

// Per-stream figures need enough gaps to mean something.
const (
	minGapsForMedian = 5
	minGapsForSpread = 20
)

// Stream records one stream. Its observers, counters and objectives are
// resolved once, when the stream starts, so that the per-event calls do
// no label lookups and no allocation.
type Stream struct {
	m      *Metrics
	labels Labels
	obj    Objectives
	ids    IDs
	turn   int // the stream's turn in its conversation, 0 when unknown
	ttft   prometheus.Observer
	itl    prometheus.Observer
	active prometheus.Gauge
	slo    *sloCounters // the objectives' counters of the stream's model, class and tenant

	// Load bands: the model's streams in flight, and the by-load
	// histograms; ttftBand is the band when the stream started.
	load     *modelLoad
	byLoad   *loadObservers
	ttftBand int
	ttftSeen time.Duration // the stream's TTFT, -1 before its first token

	exemplar prometheus.Labels // built at the first observation

	tokensPerEvent prometheus.Observer
	fwd            forwarding
	// up is the upstream endpoint the stream was sent to, nil unless the
	// proxy balances over several (SetUpstream).
	up *streamUpstream
	// gen observes the GenAI families, nil until their first use or
	// without them (genai.go).
	gen *genAIStream

	// The stream's gaps: how many, the longest and its index (from 1),
	// what the histograms, the span and the stream recorder all read.
	gaps     int
	maxGap   time.Duration
	maxGapAt int
	band     int                 // position band of the last gap
	position prometheus.Observer // ITL observer of that band
	sketch   gapSketch
	// stall is what its stalls are judged from, and the stalls
	// (stallcause.go).
	stall stalls
}

// StartStream counts a stream in flight until End; its turn is the
// session tracker's count, for a stream with a session id.
func (m *Metrics) StartStream(l Labels, ids IDs) *Stream { return m.StartTurn(l, ids, 0) }

// StartTurn counts a stream in flight until End. turn is its place in its
// conversation as its request numbers it (1 for the first), 0 when the
// request does not say: then, for a stream with a session id, the session
// tracker's count of the session's streams through this proxy.
func (m *Metrics) StartTurn(l Labels, ids IDs, turn int) *Stream {
	s := &Stream{
		m:        m,
		labels:   l,
		ids:      ids,
		ttft:     m.ttft.WithLabelValues(l.Model, l.Endpoint),
		ttftSeen: -1,
		itl:      m.itl.WithLabelValues(l.Model, l.Endpoint),
		active:   m.active.WithLabelValues(l.Model, l.Endpoint),
		position: m.itlByPosition.WithLabelValues(l.Model, l.Endpoint, positionBands[0].label),

		tokensPerEvent: m.tokensPerEvent.WithLabelValues(l.Model, l.Endpoint),
		fwd:            forwarding{delay: m.eventDelay.WithLabelValues(l.Endpoint), write: m.clientWrite.WithLabelValues(l.Endpoint)},
	}
	s.slo = m.sloCountersOf(l)
	s.obj = s.slo.obj
	s.load, s.byLoad = m.loadOf(l.Model, l.Endpoint)
	s.ttftBand = loadBand(s.load.streams.Add(1))
	s.turn = max(turn, 0)
	if ids.Session != "" {
		s.turn = m.sessions.begin(ids.Session, turn, time.Now())
	}
	s.active.Inc()
	return s
}

// SetRequestID replaces the request id exemplars carry; call it before the
// first token.
func (s *Stream) SetRequestID(id string) { s.ids.Request = id }

// Objectives are the objectives the stream is judged by: those of its
// model and class in force when it started.
func (s *Stream) Objectives() Objectives { return s.obj }

// observe records v on o, with the stream's exemplar when withExemplar.
func (s *Stream) observe(o prometheus.Observer, v float64, withExemplar bool) {
	if withExemplar {
		if s.exemplar == nil {
			s.exemplar = exemplarLabels(s.ids)
		}
		if eo, ok := o.(prometheus.ExemplarObserver); ok && len(s.exemplar) > 0 {
			eo.ObserveWithExemplar(v, s.exemplar)
			return
		}
	}
	o.Observe(v)
}

// FirstToken records the stream's time to first token, the token
// arriving now; see FirstTokenAt.
func (s *Stream) FirstToken(d time.Duration) { s.FirstTokenAt(d, time.Now()) }

// FirstTokenAt records the stream's time to first token, d, the token
// having arrived at at (the stamp of the read that completed it): its
// server then knows the stream's request has been answered.
func (s *Stream) FirstTokenAt(d time.Duration, at time.Time) {
	s.stall.writes.reset(at)
	if v := s.stall.server; v != nil {
		v.leave(s, at)
	}
	s.ttftSeen = d
	s.observe(s.ttft, d.Seconds(), true)
	_, ttft := s.byLoad.at(s.ttftBand)
	ttft.Observe(d.Seconds())
	s.slo.judge(kindTTFT, d)
	if s.up != nil {
		s.up.ttft.Observe(d.Seconds())
	}
	if g := s.genAIObservers(); g != nil {
		s.observe(g.ttft, d.Seconds(), true)
	}
	if s.turn > 0 {
		s.m.ttftByTurn.WithLabelValues(s.labels.Model, turnBands[bandOf(turnBands, s.turn)].label).Observe(d.Seconds())
	}
}

// Gap records one gap between consecutive token-bearing events, ended
// now, in the load band of the model's streams in flight now; see
// GapInFlight.
func (s *Stream) Gap(d time.Duration, tokens int64) Notable {
	return s.GapInFlight(d, tokens, s.InFlight(), time.Now())
}

// InFlight is the number of streams of the stream's model in flight
// through this proxy now, the stream itself included: what a gap's load
// band is taken from, read when the gap ends.
func (s *Stream) InFlight() int64 { return s.load.streams.Load() }

// Notable says whether a gap is one an operator looks for: a stall (over
// the stall threshold), or over the ITL objective of the stream's model
// and class.
type Notable struct{ Stall, OverObjective bool }

// GapInFlight records one gap between consecutive token-bearing events,
// ended at at (the stamp of the read that completed the event that ends
// it); tokens is the number of tokens that event carries, when the
// upstream reports it per event, else 0; inFlight is the model's streams
// in flight when the gap ended (InFlight, read then), whose band the gap
// is counted in. It says whether the gap is notable. A stall is counted by
// its cause (stallcause.go), once that is decided.
//
// The first gap carries the exemplar, and so does every gap over
// exemplarStep times the longest before it: a spike is always a stream's
// longest gap so far, so every spike leads to its request. A gap barely
// longer than the longest so far (a smooth stream's jitter) lands in the
// same native bucket as the one that already carries the request, and an
// exemplar costs a few microseconds under the histogram's lock: a smooth
// stream sets one or two, not one per new maximum.
func (s *Stream) GapInFlight(d time.Duration, tokens, inFlight int64, at time.Time) Notable {
	s.gaps++
	exemplar := s.gaps == 1 || float64(d) > exemplarStep*float64(s.maxGap)
	s.observe(s.itl, d.Seconds(), exemplar)
	if g := s.genAIObservers(); g != nil {
		s.observe(g.itl, d.Seconds(), exemplar)
	}
	if tokens > 0 {
		s.byLoad.perTokenObserver().Observe(d.Seconds() / float64(tokens))
	}
	if d > s.maxGap {
		s.maxGap, s.maxGapAt = d, s.gaps
	}
	// The gap ends the token at position gaps+1.
	if pos := s.gaps + 1; pos > positionBands[s.band].upTo {
		s.band = bandOf(positionBands, pos)
		s.position = s.m.itlByPosition.WithLabelValues(s.labels.Model, s.labels.Endpoint, positionBands[s.band].label)
	}
	s.position.Observe(d.Seconds())
	itl, _ := s.byLoad.at(loadBand(inFlight))
	itl.Observe(d.Seconds())
	if s.up != nil {
		s.up.itl.Observe(d.Seconds())
	}
	s.sketch.add(d)
	n := Notable{OverObjective: s.slo.judge(kindITL, d)}
	if s.stall.undecided > 0 {
		s.decide(at, false)
	}
	if s.m.stallThreshold > 0 && d > s.m.stallThreshold {
		s.stalled(s.gaps, d, at)
		n.Stall = true
	}
	s.stall.writes.reset(at)
	return n
}

// GapSummary is a stream's gaps so far: how many, the longest, and the
// longest's index from 1 (the gap that ends the token at position
// LongestAt+1).
type GapSummary struct {
	Count     int
	Longest   time.Duration
	LongestAt int
}

// Gaps sums up the stream's gaps so far.
func (s *Stream) Gaps() GapSummary {
	return GapSummary{Count: s.gaps, Longest: s.maxGap, LongestAt: s.maxGapAt}
}

// EventTokens records how many tokens one token-bearing event carried,
// when the upstream reports it per event.
func (s *Stream) EventTokens(n int64) { s.tokensPerEvent.Observe(float64(n)) }

// StreamEnd is how a stream ended.
type StreamEnd struct {
	Outcome string
	// TPOT is the stream's time per output token, -1 when unknown.
	TPOT time.Duration
	// AverageTokens is the stream's output tokens per token-bearing event,
	// from its final usage, for streams whose events did not report their
	// own counts (0: they did, or it is unknown). It is observed once per
	// event, so that tokens per event counts every event either way.
	AverageTokens float64
	// Events is the number of token-bearing events.
	Events int64
	// OutputTokens is the stream's output tokens (the usage reported, else
	// its token-bearing events), -1 when unknown: the goodput of a stream
	// that met its objectives.
	OutputTokens int64
	// InputTokens is the stream's input tokens as the upstream reported
	// them, cached ones included, -1 when it reported none: the context
	// band its TPOT is observed in.
	InputTokens int64
}

// End records how the stream ended and, when known, its time per output
// token and tokens per event, and the stream's shape: its longest gap, the
// spread of its gaps, and how its median gap compares with its session's.
// The stream is counted as ended last, so that a scrape that sees it
// counted sees all of it.
func (s *Stream) End(e StreamEnd) {
	if v := s.stall.server; v != nil {
		v.leave(s, time.Time{})
	}
	if s.stall.undecided > 0 {
		s.decide(time.Now(), true)
	}
	s.active.Dec()
	s.load.streams.Add(-1)
	m, l := s.m, s.labels
	if e.TPOT >= 0 {
		m.tpot.WithLabelValues(l.Model, l.Endpoint).Observe(e.TPOT.Seconds())
		if m.genAI != nil {
			m.genAI.tpot.WithLabelValues(l.Model, l.Endpoint, s.ids.Upstream).Observe(e.TPOT.Seconds())
		}
		m.tpotByContext.WithLabelValues(l.Model, l.Endpoint, contextBand(e.InputTokens)).Observe(e.TPOT.Seconds())
		s.slo.judge(kindTPOT, e.TPOT)
	}
	if s.gaps > 0 {
		s.slo.judge(kindMaxGap, s.maxGap)
	}
	s.judge(e)
	if e.AverageTokens > 0 {
		for range e.Events {
			s.tokensPerEvent.Observe(e.AverageTokens)
		}
	}
	if s.gaps > 0 {
		m.maxGap.WithLabelValues(l.Model, l.Endpoint).Observe(s.maxGap.Seconds())
	}
	if s.gaps >= minGapsForSpread {
		if p50 := s.sketch.quantile(0.5); p50 > 0 {
			m.gapSpread.WithLabelValues(l.Model, l.Endpoint).Observe(float64(s.sketch.quantile(0.99)) / float64(p50))
		}
	}
	s.endTurn()
	if s.up != nil {
		m.up.streams.WithLabelValues(l.Model, s.up.label, e.Outcome).Inc()
		s.leaveUpstream()
	}
	m.streams.WithLabelValues(l.Model, l.Endpoint, e.Outcome, l.Tenant).Inc()
}

// endTurn observes the median gap of a stream whose turn is known, and
// compares a session's stream with its session's baseline.
func (s *Stream) endTurn() {
	if s.turn == 0 {
		return
	}
	m, model := s.m, s.labels.Model
	var median time.Duration
	hasMedian := s.gaps >= minGapsForMedian
	if hasMedian {
		median = s.sketch.quantile(0.5)
		m.medianGapByTurn.WithLabelValues(model, turnBands[bandOf(turnBands, s.turn)].label).Observe(median.Seconds())
	}
	if s.ids.Session == "" {
		return
	}
	v := m.sessions.end(s.ids.Session, s.turn, median, hasMedian, m.degradeFactor, time.Now())
	switch {
	case v.judged:
		m.sessionRatio.WithLabelValues(model).Observe(v.ratio)
	case v.unjudged:
		m.sessionUnjudged.WithLabelValues(model).Inc()
	}
	if v.degraded {
		m.sessionsDegraded.WithLabelValues(model).Inc()
	}
}

// judge counts the stream's goodput verdict: streams that ended by any
// outcome but client_canceled, where an objective judges them.
func (s *Stream) judge(e StreamEnd) {
	if s.slo.met == nil || e.Outcome == OutcomeClientCanceled {
		return
	}
	if !s.obj.verdict(e.Outcome, s.ttftSeen, e.TPOT, s.maxGap) {
		s.slo.missed.Inc()
		return
	}
	s.slo.met.Inc()
	if e.OutputTokens > 0 {
		s.slo.tokens.Add(float64(e.OutputTokens))
	}
}

// exemplarLabels returns the exemplar of ids, within OpenMetrics' bound of
// 128 runes for all names and values together: the trace id (32 hex
// digits) whole, the request id up to 48 runes, the session id with what
// is left. Invalid UTF-8 is dropped.
func exemplarLabels(ids IDs) prometheus.Labels {
	l := prometheus.Labels{}
	budget := prometheus.ExemplarMaxRunes
	for _, f := range []struct {
		name, value string
		max         int
	}{
		{"trace_id", ids.Trace, 32},
		{"request_id", ids.Request, 48},
		{"upstream", ids.Upstream, 47}, // an IPv6 address and port, whole
		{"session_id", ids.Session, prometheus.ExemplarMaxRunes},
	} {
		v := strings.ToValidUTF8(f.value, "")
		room := min(f.max, budget-utf8.RuneCountInString(f.name))
		if v == "" || room <= 0 {
			continue
		}
		v = firstRunes(v, room)
		l[f.name] = v
		budget -= utf8.RuneCountInString(f.name) + utf8.RuneCountInString(v)
	}
	return l
}

// firstRunes is s up to its first n runes: a slice of s, where converting
// it to runes would cost four bytes a byte of it.
func firstRunes(s string, n int) string {
	for i := range s {
		if n == 0 {
			return s[:i]
		}
		n--
	}
	return s
}
