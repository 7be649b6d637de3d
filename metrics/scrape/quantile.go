package scrape

import (
	"math"
	"slices"
	"time"

	dto "github.com/prometheus/client_model/go"
)

// Buckets is a classic histogram, or the sum of several with the same
// bounds: the cumulative count at each finite upper bound, in increasing
// order, and the count and sum of every observation (the count is the
// +Inf bucket's).
type Buckets struct {
	Bounds     []float64
	Cumulative []uint64 // one per bound
	Count      uint64
	Sum        float64
}

// Add adds the classic histogram h. Histograms whose bounds differ from
// those added before cannot be summed bucket by bucket: the sum keeps its
// count and sum, and loses its buckets (Bounds nil).
func (b *Buckets) Add(h *dto.Histogram) {
	var bounds []float64
	var cumulative []uint64
	for _, bk := range h.GetBucket() {
		if !math.IsInf(bk.GetUpperBound(), +1) { // a parsed scrape has it, a gathered histogram does not
			bounds = append(bounds, bk.GetUpperBound())
			cumulative = append(cumulative, bk.GetCumulativeCount())
		}
	}
	switch {
	case b.Count == 0 && b.Bounds == nil:
		b.Bounds, b.Cumulative = bounds, cumulative
	case slices.Equal(b.Bounds, bounds):
		for i, c := range cumulative {
			b.Cumulative[i] += c
		}
	default:
		b.Bounds, b.Cumulative = nil, nil
	}
	b.Count += h.GetSampleCount()
	b.Sum += h.GetSampleSum()
}

// HistogramQuantile estimates the q-quantile of b as PromQL's
// histogram_quantile does over classic buckets: it finds the bucket that
// holds the rank q × Count and interpolates linearly within it, from 0 for
// the first bucket (unless its bound is 0 or below: then that bound). A
// rank beyond the last finite bound gives that bound (see BeyondBounds).
// NaN without observations, without finite buckets, or for q NaN; -Inf
// for q < 0 and +Inf for q > 1. Counts that go down from one bound to the
// next are raised to the highest before them, as PromQL does.
func HistogramQuantile(q float64, b Buckets) float64 {
	switch {
	case math.IsNaN(q):
		return math.NaN()
	case q < 0:
		return math.Inf(-1)
	case q > 1:
		return math.Inf(+1)
	case b.total() == 0 || len(b.Bounds) == 0:
		return math.NaN()
	}
	i, rank, below, in := b.locate(q)
	switch {
	case i == len(b.Bounds):
		return b.Bounds[i-1]
	case i == 0 && b.Bounds[0] <= 0:
		return b.Bounds[0]
	}
	lower := 0.0
	if i > 0 {
		lower = b.Bounds[i-1]
	}
	return lower + (b.Bounds[i]-lower)*(rank-below)/in
}

// BeyondBounds reports whether b's q-quantile falls in the +Inf bucket,
// where HistogramQuantile can only answer the last finite bound: a floor,
// not an estimate.
func (b Buckets) BeyondBounds(q float64) bool {
	i, _, _, _ := b.locate(q)
	return i == len(b.Bounds)
}

// WithinFirstBucket reports whether b's q-quantile falls in the first
// bucket, where HistogramQuantile interpolates from 0 as if the bucket's
// observations were spread evenly below its bound: there the first bound
// is an upper bound, and the estimate no more than a guess under it.
func (b Buckets) WithinFirstBucket(q float64) bool {
	if b.total() == 0 || len(b.Bounds) == 0 {
		return false
	}
	i, _, _, _ := b.locate(q)
	return i == 0
}

// total is the count of every observation, as PromQL takes it: the +Inf
// bucket's, made no lower than the finite buckets'.
func (b Buckets) total() uint64 {
	n := b.Count
	for _, c := range b.Cumulative {
		n = max(n, c)
	}
	return n
}

// locate returns the bucket that holds the q-quantile's rank
// (len(b.Bounds) for the +Inf bucket), the rank, and the observations
// below and in that bucket.
func (b Buckets) locate(q float64) (i int, rank, below, in float64) {
	total := b.total()
	rank = q * float64(total)
	var prev uint64
	for i, c := range b.Cumulative {
		c = max(c, prev)
		if float64(c) >= rank {
			return i, rank, float64(prev), float64(c - prev)
		}
		prev = c
	}
	return len(b.Cumulative), rank, float64(prev), float64(total - prev)
}

// Seconds formats v, a latency in seconds read back (a quantile, NaN when
// there is none), as a duration to a tenth of a millisecond: "-" for NaN.
func Seconds(v float64) string {
	if math.IsNaN(v) {
		return "-"
	}
	return time.Duration(v * float64(time.Second)).Round(100 * time.Microsecond).String()
}
