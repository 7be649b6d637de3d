package main

import (
	"bytes"
	"time"

	"github.com/itlproxy/itlproxy/cmd/internal/llmsim"
	"github.com/itlproxy/itlproxy/proxy/events"
)

// transitStamps finds the send-time stamps of a stream (lines opening
// with llmsim.StampPrefix, which "itlbench upstream -stamp" writes) as
// the stream is read. It hands the bytes to the scanner in pieces cut
// after each stamp line, so that each event sees the stamp written just
// before it, and no other: an event's transit is its arrival (the
// instant its read returned, as for ITL) less that stamp, both read from
// the wall clock of one machine.
type transitStamps struct {
	// head is the start of the line being read while it may still be a
	// stamp: the prefix, at most 19 digits and a '\r'. n is its length,
	// or -1 once the line cannot be a stamp.
	head [len(llmsim.StampPrefix) + 20]byte
	n    int
	// sent is the stamp of the event being read, in Unix nanoseconds;
	// 0: none.
	sent int64
}

// write scans p, a read of the stream that returned at at, for events and
// stamps.
func (t *transitStamps) write(p []byte, scan *events.Scanner, at time.Time) {
	from := 0
	for i := 0; i < len(p); {
		nl := bytes.IndexByte(p[i:], '\n')
		end := len(p)
		if nl >= 0 {
			end = i + nl
		}
		if t.n >= 0 {
			t.grow(p[i:end])
		}
		if nl < 0 {
			break
		}
		if sent, ok := t.stamp(); ok {
			// Nothing before the stamp's line end may see it: the previous
			// event ended before the line began.
			scan.Write(p[from:end+1], events.Stamp{At: at})
			from, t.sent = end+1, sent
		}
		t.n, i = 0, end+1
	}
	scan.Write(p[from:], events.Stamp{At: at})
}

// grow adds seg, the next bytes of the current line, to its head.
func (t *transitStamps) grow(seg []byte) {
	if t.n+len(seg) > len(t.head) {
		t.n = -1
		return
	}
	t.n += copy(t.head[t.n:], seg)
	k := min(t.n, len(llmsim.StampPrefix))
	if string(t.head[:k]) != llmsim.StampPrefix[:k] {
		t.n = -1
	}
}

// stamp returns the time of the line just ended, when it was a stamp.
func (t *transitStamps) stamp() (int64, bool) {
	if t.n <= len(llmsim.StampPrefix) {
		return 0, false
	}
	digits := t.head[len(llmsim.StampPrefix):t.n]
	if digits[len(digits)-1] == '\r' {
		digits = digits[:len(digits)-1]
	}
	if len(digits) == 0 || len(digits) > 19 {
		return 0, false
	}
	var v int64
	for _, c := range digits {
		if c < '0' || c > '9' {
			return 0, false
		}
		v = v*10 + int64(c-'0')
	}
	return v, v > 0
}

// take returns the transit of an event that arrived at now, and forgets
// its stamp; ok is false when it had none.
func (t *transitStamps) take(now time.Time) (transit time.Duration, ok bool) {
	sent := t.sent
	t.sent = 0
	if sent == 0 {
		return 0, false
	}
	return time.Duration(now.UnixNano() - sent), true
}
