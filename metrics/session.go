package metrics

import (
	"container/list"
	"sync"
	"time"
)

// baselineTurns is how many of a session's first streams make its
// baseline: later streams are compared with the median of their medians.
const baselineTurns = 3

// maxSessionIDBytes bounds the key a session costs in memory.
const maxSessionIDBytes = 128

// sessionTracker remembers, for each live session, how many streams it has
// started and the median gaps of its first streams. It is bounded twice:
// at most max sessions (the least recently seen is dropped first), and a
// session idle for ttl starts afresh. A flood of distinct session ids costs
// at most max entries of about 200 bytes.
type sessionTracker struct {
	max int
	ttl time.Duration

	mu      sync.Mutex
	lru     *list.List // of *session, most recently seen in front
	byID    map[string]*list.Element
	evicted uint64 // sessions dropped to stay within max
}

type session struct {
	id       string
	lastSeen time.Time
	turns    int                          // streams started
	baseline [baselineTurns]time.Duration // medians of the first streams to end
	nBase    int
	degraded bool // already counted as degraded
}

func newSessionTracker(max int, ttl time.Duration) *sessionTracker {
	return &sessionTracker{max: max, ttl: ttl, lru: list.New(), byID: make(map[string]*list.Element)}
}

// get returns the live session id, creating it (and evicting the least
// recently seen beyond max) as needed. Called with mu held.
func (t *sessionTracker) get(id string, now time.Time) *session {
	if len(id) > maxSessionIDBytes {
		id = id[:maxSessionIDBytes]
	}
	if e, ok := t.byID[id]; ok {
		s := e.Value.(*session)
		if now.Sub(s.lastSeen) <= t.ttl {
			s.lastSeen = now
			t.lru.MoveToFront(e)
			return s
		}
		t.lru.Remove(e) // expired: a new session under an old id
		delete(t.byID, id)
	}
	for t.lru.Len() >= t.max {
		oldest := t.lru.Back()
		t.lru.Remove(oldest)
		delete(t.byID, oldest.Value.(*session).id)
		t.evicted++
	}
	s := &session{id: id, lastSeen: now}
	t.byID[id] = t.lru.PushFront(s)
	return s
}

// begin counts a new stream of the session and returns its turn: 1 for
// the session's first stream.
func (t *sessionTracker) begin(id string, now time.Time) int {
	t.mu.Lock()
	defer t.mu.Unlock()
	s := t.get(id, now)
	s.turns++
	return s.turns
}

// end records a stream's median gap and compares it with the session's
// baseline: the median of the medians of its first streams to end. It
// returns the ratio (ok is false for the session's first stream, which has
// nothing to compare with) and whether this stream is the first to pass
// factor.
func (t *sessionTracker) end(id string, median time.Duration, factor float64, now time.Time) (ratio float64, ok, newlyDegraded bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	s := t.get(id, now)
	if s.nBase > 0 {
		if base := medianOf(s.baseline[:s.nBase]); base > 0 {
			ratio, ok = float64(median)/float64(base), true
			if ratio > factor && !s.degraded {
				s.degraded, newlyDegraded = true, true
			}
		}
	}
	if s.nBase < baselineTurns {
		s.baseline[s.nBase] = median
		s.nBase++
	}
	return ratio, ok, newlyDegraded
}

// size returns the number of sessions tracked and those evicted so far.
func (t *sessionTracker) size() (live int, evicted uint64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.lru.Len(), t.evicted
}

// medianOf returns the median of up to baselineTurns durations.
func medianOf(ds []time.Duration) time.Duration {
	var sorted [baselineTurns]time.Duration
	n := copy(sorted[:], ds)
	for i := 1; i < n; i++ {
		for j := i; j > 0 && sorted[j] < sorted[j-1]; j-- {
			sorted[j], sorted[j-1] = sorted[j-1], sorted[j]
		}
	}
	if n%2 == 1 {
		return sorted[n/2]
	}
	return (sorted[n/2-1] + sorted[n/2]) / 2
}
