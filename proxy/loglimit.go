package proxy

import (
	"sync"
	"time"
)

// logLimit lets a repeated event be logged at most once per interval: the
// first at once, a later one once the interval has passed since the last
// logged, with the count of those not logged in between. Its zero value
// needs every set.
type logLimit struct {
	every time.Duration

	mu      sync.Mutex
	last    time.Time // when one was last logged; zero: never
	skipped int
}

// allow reports whether to log the event now, and how many were not
// logged since the last that was.
func (l *logLimit) allow(now time.Time) (ok bool, skipped int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.last.IsZero() && now.Sub(l.last) < l.every {
		l.skipped++
		return false, 0
	}
	l.last, skipped, l.skipped = now, l.skipped, 0
	return true, skipped
}
