package metrics

import (
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"
	"unicode/utf8"
	"unsafe"

	"github.com/prometheus/client_golang/prometheus"
)

func TestSessionBaselineAndDegradation(t *testing.T) {
	tr := newSessionTracker(100, time.Hour)
	now := time.Unix(0, 0)
	type step struct {
		median   time.Duration
		ratio    float64
		ok       bool
		degraded bool
	}
	steps := []step{
		{median: 20 * ms},                                             // turn 1: the baseline starts, nothing to compare
		{median: 30 * ms, ratio: 1.5, ok: true},                       // vs 20
		{median: 10 * ms, ratio: 10.0 / 25, ok: true},                 // vs median(20, 30) = 25
		{median: 45 * ms, ratio: 45.0 / 20, ok: true, degraded: true}, // vs median(20, 30, 10) = 20: over 2x
		{median: 60 * ms, ratio: 3, ok: true},                         // over again, counted once only
		{median: 20 * ms, ratio: 1, ok: true},                         // the baseline stays the first three
	}
	for i, st := range steps {
		turn := tr.begin("s1", 0, now)
		if turn != i+1 {
			t.Fatalf("turn %d, want %d", turn, i+1)
		}
		v := tr.end("s1", turn, st.median, true, 2, now)
		if v.judged != st.ok || v.unjudged || v.degraded != st.degraded || v.judged && (v.ratio < st.ratio-1e-9 || v.ratio > st.ratio+1e-9) {
			t.Errorf("turn %d: %+v, want ratio %v judged %v degraded %v", i+1, v, st.ratio, st.ok, st.degraded)
		}
	}
	// Idle past the TTL: a new session under the same id.
	if turn := tr.begin("s1", 0, now.Add(2*time.Hour)); turn != 1 {
		t.Errorf("after the TTL, turn %d, want 1", turn)
	}
}

// TestSessionBaselineFromRequestTurns: with turns numbered by the
// requests, a proxy judges a session's stream only when it served every
// baseline turn before it (1 to 3), and says so when it did not; a
// baseline turn too short for a median is served, and leaves the
// baseline to the others.
func TestSessionBaselineFromRequestTurns(t *testing.T) {
	now := time.Unix(0, 0)
	for _, tc := range []struct {
		name   string
		served []int // the turns this proxy serves, in order
		short  int   // a served turn without a median (too few gaps), 0: none
		// judged and unjudged: the turns compared with the baseline, and
		// those that could have been and were not.
		judged, unjudged []int
	}{
		{name: "every turn", served: []int{1, 2, 3, 4, 5}, judged: []int{2, 3, 4, 5}},
		{name: "every third turn", served: []int{3, 6, 9, 12}, unjudged: []int{3, 6, 9, 12}},
		{name: "from turn 2", served: []int{2, 4, 5}, unjudged: []int{2, 4, 5}},
		{name: "turn 3 elsewhere", served: []int{1, 2, 4, 5}, judged: []int{2}, unjudged: []int{4, 5}},
		{name: "a short baseline turn", served: []int{1, 2, 3, 4}, short: 2, judged: []int{3, 4}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tr := newSessionTracker(10, time.Hour)
			var judged, unjudged []int
			for _, turn := range tc.served {
				if got := tr.begin("s", turn, now); got != turn {
					t.Fatalf("begin numbers turn %d as %d", turn, got)
				}
				v := tr.end("s", turn, 20*ms, turn != tc.short, 2, now)
				if v.judged {
					judged = append(judged, turn)
				}
				if v.unjudged {
					unjudged = append(unjudged, turn)
				}
			}
			if fmt.Sprint(judged) != fmt.Sprint(tc.judged) || fmt.Sprint(unjudged) != fmt.Sprint(tc.unjudged) {
				t.Errorf("judged %v, unjudged %v; want %v, %v", judged, unjudged, tc.judged, tc.unjudged)
			}
		})
	}
}

