package recorder

import (
	"slices"
	"time"
)

// Filter selects recorded streams; its zero value selects every one.
type Filter struct {
	Model, Outcome string
	// MinGap keeps the streams whose longest gap is at least this long.
	MinGap time.Duration
	// Limit is the most streams returned; 0 for no limit.
	Limit int
}

func (f Filter) match(e *Entry) bool {
	return (f.Model == "" || e.Model == f.Model) &&
		(f.Outcome == "" || e.Outcome == f.Outcome) &&
		e.LongestGap >= f.MinGap
}

// Streams returns the recorded streams f selects, each once, the last to
// end first: the last ones and those the rankings keep.
func (r *Recorder) Streams(f Filter) []*Entry {
	if r == nil {
		return nil
	}
	r.mu.Lock()
	all := slices.Concat(r.last, r.byGap.sorted(r.since()), r.byTTFT.sorted(r.since()))
	r.mu.Unlock()
	seen := make(map[*Entry]bool, len(all))
	all = slices.DeleteFunc(all, func(e *Entry) bool {
		dup := seen[e]
		seen[e] = true
		return dup || !f.match(e)
	})
	slices.SortStableFunc(all, func(a, b *Entry) int { return b.End().Compare(a.End()) })
	if f.Limit > 0 && len(all) > f.Limit {
		all = all[:f.Limit]
	}
	return all
}

// By names a ranking.
type By int

const (
	ByLongestGap By = iota
	ByTTFT
)

// Slowest returns up to n of the slowest streams within the window by
// the ranking by, slowest first.
func (r *Recorder) Slowest(by By, n int) []*Entry {
	if r == nil {
		return nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	k := &r.byGap
	if by == ByTTFT {
		k = &r.byTTFT
	}
	out := k.sorted(r.since())
	return out[:min(n, len(out))]
}

// Get returns the recorded stream with the request id, the last to end
// when several share it, or nil.
func (r *Recorder) Get(requestID string) *Entry {
	for _, e := range r.Streams(Filter{}) {
		if e.RequestID == requestID {
			return e
		}
	}
	return nil
}

// since is the start of the rankings' window; r.mu is held.
func (r *Recorder) since() time.Time { return r.now().Add(-r.opts.Window) }
