package recorder

import (
	"slices"
	"sync"
	"time"
	"unsafe"
)

// Options bound a Recorder.
type Options struct {
	// Last is how many of the streams that ended last are kept.
	Last int
	// Slowest is how many streams each ranking keeps: by longest gap, and
	// by time to first token, among those that ended within Window.
	Slowest int
	Window  time.Duration
	// MaxGaps is how many gaps of a stream are kept one by one; the rest
	// are summarized (Rest).
	MaxGaps int
}

// MaxIDBytes bounds each id and label the recorder keeps.
const MaxIDBytes = 128

// Stream is what the proxy knows of a stream when it ends.
type Stream struct {
	RequestID, SessionID, TraceID  string
	Model, Endpoint, Tenant, Class string
	// Upstream is the upstream endpoint that served the stream (its
	// address and port), "" unless the proxy balances over several.
	Upstream string
	Start    time.Time
	Duration time.Duration
	Outcome  string
	// TTFT and TPOT are -1 when unknown; OutputTokens too.
	TTFT, TPOT   time.Duration
	OutputTokens int64
	// ITLObjective is the ITL objective the stream was judged by (those in
	// force when it started), 0 for none.
	ITLObjective time.Duration
	// Gaps counts every gap; LongestGap is the longest, LongestGapAt its
	// index from 1 (the gap that ends the token at position
	// LongestGapAt+1).
	Gaps         int
	LongestGap   time.Duration
	LongestGapAt int
	// ClientWriteWait is the time the stream's token-bearing events took
	// to be written to the client, summed: long when the client read
	// slowly, which its gaps then include.
	ClientWriteWait time.Duration
	// Stalls are the stream's stalls in order, at most MaxStalls of them,
	// and StallsPast counts the others.
	Stalls     []Stall
	StallsPast int
}

// MaxStalls bounds the stalls an entry lists: a stream that stalls more
// is counted, its causes in the metrics.
const MaxStalls = 8

// Stall is one of a stream's stalls (a gap over the stall threshold), and
// its cause: "prefill" (another request's prefill on the same server,
// named by Prefill, its request id), "client" (the client did not take
// the stream's bytes) or "upstream" (the server stalled on its own).
type Stall struct {
	// Gap is the gap's index among the stream's gaps, from 1.
	Gap     int
	Length  time.Duration
	Cause   string
	Prefill string
}

// Entry is one recorded stream. It is never changed once recorded.
type Entry struct {
	Stream
	// Timeline holds the first Options.MaxGaps gaps, and Rest sums up the
	// others.
	Timeline []Gap
	Rest     Rest
}

// End is when the stream ended.
func (e *Entry) End() time.Time { return e.Start.Add(e.Duration) }

// Recorder is the record. Its methods are safe for concurrent use.
type Recorder struct {
	opts Options
	now  func() time.Time

	mu     sync.Mutex
	last   []*Entry // a ring of up to opts.Last entries
	next   int      // where the next entry goes in last
	byGap  ranking
	byTTFT ranking
}

// New returns an empty recorder bounded by o.
func New(o Options) *Recorder {
	r := &Recorder{opts: o, now: time.Now, last: make([]*Entry, 0, o.Last)}
	r.byGap = ranking{max: o.Slowest, key: func(e *Entry) time.Duration { return e.LongestGap }}
	r.byTTFT = ranking{max: o.Slowest, key: func(e *Entry) time.Duration { return e.TTFT }}
	return r
}

// Options returns the recorder's bounds.
func (r *Recorder) Options() Options { return r.opts }

// Start returns a timeline for a stream that begins, to hand to Record
// when it ends. A nil Recorder returns nil.
func (r *Recorder) Start() *Timeline {
	if r == nil {
		return nil
	}
	return &Timeline{max: r.opts.MaxGaps}
}