// TestSessionTrackerFlood sends 100,000 distinct session ids: the tracker
// keeps at most its bound, and its memory stays that of the bound.
func TestSessionTrackerFlood(t *testing.T) {
	const bound = 1000
	tr := newSessionTracker(bound, time.Hour)
	now := time.Now()
	heap := func() uint64 {
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		return ms.HeapAlloc
	}
	fill := func(from, n int) {
		for i := from; i < from+n; i++ {
			id := fmt.Sprintf("session-%09d-%s", i, strings.Repeat("x", 40))
			turn := tr.begin(id, 0, now)
			tr.end(id, turn, 10*ms, true, 2, now)
		}
	}
	fill(0, bound)
	atBound := heap()
	fill(bound, 100_000)
	after := heap()
	live, evicted := tr.size(now)
	if live != bound || evicted != 100_000 {
		t.Errorf("live %d evicted %d, want %d and 100000", live, evicted, bound)
	}
	// 100x more ids than the bound must not grow the heap by more than a
	// fraction of what the bound's sessions take.
	if after > atBound+atBound/4 && after-atBound > 256<<10 {
		t.Errorf("heap grew from %d to %d bytes under the flood", atBound, after)
	}
	t.Logf("heap %d bytes at the bound, %d after 100,000 more ids (%d live sessions)", atBound, after, live)

	// Over-long ids are cut, so one session costs a bounded key.
	long := strings.Repeat("y", 10_000)
	tr.begin(long, 0, now)
	if _, ok := tr.byID[long[:MaxIDBytes]]; !ok {
		t.Error("a long id is not kept under its first 128 bytes")
	}
}

// TestSessionMemoryBound: sessions under hostile ids (60 KB each, every
// one distinct, half of them invalid UTF-8 cut inside a character) cost
// at most sessionBytes each, what the documents promise: the tracker keeps
// its own copy of each id's first MaxIDBytes, nothing of the id it was
// given.
func TestSessionMemoryBound(t *testing.T) {
	const n = 2000
	heap := func() uint64 {
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		return ms.HeapAlloc
	}
	tr := newSessionTracker(n, time.Hour)
	now := time.Now()
	before := heap()
	for i := range n {
		id := fmt.Sprintf("%06d", i) + strings.Repeat("é", 30_000)
		if i%2 == 1 {
			id = fmt.Sprintf("%06d\xff", i) + strings.Repeat("é", 30_000)
		}
		turn := tr.begin(id, 0, now)
		tr.end(id, turn, 10*ms, true, 2, now)
	}
	per := (heap() - before) / n
	if live, _ := tr.size(now); live != n {
		t.Fatalf("%d sessions tracked, want %d", live, n)
	}
	if per > sessionBytes {
		t.Errorf("%d bytes a session, over the %d documented", per, sessionBytes)
	}
	for id := range tr.byID {
		if len(id) > MaxIDBytes || !utf8.ValidString(id) {
			t.Fatalf("kept id of %d bytes, valid UTF-8 %v", len(id), utf8.ValidString(id))
		}
	}
	t.Logf("%d bytes a session with 60 KB ids", per)
	runtime.KeepAlive(tr)
}

// TestSessionsSweptOnTheirOwn: sessions idle past the TTL are forgotten
// though their ids never come back, at the next stream of any session or
// at a scrape.
func TestSessionsSweptOnTheirOwn(t *testing.T) {
	tr := newSessionTracker(100, time.Minute)
	t0 := time.Unix(0, 0)
	for i := range 50 {
		tr.begin(fmt.Sprint("old-", i), 0, t0)
	}
	tr.begin("recent", 0, t0.Add(50*time.Second))
	if live, _ := tr.size(t0.Add(59 * time.Second)); live != 51 {
		t.Fatalf("%d sessions before the TTL, want 51", live)
	}
	if live, _ := tr.size(t0.Add(61 * time.Second)); live != 1 {
		t.Errorf("%d sessions once 50 of them expired, want 1", live)
	}
	tr.begin("other", 0, t0.Add(200*time.Second))
	if _, ok := tr.byID["recent"]; ok || len(tr.byID) != 1 || tr.lru.Len() != 1 {
		t.Errorf("after another session's stream, %d sessions (recent kept %v), want only the new one", len(tr.byID), ok)
	}
	if _, evicted := tr.size(t0.Add(200 * time.Second)); evicted != 0 {
		t.Errorf("%d expired sessions counted as evicted", evicted)
	}
}

