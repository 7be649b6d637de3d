package telemetry

import "go.opentelemetry.io/otel/sdk/metric/metricdata"

// Exponential buckets as OTLP lays them out: bucket Offset+i counts the
// values in (base^(Offset+i), base^(Offset+i+1)], base = 2^(2^-scale).
// These helpers let the deltas subtract one push's buckets from the
// next's when client_golang has lowered the scale in between (it halves
// the resolution of a histogram that outgrows its bucket limit).

// downscale returns b at a scale lower by `by`: each bucket of the new
// scale sums the 2^by buckets it covers. The arithmetic shift floors
// negative indexes too, which is how the new buckets split them.
func downscale(b metricdata.ExponentialBucket, by int32) metricdata.ExponentialBucket {
	if by <= 0 || len(b.Counts) == 0 {
		return b
	}
	first := b.Offset >> by
	last := (b.Offset + int32(len(b.Counts)) - 1) >> by
	out := metricdata.ExponentialBucket{Offset: first, Counts: make([]uint64, last-first+1)}
	for i, c := range b.Counts {
		out.Counts[(b.Offset+int32(i))>>by-first] += c
	}
	return out
}

// subtract returns cur's counts less prev's, bucket by bucket, both at
// one scale, and false when prev counts more anywhere (cur is not a later
// total of the same histogram).
func subtract(cur, prev metricdata.ExponentialBucket) (metricdata.ExponentialBucket, bool) {
	out := metricdata.ExponentialBucket{Offset: cur.Offset, Counts: make([]uint64, len(cur.Counts))}
	copy(out.Counts, cur.Counts)
	for i, c := range prev.Counts {
		j := int(prev.Offset) + i - int(cur.Offset)
		switch {
		case c == 0:
		case j < 0 || j >= len(out.Counts) || out.Counts[j] < c:
			return metricdata.ExponentialBucket{}, false
		default:
			out.Counts[j] -= c
		}
	}
	return trim(out), true
}

// trim drops the empty buckets at either end.
func trim(b metricdata.ExponentialBucket) metricdata.ExponentialBucket {
	lo, hi := 0, len(b.Counts)
	for lo < hi && b.Counts[lo] == 0 {
		lo++
	}
	for hi > lo && b.Counts[hi-1] == 0 {
		hi--
	}
	if lo == hi {
		return metricdata.ExponentialBucket{}
	}
	return metricdata.ExponentialBucket{Offset: b.Offset + int32(lo), Counts: b.Counts[lo:hi]}
}
