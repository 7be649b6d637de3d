package main

import (
	"context"
	"sync"
	"time"
)

// phase is where a sweep level is when a request starts; the request
// records into that phase's stats.
type phase int

const (
	// settling: the level's start, until as many requests as it has
	// streams have ended and the ramp is over; not measured.
	settling phase = iota
	// measuring: the window of -duration; its requests are the level's.
	measuring
	// filling: after the window, until its last request has ended, so
	// that it ends at the level's load; not measured. The requests still
	// in flight then drain: the next level starts when they have ended.
	filling
	numPhases
)

// level is one level of a sweep: n streams, their phases and the stats
// of each. The measured phase records into the bench's stats, from which
// the level's report is made as a run's is.
type level struct {
	b      *bench
	n      int
	window time.Duration
	sets   [numPhases][]*modelStats

	mu      sync.Mutex
	phase   phase
	settled int // requests of the settle that ended
	open    int // requests of the window not ended
	// busy sums the time the window's requests took, each from its start
	// to its end.
	busy     time.Duration
	rampEnd  time.Time
	start    time.Time
	measured time.Time // the window's start; zero until the level settled
	end      time.Time // the end of the window's last request
	drained  time.Time // the end of the level's last request
}

// newLevel readies b for a level of n streams: the stats of each phase,
// the bench's (the measured phase's) emptied.
func newLevel(b *bench, n int, window time.Duration) *level {
	b.reset()
	b.cfg.concurrency = n
	l := &level{b: b, n: n, window: window, start: time.Now()}
	l.rampEnd = l.start.Add(b.cfg.ramp)
	for p := range l.sets {
		l.sets[p] = make([]*modelStats, len(b.stats))
		for i, s := range b.stats {
			l.sets[p][i] = newModelStats(s.name)
		}
	}
	l.sets[measuring] = b.stats
	b.start = l.start
	return l
}

// run runs the level's streams until its measured requests have all
// ended and the others in flight have drained, or ctx is canceled.
func (l *level) run(ctx context.Context) {
	l.b.workers(ctx, l.n, func(w *worker) {
		for {
			p, ok := l.next(ctx)
			if !ok {
				return
			}
			w.stats = l.sets[p]
			began := time.Now()
			w.do(ctx, w.next())
			l.ended(p, time.Since(began))
		}
	})
	l.drained = time.Now()
}

// next decides the phase of the request a worker is about to start, or
// that the worker stops: the run was canceled, or the level's window is
// over and its last request has ended.
func (l *level) next(ctx context.Context) (phase, bool) {
	if ctx.Err() != nil {
		return 0, false
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	now := time.Now()
	if l.phase == settling && l.settled >= l.n && !now.Before(l.rampEnd) {
		l.phase, l.measured = measuring, now
	}
	if l.phase == measuring && now.Sub(l.measured) >= l.window {
		l.phase = filling
	}
	switch {
	case l.phase == measuring:
		l.open++
	case l.phase == filling && l.open == 0:
		return 0, false
	}
	return l.phase, true
}

// ended counts the end of a request of phase p, which took took.
func (l *level) ended(p phase, took time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	switch p {
	case settling:
		l.settled++
	case measuring:
		l.open--
		l.busy += took
		l.end = time.Now()
	}
}

// perStream is the time the window's requests took per stream: the
// level's rates are over it. Its streams were each busy with one request
// at a time, so that its requests' output over it is what the level
// sustains, however the window fell on them: requests of equal length,
// started together, stay in step and are caught in whole waves.
func (l *level) perStream() time.Duration {
	return l.busy / time.Duration(l.n)
}

// results are each model's results over every phase of the level: every
// request it sent, as a proxy in its path saw them.
func (l *level) results() []result {
	var out []result
	for i := range l.b.stats {
		r := l.sets[settling][i].result()
		r.merge(l.sets[measuring][i].result())
		r.merge(l.sets[filling][i].result())
		out = append(out, r)
	}
	return out
}
