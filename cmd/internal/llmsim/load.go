package llmsim

import (
	"sync/atomic"
	"time"
)

// Load makes the gaps of the models it is set on lengthen with the
// requests they are serving at once, by a known law, as the decode step an
// engine shares among the sequences of its batch does:
//
//	gap = ITL + (n − 1) × PerStream
//
// where n is the number of requests being decoded (from their arrival to
// their last token) by every model that shares the Load when the gap
// begins, the stream's own request included: a lone stream's gap is
// exactly the model's ITL. Jitter and stalls apply on top, as without a
// Load. A load test that knows the law knows the gap at every load, and so
// the load at which a given gap is reached. TTFT does not depend on it.
type Load struct {
	// PerStream is what each other request in flight adds to a gap.
	PerStream time.Duration

	decoding atomic.Int64
}

// Gap is the law's gap for a model whose lone-stream gap is itl, with n
// requests in flight (n below 1 counts as 1).
func (l *Load) Gap(itl time.Duration, n int) time.Duration {
	return itl + time.Duration(max(n, 1)-1)*l.PerStream
}

// enter counts a request being decoded until the returned function is
// called; a nil Load counts nothing.
func (l *Load) enter() (leave func()) {
	if l == nil {
		return func() {}
	}
	l.decoding.Add(1)
	return func() { l.decoding.Add(-1) }
}

// gap returns the law's mean gap for itl at the load of this moment; itl
// itself for a nil Load.
func (l *Load) gap(itl time.Duration) time.Duration {
	if l == nil {
		return itl
	}
	return l.Gap(itl, int(l.decoding.Load()))
}
