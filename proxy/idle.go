package proxy

import (
	"context"
	"sync/atomic"
	"time"
)

// idleTimer ends a stream whose upstream goes silent: when a read of the
// upstream has waited d for bytes, it cancels the upstream request, so that
// the read fails and the client sees the stream cut. Each read that waits
// restarts the countdown (eventMeter.awaitUpstream); when it runs out between
// reads, while the proxy writes to the client, it does nothing. Pausing is
// a flag, not a timer operation: one Reset per read is all the per-read
// cost.
type idleTimer struct {
	d       time.Duration
	t       *time.Timer
	waiting atomic.Bool // a read of the upstream is waiting
	fired   atomic.Bool // set from the timer's goroutine
}

func startIdleTimer(d time.Duration, cancel context.CancelFunc) *idleTimer {
	it := &idleTimer{d: d}
	it.t = time.AfterFunc(d, func() {
		if !it.waiting.Load() {
			return // between reads: the next read restarts the countdown
		}
		it.fired.Store(true)
		cancel()
	})
	return it
}

// reset restarts the countdown: a read waits for the upstream.
func (it *idleTimer) reset() {
	it.waiting.Store(true)
	it.t.Reset(it.d)
}

// pause stops the countdown from counting: the read has returned.
func (it *idleTimer) pause() { it.waiting.Store(false) }

// stop ends the countdown for good: the exchange is over.
func (it *idleTimer) stop() {
	it.waiting.Store(false)
	it.t.Stop()
}
