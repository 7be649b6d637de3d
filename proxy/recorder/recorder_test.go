package recorder

import (
	"encoding/json"
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"
)

var t0 = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

// stream records a stream named id that started at start, lasted 1s and
// had the given gaps (in ms), with ttft in ms (-1: none), summed up as the
// proxy sums a stream's gaps up.
func stream(r *Recorder, id string, start time.Time, ttftMS int, gapsMS ...int) {
	tl := r.Start()
	s := Stream{RequestID: id, Model: "m", Outcome: "completed", Start: start, Duration: time.Second,
		TTFT: time.Duration(ttftMS) * time.Millisecond, TPOT: -1, OutputTokens: int64(len(gapsMS) + 1)}
	for i, g := range gapsMS {
		d := time.Duration(g) * time.Millisecond
		tl.Gap(d, 1)
		s.Gaps++
		if d > s.LongestGap {
			s.LongestGap, s.LongestGapAt = d, i+1
		}
	}
	r.Record(tl, s)
}

func ids(es []*Entry) string {
	var s []string
	for _, e := range es {
		s = append(s, e.RequestID)
	}
	return strings.Join(s, ",")
}

func TestTimelineKeepsUpToItsCapThenSummarizes(t *testing.T) {
	r := New(Options{Last: 4, MaxGaps: 3})
	stream(r, "a", t0, 100, 10, 50, 20, 70, 30)
	e := r.Get("a")
	if e == nil {
		t.Fatal("not recorded")
	}
	if e.Gaps != 5 || len(e.Timeline) != 3 || e.Timeline[1].Length != 50*time.Millisecond || e.Timeline[1].Tokens != 1 {
		t.Errorf("gaps %d, timeline %v", e.Gaps, e.Timeline)
	}
	if e.LongestGap != 70*time.Millisecond || e.LongestGapAt != 4 {
		t.Errorf("longest %v at %d, want 70ms at 4", e.LongestGap, e.LongestGapAt)
	}
	if want := (Rest{Gaps: 2, Total: 100 * time.Millisecond, Longest: 70 * time.Millisecond, Tokens: 2}); e.Rest != want {
		t.Errorf("rest %+v, want %+v", e.Rest, want)
	}
	// The next stream's timeline starts empty.
	stream(r, "b", t0, 100, 5)
	if e := r.Get("b"); e.Gaps != 1 || len(e.Timeline) != 1 || e.Rest != (Rest{}) || e.LongestGapAt != 1 {
		t.Errorf("second stream: %+v", e)
	}
}

func TestRecordingAGapAllocatesNothing(t *testing.T) {
	r := New(Options{Last: 1, MaxGaps: 16})
	tl := r.Start()
	if n := testing.AllocsPerRun(1000, func() { tl.Gap(time.Millisecond, 1) }); n != 0 {
		t.Errorf("%v allocations per gap, want 0", n)
	}
	var none *Timeline
	none.Gap(time.Second, 1) // a nil timeline records nothing, and does not panic
}

func TestLastIsARingOfTheNewest(t *testing.T) {
	r := New(Options{Last: 3})
	for i := range 5 {
		stream(r, fmt.Sprint(i), t0.Add(time.Duration(i)*time.Second), -1)
	}
	if got := ids(r.Streams(Filter{})); got != "4,3,2" {
		t.Errorf("streams %s, want 4,3,2", got)
	}
	if r.Get("1") != nil {
		t.Error("an evicted stream is still found")
	}
}

func TestRankingsKeepTheSlowestWithinTheWindow(t *testing.T) {
	r := New(Options{Last: 1, Slowest: 2, Window: time.Minute, MaxGaps: 4})
	now := t0
	r.now = func() time.Time { return now }
	stream(r, "gap300", now.Add(-10*time.Second), 50, 300)
	stream(r, "gap100", now.Add(-10*time.Second), 900, 100)
	stream(r, "gap200", now.Add(-10*time.Second), 10, 200)
	if got := ids(r.Slowest(ByLongestGap, 5)); got != "gap300,gap200" {
		t.Errorf("by gap %s, want gap300,gap200", got)
	}
	if got := ids(r.Slowest(ByTTFT, 5)); got != "gap100,gap300" {
		t.Errorf("by TTFT %s, want gap100,gap300", got)
	}
	// The last one, and both rankings, each once.
	if got := ids(r.Streams(Filter{})); len(strings.Split(got, ",")) != 3 {
		t.Errorf("streams %s: want gap300, gap200, gap100 once each", got)
	}
	now = now.Add(2 * time.Minute) // all of them out of the window
	if got := ids(r.Slowest(ByLongestGap, 5)); got != "" {
		t.Errorf("by gap after the window %q, want none", got)
	}
	stream(r, "late", now, 1, 1)
	if got := ids(r.Slowest(ByLongestGap, 5)); got != "late" {
		t.Errorf("by gap %q, want late", got)
	}
}

