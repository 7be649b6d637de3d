package metrics

import (
	"container/list"
	"sync"
	"time"
)

// sessionBytes bounds what one session costs the tracker, its id cut to
// MaxIDBytes included (about 300 bytes measured: TestSessionMemoryBound).
// SECURITY.md and docs/operations.md give it, and what the tracker costs
// at most in all (ITLPROXY_SESSION_MAX times it).
const sessionBytes = 400

// baselineTurns is how many of a session's first turns make its
// baseline: later streams are compared with the median of their medians.
const baselineTurns = 3

// sessionTracker remembers, for each live session, how many streams it has
// started and the median gaps of its first turns. It is bounded twice:
// at most max sessions (the least recently seen is dropped first), and a
// session idle for ttl is forgotten: swept at the next call (a stream's
// start or end, a scrape), whether its id comes back or not. A flood of
// distinct session ids costs at most max entries of sessionBytes each.
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
	turns    int // the highest turn started
	// baseline holds the median gaps of turns 1 to baselineTurns, each
	// where served says this proxy served that turn to its end, and has
	// that it had enough gaps for a median.
	baseline    [baselineTurns]time.Duration
	served, has [baselineTurns]bool
	degraded    bool // already counted as degraded
}

func newSessionTracker(max int, ttl time.Duration) *sessionTracker {
	return &sessionTracker{max: max, ttl: ttl, lru: list.New(), byID: make(map[string]*list.Element)}
}

// get returns the live session id, creating it (and evicting the least
// recently seen beyond max) as needed. Called with mu held.
func (t *sessionTracker) get(id string, now time.Time) *session {
	if len(id) > MaxIDBytes {
		id = KeepID(id) // the caller's should be already
	}
	t.sweep(now)
	if e, ok := t.byID[id]; ok {
		s := e.Value.(*session)
		if now.Sub(s.lastSeen) <= t.ttl {
			s.lastSeen = now
			t.lru.MoveToFront(e)
			return s
		}
		t.lru.Remove(e) // expired, and not yet swept: a new session under an old id
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

// begin counts a new stream of the session and returns its turn: turn
// when its request numbers it (turn > 0), else the next after the highest
// the tracker has seen, 1 for the session's first stream.
func (t *sessionTracker) begin(id string, turn int, now time.Time) int {
	t.mu.Lock()
	defer t.mu.Unlock()
	s := t.get(id, now)
	if turn <= 0 {
		turn = s.turns + 1
	}
	s.turns = max(s.turns, turn)
	return turn
}

// verdict is how a session's stream compares with the session's baseline.
type verdict struct {
	// ratio is the stream's median gap over the baseline, when judged.
	ratio  float64
	judged bool
	// unjudged: the stream could have been judged, but this proxy did not
	// serve every turn of the baseline before it (another one did, or the
	// tracker forgot the session): it has no baseline it can trust.
	unjudged bool
	// degraded: the stream is the session's first over the factor.
	degraded bool
}

// end records that a stream of turn turn ended, with its median gap when
// hasMedian, and compares that with the session's baseline: the median of
// the medians of turns 1 to baselineTurns, those before the stream's own.
// The session's first turn has nothing to compare with; a later stream is
// judged only when this proxy served every baseline turn before it (their
// medians are its baseline), and is unjudged otherwise.
func (t *sessionTracker) end(id string, turn int, median time.Duration, hasMedian bool, factor float64, now time.Time) (v verdict) {
	t.mu.Lock()
	defer t.mu.Unlock()
	s := t.get(id, now)
	before := min(turn-1, baselineTurns)
	if hasMedian && before > 0 {
		var medians [baselineTurns]time.Duration
		n, served := 0, true
		for k := range before {
			served = served && s.served[k]
			if s.has[k] {
				medians[n] = s.baseline[k]
				n++
			}
		}
		switch base := medianOf(medians[:n]); {
		case !served:
			v.unjudged = true
		case n > 0 && base > 0:
			v.ratio, v.judged = float64(median)/float64(base), true
			if v.ratio > factor && !s.degraded {
				s.degraded, v.degraded = true, true
			}
		}
	}
	if turn >= 1 && turn <= baselineTurns {
		k := turn - 1
		s.served[k], s.has[k] = true, hasMedian
		if hasMedian {
			s.baseline[k] = median
		}
	}
	return v
}

// sweep forgets the sessions idle for longer than the TTL at now: the
// least recently seen, at the back of the list. Called with mu held.
func (t *sessionTracker) sweep(now time.Time) {
	for e := t.lru.Back(); e != nil; e = t.lru.Back() {
		s := e.Value.(*session)
		if now.Sub(s.lastSeen) <= t.ttl {
			return
		}
		t.lru.Remove(e)
		delete(t.byID, s.id)
	}
}

// size returns the number of sessions tracked at now, the expired swept,
// and those evicted so far.
func (t *sessionTracker) size(now time.Time) (live int, evicted uint64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.sweep(now)
	return t.lru.Len(), t.evicted
}

// medianOf returns the median of up to baselineTurns durations, 0 of
// none.
func medianOf(ds []time.Duration) time.Duration {
	var sorted [baselineTurns]time.Duration
	n := copy(sorted[:], ds)
	if n == 0 {
		return 0
	}
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
