package metrics

import (
	"math/bits"
	"time"
)

// gapSketch counts one stream's gaps in log-linear buckets, four per
// octave of about 1 µs units, from 0 to over an hour: enough to take the
// stream's median and p99 (for its spread, and to compare it with the same
// session's earlier streams) without keeping every gap. A quantile is the
// midpoint of its bucket: within 12.5% of the true value.
//
// It is a fixed array, so a stream costs 512 bytes and no allocation per
// gap.
type gapSketch struct {
	counts [sketchBuckets]uint32
	n      uint32
}

const (
	sketchUnitShift = 10 // 1 unit = 1024 ns
	sketchBuckets   = 128
)

// sketchIndex returns the bucket of d: units 0-3 have a bucket each, then
// each octave [2^k, 2^(k+1)) splits into four.
func sketchIndex(d time.Duration) int {
	x := uint64(max(d, 0)) >> sketchUnitShift
	if x < 4 {
		return int(x)
	}
	oct := bits.Len64(x) - 1 // >= 2
	sub := int(x>>(oct-2)) & 3
	return min((oct-2)*4+sub+4, sketchBuckets-1)
}

// sketchMid returns the midpoint of bucket i.
func sketchMid(i int) time.Duration {
	if i < 4 {
		return time.Duration((2*i+1)<<sketchUnitShift) / 2
	}
	oct := (i-4)/4 + 2
	sub := uint64((i - 4) % 4)
	lower := (4 + sub) << (oct - 2)
	width := uint64(1) << (oct - 2)
	return time.Duration((2*lower + width) << sketchUnitShift / 2)
}

func (s *gapSketch) add(d time.Duration) {
	s.counts[sketchIndex(d)]++
	s.n++
}

// quantile returns the q-quantile of the gaps added (the smallest gap with
// at least q of all gaps at or below it), or 0 without gaps.
func (s *gapSketch) quantile(q float64) time.Duration {
	if s.n == 0 {
		return 0
	}
	rank := uint32(q*float64(s.n) + 0.999999)
	rank = max(rank, 1)
	var seen uint32
	for i, c := range s.counts {
		seen += c
		if seen >= rank {
			return sketchMid(i)
		}
	}
	return sketchMid(sketchBuckets - 1)
}