func TestKeepID(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"abc", "abc"},
		{strings.Repeat("a", 200), strings.Repeat("a", MaxIDBytes)},
		// 127 bytes, then a two-byte character that would end past 128.
		{strings.Repeat("a", 127) + "é" + "z", strings.Repeat("a", 127)},
		{strings.Repeat("a", 126) + "é" + "z", strings.Repeat("a", 126) + "é"},
		{"a\xffb", "ab"},
		{strings.Repeat("\x80", 300), ""},
		{"sess\xff\xfe-1", "sess-1"},
		{strings.Repeat("日本", 40), strings.Repeat("日本", 21)}, // 3-byte runes: 126 of 128 bytes
	} {
		got := KeepID(c.in)
		if got != c.want {
			t.Errorf("KeepID(%.20q...) = %q, want %q", c.in, got, c.want)
		}
		if got != "" && unsafe.StringData(got) == unsafe.StringData(c.in) {
			t.Errorf("KeepID(%.20q...) shares the memory of the id it was given", c.in)
		}
	}
}

func TestStreamShape(t *testing.T) {
	m, reg := newTestMetrics(t, Options{MaxModels: 4, SessionMax: 10, SessionTTL: time.Hour, DegradeFactor: 2})
	l := m.RequestLabels("m", "chat_completions", "", "")

	// 40 gaps end tokens 2..41: 31 in band 1-32, 9 in 33-128. Gaps are
	// steady at 10ms with two at 100ms: max 100ms, p99/p50 = 10.
	s := m.StartStream(l, IDs{Request: "r1", Session: "sess"})
	s.FirstToken(100 * ms)
	for i := range 40 {
		g := 10 * ms
		if i == 10 || i == 20 {
			g = 100 * ms
		}
		s.Gap(g, 0)
	}
	s.End(StreamEnd{Outcome: OutcomeCompleted, TPOT: -1})

	// The session's second stream is 1.5 times as slow: not degraded.
	s2 := m.StartStream(l, IDs{Request: "r2", Session: "sess"})
	s2.FirstToken(300 * ms)
	for range 10 {
		s2.Gap(15*ms, 0)
	}
	s2.End(StreamEnd{Outcome: OutcomeCompleted, TPOT: -1})
	// The third's median, 50ms, is 4 times the baseline (the median of 10
	// and 15ms): degraded.
	s3 := m.StartStream(l, IDs{Request: "r3", Session: "sess"})
	s3.FirstToken(300 * ms)
	for range 10 {
		s3.Gap(50*ms, 0)
	}
	s3.End(StreamEnd{Outcome: OutcomeCompleted, TPOT: -1})

	fs := gather(t, reg)
	for _, c := range []struct {
		name   string
		labels []string
		count  uint64
		sum    float64
	}{
		// Positions 2-32 of the first stream (29 x 10ms, 2 x 100ms) and all
		// 10 gaps of the second and third; positions 33-41 of the first.
		{"itlproxy_inter_token_latency_by_position_seconds", []string{"position", "1-32"}, 51, 0.49 + 0.15 + 0.5},
		{"itlproxy_inter_token_latency_by_position_seconds", []string{"position", "33-128"}, 9, 0.09},
		{"itlproxy_stream_max_gap_seconds", nil, 3, 0.1 + 0.015 + 0.05},
		{"itlproxy_time_to_first_token_by_turn_seconds", []string{"turn", "1"}, 1, 0.1},
		{"itlproxy_time_to_first_token_by_turn_seconds", []string{"turn", "2-4"}, 2, 0.6},
		{"itlproxy_stream_median_gap_by_turn_seconds", []string{"turn", "2-4"}, 2, 0},
	} {
		n, sum := fs.Histogram(c.name, c.labels...)
		if n != c.count || c.sum != 0 && (sum < c.sum-1e-9 || sum > c.sum+1e-9) {
			t.Errorf("%s%v: count %d sum %v, want %d and %v", c.name, c.labels, n, sum, c.count, c.sum)
		}
	}
	// Spread: only the first stream has 20 gaps; p99 100ms / p50 10ms,
	// each within a bucket's 12.5%.
	n, sum := fs.Histogram("itlproxy_stream_gap_spread_ratio")
	if n != 1 || sum < 10/1.13/1.13 || sum > 10*1.13*1.13 {
		t.Errorf("spread count %d value %v, want 1 and about 10", n, sum)
	}
	n, sum = fs.Histogram("itlproxy_session_gap_ratio", "model", "m")
	if n != 2 || sum < (1.5+4)*0.85 || sum > (1.5+4)*1.15 {
		t.Errorf("session ratio count %d sum %v, want 2 ratios of about 1.5 and 4", n, sum)
	}
	if v := fs.Value("itlproxy_sessions_degraded_total", "model", "m"); v != 1 {
		t.Errorf("degraded sessions %v, want 1", v)
	}
	if v := fs.Value("itlproxy_sessions_tracked"); v != 1 {
		t.Errorf("sessions tracked %v, want 1", v)
	}
}

