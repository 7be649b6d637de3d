package main

import (
	"math"
	"math/bits"
	"sync/atomic"
	"time"
)

// histogram counts durations in log-linear buckets, the scheme of HDR
// histograms: below 256 ns every nanosecond has its own bucket, and above
// it every power of two is cut into subBuckets equal buckets. A bucket is
// then never wider than 1/128 of its lower bound, and a quantile reported
// at its bucket's midpoint is within 0.4% of the exact sample (exact below
// 256 ns; min, max, count and sum are exact). It covers every
// non-negative int64 in 7,296 counters (57 KiB), so memory does not grow
// with the samples, and it is safe for concurrent use: recording is a few
// atomic adds, without locks.
type histogram struct {
	count, sum atomic.Int64
	min, max   atomic.Int64 // min is stored as ^min so that its zero value is no sample
	buckets    [histBuckets]atomic.Uint64
}

const (
	subBits     = 7
	subBuckets  = 1 << subBits // per power of two
	histBuckets = (64 - subBits) * subBuckets
	// quantileError is the largest relative error of a quantile above
	// 256 ns: half a bucket's width over its lower bound.
	quantileError = 0.5 / subBuckets
)

// bucketOf returns the index of v's bucket.
func bucketOf(v uint64) int {
	if v < 2*subBuckets {
		return int(v)
	}
	shift := bits.Len64(v) - 1 - subBits
	return (shift+1)*subBuckets + int(v>>shift) - subBuckets
}

// bucketRange returns the smallest value of bucket i and its width.
func bucketRange(i int) (low, width uint64) {
	if i < 2*subBuckets {
		return uint64(i), 1
	}
	shift := i/subBuckets - 1
	return uint64(i%subBuckets+subBuckets) << shift, 1 << shift
}

// record adds one sample; negative durations count as zero.
func (h *histogram) record(d time.Duration) {
	v := max(int64(d), 0)
	h.buckets[bucketOf(uint64(v))].Add(1)
	h.count.Add(1)
	h.sum.Add(v)
	for cur := h.max.Load(); v > cur && !h.max.CompareAndSwap(cur, v); cur = h.max.Load() {
	}
	for cur := h.min.Load(); (cur == 0 || v < ^cur) && !h.min.CompareAndSwap(cur, ^v); cur = h.min.Load() {
	}
}

// dist is a histogram read at one moment, or several merged.
type dist struct {
	count    uint64
	sum      time.Duration
	min, max time.Duration
	buckets  []uint64
}

// snapshot reads h. Samples recorded meanwhile may be counted in some
// fields and not yet in others, which only a live progress line sees.
func (h *histogram) snapshot() dist {
	d := dist{buckets: make([]uint64, histBuckets)}
	for i := range h.buckets {
		d.buckets[i] = h.buckets[i].Load()
		d.count += d.buckets[i]
	}
	d.sum = time.Duration(h.sum.Load())
	d.max = time.Duration(h.max.Load())
	if m := h.min.Load(); m != 0 {
		d.min = time.Duration(^m)
	}
	return d
}

// merge adds o to d.
func (d *dist) merge(o dist) {
	if d.buckets == nil {
		d.buckets = make([]uint64, histBuckets)
	}
	if o.count == 0 {
		return
	}
	if d.count == 0 || o.min < d.min {
		d.min = o.min
	}
	d.max = max(d.max, o.max)
	d.count += o.count
	d.sum += o.sum
	for i, n := range o.buckets {
		d.buckets[i] += n
	}
}

// mean is the exact mean, 0 without samples.
func (d dist) mean() time.Duration {
	if d.count == 0 {
		return 0
	}
	return d.sum / time.Duration(d.count)
}

// quantile returns the q-quantile by nearest rank (the smallest sample
// with at least q of the samples at or below it), as the midpoint of its
// bucket kept within [min, max]; 0 without samples.
func (d dist) quantile(q float64) time.Duration {
	if d.count == 0 {
		return 0
	}
	rank := uint64(math.Ceil(q * float64(d.count)))
	rank = min(max(rank, 1), d.count)
	var seen uint64
	for i, n := range d.buckets {
		seen += n
		if seen >= rank {
			low, width := bucketRange(i)
			mid := time.Duration(low + (width-1)/2)
			return min(max(mid, d.min), d.max)
		}
	}
	return d.max
}