func TestStreamsFilter(t *testing.T) {
	r := New(Options{Last: 10, MaxGaps: 4})
	stream(r, "a", t0, 1, 10, 500)
	stream(r, "b", t0.Add(time.Second), 1, 10)
	r.Record(nil, Stream{RequestID: "c", Model: "other", Outcome: "upstream_error", Start: t0.Add(2 * time.Second), Duration: 2 * time.Second, TTFT: -1, TPOT: -1, OutputTokens: -1})
	for _, c := range []struct {
		name string
		f    Filter
		want string
	}{
		{"all", Filter{}, "c,b,a"},
		{"model", Filter{Model: "m"}, "b,a"},
		{"outcome", Filter{Outcome: "upstream_error"}, "c"},
		{"min gap", Filter{MinGap: 100 * time.Millisecond}, "a"},
		{"limit", Filter{Limit: 2}, "c,b"},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := ids(r.Streams(c.f)); got != c.want {
				t.Errorf("got %s, want %s", got, c.want)
			}
		})
	}
}

func TestEntryJSON(t *testing.T) {
	r := New(Options{Last: 4, MaxGaps: 1})
	stream(r, "a", t0, 120, 10, 30)
	r.Record(nil, Stream{RequestID: "b", Start: t0, TTFT: -1, TPOT: -1, OutputTokens: -1, ITLObjective: 50 * time.Millisecond})
	got, err := json.Marshal(r.Get("a"))
	if err != nil {
		t.Fatal(err)
	}
	want := `{"request_id":"a","model":"m","endpoint":"","tenant":"","class":"","start":"2026-01-02T03:04:05Z",` +
		`"duration_seconds":1,"outcome":"completed","ttft_seconds":0.12,"tpot_seconds":null,"output_tokens":3,` +
		`"itl_objective_seconds":null,"gaps":2,"longest_gap_seconds":0.03,"longest_gap_index":2,"client_write_wait_seconds":0,"stalls":[],"timeline":[{"seconds":0.01,"tokens":1}],` +
		`"rest":{"gaps":1,"total_seconds":0.03,"longest_seconds":0.03,"tokens":1}}`
	if string(got) != want {
		t.Errorf("got  %s\nwant %s", got, want)
	}
	r.Record(nil, Stream{RequestID: "slow reader", Start: t0, TTFT: -1, TPOT: -1, OutputTokens: -1, ClientWriteWait: 1500 * time.Millisecond})
	if got, _ := json.Marshal(r.Get("slow reader")); !strings.Contains(string(got), `"client_write_wait_seconds":1.5,`) {
		t.Errorf("a slow reader's entry %s lacks its client write wait", got)
	}
	r.Record(nil, Stream{RequestID: "stalled", Start: t0, TTFT: -1, TPOT: -1, OutputTokens: -1, Stalls: []Stall{
		{Gap: 3, Length: 600 * time.Millisecond, Cause: "prefill", Prefill: "long-prompt"},
		{Gap: 9, Length: 450 * time.Millisecond, Cause: "upstream"}}, StallsPast: 2})
	if got, _ := json.Marshal(r.Get("stalled")); !strings.Contains(string(got), `"stalls":[{"gap":3,"seconds":0.6,"cause":"prefill","request_id":"long-prompt"},`+
		`{"gap":9,"seconds":0.45,"cause":"upstream"}],"stalls_past":2,`) {
		t.Errorf("a stalled stream's entry %s lacks its stalls", got)
	}
	got, _ = json.Marshal(r.Get("b"))
	if !strings.Contains(string(got), `"ttft_seconds":null,"tpot_seconds":null,"output_tokens":null,"itl_objective_seconds":0.05`) || !strings.Contains(string(got), `"timeline":[]`) {
		t.Errorf("unknowns: %s", got)
	}
}

func TestIDsAreCut(t *testing.T) {
	r := New(Options{Last: 1})
	long := strings.Repeat("s", 10*MaxIDBytes)
	r.Record(nil, Stream{RequestID: "a", SessionID: long, TTFT: -1})
	if e := r.Get("a"); len(e.SessionID) != MaxIDBytes {
		t.Errorf("session id of %d bytes kept, want %d", len(e.SessionID), MaxIDBytes)
	}
}

