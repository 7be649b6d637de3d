package telemetry

import (
	"slices"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
)

// deltas turns the registry's totals into what changed since the previous
// push, for the temporalities that ask for it. The bridge reads every
// counter and histogram as the total it is; the SDK's own aggregation,
// which would make deltas of its instruments, never sees them. So each
// series' previous total is kept here (its buckets for a histogram: the
// memory the delta temporalities cost), and a point's start is the
// previous push's time. A series whose start moved was reset
// (client_golang resets a native histogram that outgrows its buckets):
// its point is then its total since the new start. A push that fails loses
// its deltas, as with any OpenTelemetry SDK: the next starts from it.
type deltas struct {
	counters, histograms bool
	last                 map[seriesKey]any
}

// newDeltas returns what t turns into deltas, nil for none (cumulative).
func newDeltas(t Temporality) *deltas {
	switch t {
	case Delta:
		return &deltas{counters: true, histograms: true, last: map[seriesKey]any{}}
	case LowMemory:
		return &deltas{histograms: true, last: map[seriesKey]any{}}
	}
	return nil
}

// seriesKey names a series across pushes.
type seriesKey struct {
	name  string
	attrs attribute.Distinct
}

// apply rewrites, in place, the counters and histograms of ms that go as
// deltas, and keeps their totals for the next push; a series absent from
// this push is forgotten.
func (d *deltas) apply(ms []metricdata.Metrics) {
	next := make(map[seriesKey]any, len(d.last))
	for i := range ms {
		m := &ms[i]
		switch data := m.Data.(type) {
		case metricdata.Sum[float64]:
			if d.counters && data.IsMonotonic {
				data.DataPoints = deltaPoints(d.last, next, m.Name, data.DataPoints, sumDelta)
				data.Temporality = metricdata.DeltaTemporality
				m.Data = data
			}
		case metricdata.Histogram[float64]:
			if d.histograms {
				data.DataPoints = deltaPoints(d.last, next, m.Name, data.DataPoints, histogramDelta)
				data.Temporality = metricdata.DeltaTemporality
				m.Data = data
			}
		case metricdata.ExponentialHistogram[float64]:
			if d.histograms {
				data.DataPoints = deltaPoints(d.last, next, m.Name, data.DataPoints, exponentialDelta)
				data.Temporality = metricdata.DeltaTemporality
				m.Data = data
			}
		}
	}
	d.last = next
}

// point is a data point of a kind deltas handles.
type point interface {
	metricdata.DataPoint[float64] | metricdata.HistogramDataPoint[float64] | metricdata.ExponentialHistogramDataPoint[float64]
}

// deltaPoints turns each of points into its delta from the total of the
// same series in last, with delta, and keeps each total in next. It
// drops a point that delta finds inconsistent with the previous total
// under the same start (a total that went down unannounced): sending its
// whole total would count again what the previous pushes did.
func deltaPoints[P point](last, next map[seriesKey]any, name string, points []P,
	delta func(cur, prev P) (P, P, bool)) []P {
	out := points[:0]
	for _, p := range points {
		attrs := attributesOf(p)
		k := seriesKey{name: name, attrs: attrs.Equivalent()}
		prev, seen := last[k].(P)
		d, total, ok := delta(p, prev)
		next[k] = total
		if seen && !ok {
			continue
		}
		out = append(out, d)
	}
	return out
}

// attributesOf returns a point's attributes.
func attributesOf[P point](p P) attribute.Set {
	switch p := any(p).(type) {
	case metricdata.DataPoint[float64]:
		return p.Attributes
	case metricdata.HistogramDataPoint[float64]:
		return p.Attributes
	case metricdata.ExponentialHistogramDataPoint[float64]:
		return p.Attributes
	}
	return attribute.Set{}
}

// since keeps the exemplars taken after t: those of earlier pushes' deltas
// went with them.
func since(ex []metricdata.Exemplar[float64], t time.Time) []metricdata.Exemplar[float64] {
	return slices.DeleteFunc(slices.Clone(ex), func(e metricdata.Exemplar[float64]) bool { return !e.Time.After(t) })
}