func TestExemplarLabels(t *testing.T) {
	cases := []struct {
		name string
		ids  IDs
		want prometheus.Labels
	}{
		{"all", IDs{Request: "req-1", Session: "s-1", Trace: "4bf92f3577b34da6a3ce929d0e0e4736"},
			prometheus.Labels{"request_id": "req-1", "session_id": "s-1", "trace_id": "4bf92f3577b34da6a3ce929d0e0e4736"}},
		{"request only", IDs{Request: "req-1"}, prometheus.Labels{"request_id": "req-1"}},
		{"invalid UTF-8 dropped", IDs{Request: "a\xffb"}, prometheus.Labels{"request_id": "ab"}},
	}
	for _, c := range cases {
		got := exemplarLabels(c.ids)
		if fmt.Sprint(got) != fmt.Sprint(c.want) {
			t.Errorf("%s: %v, want %v", c.name, got, c.want)
		}
	}
	// Whatever the ids, the exemplar fits OpenMetrics' 128 runes, and
	// client_golang accepts it (it panics on one that does not fit).
	long := IDs{Request: strings.Repeat("r", 300), Session: strings.Repeat("é", 300), Trace: strings.Repeat("a", 32)}
	l := exemplarLabels(long)
	runes := 0
	for k, v := range l {
		runes += utf8.RuneCountInString(k) + utf8.RuneCountInString(v)
	}
	if runes > prometheus.ExemplarMaxRunes || l["trace_id"] == "" || l["request_id"] == "" || l["session_id"] == "" {
		t.Errorf("long ids: %d runes, %v", runes, l)
	}
	m, _ := newTestMetrics(t, Options{MaxModels: 1, SessionMax: 1, SessionTTL: time.Hour, DegradeFactor: 2})
	s := m.StartStream(m.RequestLabels("m", "completions", "", ""), long)
	s.FirstToken(ms)
	s.Gap(ms, 0)
}

// TestTurnFromRequest: a stream whose request numbers its turn is in that
// turn's band whether or not it carries a session id; a session's streams
// are compared with its baseline only when the baseline turns were
// served here, and counted unjudged otherwise.
func TestTurnFromRequest(t *testing.T) {
	m, reg := newTestMetrics(t, Options{MaxModels: 4, SessionMax: 10, SessionTTL: time.Hour, DegradeFactor: 2})
	l := m.RequestLabels("m", "chat_completions", "", "")
	stream := func(session string, turn int) {
		s := m.StartTurn(l, IDs{Session: session}, turn)
		s.FirstToken(100 * ms)
		for range 6 {
			s.Gap(10*ms, 0)
		}
		s.End(StreamEnd{Outcome: OutcomeCompleted, TPOT: -1})
	}
	stream("", 17)         // no session: 17+, never compared
	stream("", 1)          // 1
	stream("elsewhere", 5) // a session whose first turns another proxy served
	stream("elsewhere", 6) // still unjudged
	stream("here", 1)      // the baseline
	stream("here", 2)      // compared with turn 1
	stream("tracked", 0)   // no turn in the request: the tracker's 1
	stream("tracked", 0)   // and 2, compared

	fs := gather(t, reg)
	for band, want := range map[string]uint64{"1": 3, "2-4": 2, "5-16": 2, "17+": 1} {
		if n, _ := fs.Histogram("itlproxy_time_to_first_token_by_turn_seconds", "turn", band); n != want {
			t.Errorf("TTFT by turn %s: %d, want %d", band, n, want)
		}
		if n, _ := fs.Histogram("itlproxy_stream_median_gap_by_turn_seconds", "turn", band); n != want {
			t.Errorf("median gap by turn %s: %d, want %d", band, n, want)
		}
	}
	if n, _ := fs.Histogram("itlproxy_session_gap_ratio", "model", "m"); n != 2 {
		t.Errorf("%d session ratios, want 2 (here's turn 2, tracked's second)", n)
	}
	if v := fs.Value("itlproxy_session_streams_unjudged_total", "model", "m"); v != 2 {
		t.Errorf("%v streams unjudged, want 2", v)
	}
}