// TestMemoryAtTheBound fills a recorder with the default bounds to the
// brim (every entry distinct, ids at their longest, timelines and stalls
// full, each stall naming a prefill of its own) and
// measures the heap it holds: it must stay under Options.MemoryBound,
// which docs/debugging.md states.
func TestMemoryAtTheBound(t *testing.T) {
	o := Options{Last: 1000, Slowest: 100, Window: time.Hour, MaxGaps: 256}
	id := func(i int, what string) string { return fmt.Sprintf("%s-%0*d", what, MaxIDBytes-len(what)-1, i) }
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	r := New(o)
	now := time.Now()
	r.now = func() time.Time { return now }
	// The slowest first, so that they leave the ring but stay ranked.
	for i := range o.Last + 2*o.Slowest {
		tl := r.Start()
		for g := range o.MaxGaps + 10 {
			tl.Gap(time.Duration(g+i)*time.Millisecond, 1)
		}
		// The first Slowest rank by gap, the next Slowest by TTFT; the
		// rest in neither.
		ttft, longest := time.Duration(0), time.Duration(o.MaxGaps+10+i)*time.Millisecond
		if i >= o.Slowest {
			longest = 0
		}
		if i >= o.Slowest && i < 2*o.Slowest {
			ttft = time.Hour + time.Duration(i)
		}
		stalls := make([]Stall, MaxStalls+3)
		for j := range stalls {
			stalls[j] = Stall{Gap: j + 1, Length: time.Second, Cause: "prefill", Prefill: id(i*len(stalls)+j, "prefill")}
		}
		r.Record(tl, Stream{
			RequestID: id(i, "request"), SessionID: id(i, "session"), TraceID: id(i, "trace"),
			Model: id(i, "model"), Endpoint: id(i, "endpoint"), Tenant: id(i, "tenant"), Class: id(i, "class"), Outcome: id(i, "outcome"),
			Start: now, TTFT: ttft, TPOT: time.Millisecond, Gaps: o.MaxGaps + 10, LongestGap: longest, Stalls: stalls,
		})
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	entries := len(r.Streams(Filter{}))
	if entries != o.Last+2*o.Slowest {
		t.Fatalf("%d entries kept, want %d", entries, o.Last+2*o.Slowest)
	}
	held := int64(after.HeapAlloc) - int64(before.HeapAlloc)
	bound := o.MemoryBound()
	t.Logf("%d entries of %d gaps: %d bytes held (%.1f MiB, %d per entry); bound %d (%.1f MiB)",
		entries, o.MaxGaps, held, float64(held)/(1<<20), held/int64(entries), bound, float64(bound)/(1<<20))
	if held > bound {
		t.Errorf("holds %d bytes, over its bound of %d", held, bound)
	}
	if held < bound/2 {
		t.Errorf("holds %d bytes, under half its bound of %d: the bound no longer describes it", held, bound)
	}
	runtime.KeepAlive(r)
}

// A timeline starts small and grows as its stream does, never past
// MaxGaps; the recorded entry takes its buffer as it is, without a copy.
func TestTimelineGrowsToMaxGaps(t *testing.T) {
	r := New(Options{Last: 1, MaxGaps: 300})
	tl := r.Start()
	tl.Gap(time.Millisecond, 1)
	if cap(tl.gaps) != startGaps {
		t.Fatalf("a new timeline holds %d gaps, want %d", cap(tl.gaps), startGaps)
	}
	for i := range 999 {
		tl.Gap(time.Duration(i+2)*time.Millisecond, 1)
	}
	if len(tl.gaps) != 300 || cap(tl.gaps) != 300 || tl.rest.Gaps != 700 {
		t.Fatalf("kept %d (cap %d), %d in the rest; want 300, 300, 700", len(tl.gaps), cap(tl.gaps), tl.rest.Gaps)
	}
	for i, g := range tl.gaps {
		if g.Length != time.Duration(i+1)*time.Millisecond {
			t.Fatalf("gap [%d] is %v: the growth lost or moved gaps", i, g.Length)
		}
	}
	kept := &tl.gaps[0]
	r.Record(tl, Stream{RequestID: "a", Gaps: 1000})
	if e := r.Get("a"); len(e.Timeline) != 300 || &e.Timeline[0] != kept || e.Rest.Gaps != 700 {
		t.Errorf("the entry holds %d gaps (its own copy: %v), %d in the rest; want the timeline's 300, not copied, and 700",
			len(e.Timeline), &e.Timeline[0] != kept, e.Rest.Gaps)
	}
	if tl.gaps != nil || tl.rest != (Rest{}) {
		t.Error("the timeline still holds what the entry took")
	}
}
