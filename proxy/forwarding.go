package proxy

import "time"

// What the proxy adds to a stream's bytes on their way is timed on the
// proxy's monotonic clock, in these terms, here only (docs/metrics.md
// says the same for the histograms):
//
//   - A read's bytes are available to the proxy when the read returns;
//     but when they were already waiting as the proxy turned back to the
//     upstream (the read returned at once: within blockedRead of being
//     issued), they were available from that turn, before the proxy
//     measured the read before: that measuring held them.
//   - A read's own delay runs from its bytes being available to the start
//     of their write to the client; each token-bearing event the read
//     completes is observed with it.
//   - A write to the client runs from its start to its return: the
//     reverse proxy's write and its flush, which return when the proxy
//     turns back to the upstream (or starts the next write, or the stream
//     ends). Each write of a stream's bytes is observed once, whatever the
//     reads held, and a stream's total is the sum of its writes. Each is
//     handed to the sink as its interval, once the read it carries has
//     been measured, so that a stall's cause can tell how much of the gap
//     the writes to the client took (metrics, stallcause.go).

// availableAt is when the bytes of a read were available to the proxy:
// the proxy turned back to the upstream for them at turned, measured, and
// issued the read at issued, which returned at returned.
func availableAt(turned, issued, returned time.Time) time.Time {
	if turned.IsZero() || returned.Sub(issued) >= blockedRead {
		// The read waited for its bytes: they came as it returned.
		return returned
	}
	return turned
}

// forwardClock keeps the forwarding stamps of an event stream: those of
// the read its reader holds (when its bytes were available, when their
// write began), and the start of the write to the client in progress. The
// stream's reader (eventMeter) and the client's writer (clientWriter)
// note them; the reader consumes them.
type forwardClock struct {
	available time.Time // the held read's bytes; zero: no read held
	began     time.Time // the held read's write; zero: not begun
	writing   time.Time // the write in progress; zero: none
}

// turn notes that the proxy turns back to the upstream at now: the write
// in progress, if any, has returned; it began at began.
func (c *forwardClock) turn(now time.Time) (began time.Time, ok bool) {
	if c.writing.IsZero() {
		return time.Time{}, false
	}
	began, c.writing = c.writing, time.Time{}
	return began, true
}

// read notes a read held from now on, turned, issued and returned as
// availableAt has them.
func (c *forwardClock) read(turned, issued, returned time.Time) {
	c.available, c.began = availableAt(turned, issued, returned), time.Time{}
}

// write notes a write to the client beginning at now: the one before, if
// still in progress, has returned; it began at prev. The held read's bytes
// begin their way to the client with the first write after their read
// (one that a transformation holds back goes with a later read's).
func (c *forwardClock) write(now time.Time) (prev time.Time, ok bool) {
	prev, ok = c.turn(now)
	c.writing = now
	if !c.available.IsZero() && c.began.IsZero() {
		c.began = now
	}
	return prev, ok
}

// ownDelay is the held read's own delay: from its bytes being available
// to the start of their write; ok is false before that write.
func (c *forwardClock) ownDelay() (time.Duration, bool) {
	if c.began.IsZero() {
		return 0, false
	}
	return max(c.began.Sub(c.available), 0), true
}