// continues reports whether cur is a later total of the series prev was
// a total of: same start, taken later. A zero prev (a new series) does
// not.
func continues(curStart, prevStart, prevTime time.Time) bool {
	return !prevTime.IsZero() && curStart.Equal(prevStart)
}

// sumDelta returns a counter's delta from prev and the total to keep; not
// ok when the total went down under the same start.
func sumDelta(cur, prev metricdata.DataPoint[float64]) (delta, total metricdata.DataPoint[float64], ok bool) {
	total = cur
	total.Exemplars = nil // a total needs none
	if !continues(cur.StartTime, prev.StartTime, prev.Time) {
		return cur, total, true
	}
	if cur.Value < prev.Value {
		return cur, total, false
	}
	cur.Value -= prev.Value
	cur.StartTime = prev.Time
	cur.Exemplars = since(cur.Exemplars, prev.Time)
	return cur, total, true
}

// histogramDelta is sumDelta for a histogram of explicit buckets.
func histogramDelta(cur, prev metricdata.HistogramDataPoint[float64]) (delta, total metricdata.HistogramDataPoint[float64], ok bool) {
	total = cur
	total.Exemplars = nil // a total needs none
	total.BucketCounts = slices.Clone(cur.BucketCounts)
	if !continues(cur.StartTime, prev.StartTime, prev.Time) {
		return cur, total, true
	}
	if cur.Count < prev.Count || !slices.Equal(cur.Bounds, prev.Bounds) || len(cur.BucketCounts) != len(prev.BucketCounts) {
		return cur, total, false
	}
	counts := make([]uint64, len(cur.BucketCounts))
	for i, c := range cur.BucketCounts {
		if c < prev.BucketCounts[i] {
			return cur, total, false
		}
		counts[i] = c - prev.BucketCounts[i]
	}
	cur.BucketCounts, cur.Count, cur.Sum = counts, cur.Count-prev.Count, cur.Sum-prev.Sum
	cur.Min, cur.Max = metricdata.Extrema[float64]{}, metricdata.Extrema[float64]{}
	cur.StartTime = prev.Time
	cur.Exemplars = since(cur.Exemplars, prev.Time)
	return cur, total, true
}

// exponentialDelta is sumDelta for an exponential histogram, whose scale
// may have gone down since prev.
func exponentialDelta(cur, prev metricdata.ExponentialHistogramDataPoint[float64]) (delta, total metricdata.ExponentialHistogramDataPoint[float64], ok bool) {
	total = cur
	total.Exemplars = nil // a total needs none
	total.PositiveBucket.Counts = slices.Clone(cur.PositiveBucket.Counts)
	total.NegativeBucket.Counts = slices.Clone(cur.NegativeBucket.Counts)
	if !continues(cur.StartTime, prev.StartTime, prev.Time) {
		return cur, total, true
	}
	if cur.Count < prev.Count || cur.ZeroCount < prev.ZeroCount || cur.Scale > prev.Scale || cur.ZeroThreshold != prev.ZeroThreshold {
		return cur, total, false
	}
	by := prev.Scale - cur.Scale
	pos, okPos := subtract(cur.PositiveBucket, downscale(prev.PositiveBucket, by))
	neg, okNeg := subtract(cur.NegativeBucket, downscale(prev.NegativeBucket, by))
	if !okPos || !okNeg {
		return cur, total, false
	}
	cur.PositiveBucket, cur.NegativeBucket = pos, neg
	cur.Count, cur.ZeroCount, cur.Sum = cur.Count-prev.Count, cur.ZeroCount-prev.ZeroCount, cur.Sum-prev.Sum
	cur.Min, cur.Max = metricdata.Extrema[float64]{}, metricdata.Extrema[float64]{}
	cur.StartTime = prev.Time
	cur.Exemplars = since(cur.Exemplars, prev.Time)
	return cur, total, true
}