// Record records a stream that ended, with its timeline t (nil when it
// had no event stream), whose gaps the entry takes.
func (r *Recorder) Record(t *Timeline, s Stream) {
	if r == nil {
		return
	}
	for _, f := range []*string{&s.RequestID, &s.SessionID, &s.TraceID, &s.Model, &s.Endpoint, &s.Tenant, &s.Class, &s.Upstream, &s.Outcome} {
		if len(*f) > MaxIDBytes {
			*f = (*f)[:MaxIDBytes]
		}
	}
	if len(s.Stalls) > MaxStalls {
		s.Stalls, s.StallsPast = slices.Clone(s.Stalls[:MaxStalls]), s.StallsPast+len(s.Stalls)-MaxStalls
	}
	for i := range s.Stalls {
		if p := &s.Stalls[i].Prefill; len(*p) > MaxIDBytes {
			*p = (*p)[:MaxIDBytes]
		}
	}
	e := &Entry{Stream: s}
	if t != nil {
		e.Timeline, e.Rest = t.gaps, t.rest
		*t = Timeline{}
	}
	now := r.now()
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.opts.Last > 0 {
		if len(r.last) < r.opts.Last {
			r.last = append(r.last, e)
		} else {
			r.last[r.next] = e
		}
		r.next = (r.next + 1) % r.opts.Last
	}
	since := now.Add(-r.opts.Window)
	if e.Gaps > 0 {
		r.byGap.offer(e, since)
	}
	if e.TTFT >= 0 {
		r.byTTFT.offer(e, since)
	}
}

// ranking keeps up to max entries with the largest key among those that
// ended after a moving instant. It remembers its lowest key and its
// earliest end, so that a stream that does not rank, in a window with
// nothing to expire, is turned away without a scan.
type ranking struct {
	max     int
	key     func(*Entry) time.Duration
	entries []*Entry
	low     int       // the index of the entry with the lowest key, when full
	oldest  time.Time // the earliest end among entries
}

// offer drops the entries that ended before since, then keeps e if it
// ranks.
func (k *ranking) offer(e *Entry, since time.Time) {
	if k.oldest.Before(since) {
		k.expire(since)
	}
	if k.max <= 0 {
		return
	}
	switch {
	case len(k.entries) < k.max:
		k.entries = append(k.entries, e)
	case k.key(e) > k.key(k.entries[k.low]):
		k.entries[k.low] = e
	default:
		return
	}
	k.rescan()
}

func (k *ranking) expire(since time.Time) {
	k.entries = slices.DeleteFunc(k.entries, func(e *Entry) bool { return e.End().Before(since) })
	k.rescan()
}

// rescan finds the lowest key and the earliest end again.
func (k *ranking) rescan() {
	k.low, k.oldest = 0, time.Time{}
	for i, o := range k.entries {
		if k.key(o) < k.key(k.entries[k.low]) {
			k.low = i
		}
		if end := o.End(); i == 0 || end.Before(k.oldest) {
			k.oldest = end
		}
	}
}

// sorted returns the ranking's entries that ended after since, largest
// key first.
func (k *ranking) sorted(since time.Time) []*Entry {
	k.expire(since)
	out := slices.Clone(k.entries)
	slices.SortStableFunc(out, func(a, b *Entry) int { return cmpDesc(k.key(a), k.key(b)) })
	return out
}

func cmpDesc(a, b time.Duration) int {
	switch {
	case a > b:
		return -1
	case a < b:
		return 1
	}
	return 0
}

// MemoryBound is the most memory a recorder bounded by o holds, in bytes:
// every entry it can keep (the last ones, and the two rankings' when none
// is also among the last) at its largest, ids and timeline full. Each
// stream in flight holds one more timeline, from the pool. Go's
// allocator rounds each object up to its size class, which wastes at most
// an eighth of it: the bound adds that eighth.
func (o Options) MemoryBound() int64 {
	perEntry := int64(unsafe.Sizeof(Entry{})) + // the entry
		8*MaxIDBytes + // its ids and labels, each cut to MaxIDBytes
		int64(o.MaxGaps)*int64(unsafe.Sizeof(Gap{})) + // its timeline
		MaxStalls*(int64(unsafe.Sizeof(Stall{}))+MaxIDBytes) + // its stalls, each naming a request
		3*int64(unsafe.Sizeof(uintptr(0))) // a slot in the ring and in each ranking
	return int64(o.Last+2*o.Slowest) * perEntry * 9 / 8
}
