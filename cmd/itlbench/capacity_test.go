package main

import (
	"slices"
	"strings"
	"testing"
	"time"
)

// levelOf is a level's measured requests: sent requests of which failed
// failed, and TTFT and ITL samples recorded into real histograms.
func levelOf(sent, failed int64, ttft, itl []time.Duration) result {
	var st modelStats
	for _, d := range ttft {
		st.ttft.record(d)
	}
	for _, d := range itl {
		st.itl.record(d)
	}
	r := result{sent: sent, ok: sent - failed, ttft: st.ttft.snapshot(), itl: st.itl.snapshot()}
	r.errs[errStatus] = failed
	return r
}

// times repeats d n times.
func times(n int, d time.Duration) []time.Duration { return slices.Repeat([]time.Duration{d}, n) }

// TestLevelVerdict: a level misses an objective when its p99 is beyond
// it (99 samples of 100 within it are enough, 98 are not), when it has no
// sample of that kind, or when more than 1% of its requests failed.
func TestLevelVerdict(t *testing.T) {
	ms := time.Millisecond
	o := objectives{ttft: 500 * ms, itl: 50 * ms}
	ttft := times(100, 100*ms)
	for _, c := range []struct {
		name string
		r    result
		want []string
	}{
		{"within both", levelOf(100, 0, ttft, append(times(99, 40*ms), 900*ms)), []string{}},
		{"ITL tail", levelOf(100, 0, ttft, append(times(98, 40*ms), 900*ms, 900*ms)), []string{missedITL}},
		{"TTFT tail and ITL tail", levelOf(100, 0, append(times(98, 100*ms), 2*time.Second, 2*time.Second),
			append(times(98, 40*ms), 51*ms, 51*ms)), []string{missedTTFT, missedITL}},
		{"1% failed", levelOf(100, 1, ttft, times(100, 40*ms)), []string{}},
		{"2% failed", levelOf(100, 2, ttft, times(100, 40*ms)), []string{missedErrors}},
		{"no gaps", levelOf(100, 0, ttft, nil), []string{missedITL}},
		{"nothing sent", levelOf(0, 0, nil, nil), []string{missedTTFT, missedITL, missedErrors}},
	} {
		if got := o.missed(c.r); !slices.Equal(got, c.want) {
			t.Errorf("%s: missed %v, want %v", c.name, got, c.want)
		}
	}
	if got := (objectives{itl: 50 * ms}).missed(levelOf(100, 0, times(100, 9*time.Second), times(100, 40*ms))); len(got) != 0 {
		t.Errorf("without a TTFT objective, a slow TTFT missed %v", got)
	}
	if got := (objectives{}).missed(levelOf(100, 50, nil, nil)); len(got) != 0 {
		t.Errorf("without objectives, missed %v", got)
	}
}

// TestFindCapacity: the capacity is the highest level that met the
// objectives, bound by what the level above it missed; a level that met
// them above one that missed still counts; none met is 0, bound by what
// the lowest missed; all met is at least the highest.
func TestFindCapacity(t *testing.T) {
	level := func(n int, missed ...string) levelJSON {
		l := levelJSON{Missed: append([]string{}, missed...), Met: len(missed) == 0}
		l.Concurrency = n
		return l
	}
	o := objectives{ttft: time.Second, itl: 50 * time.Millisecond}
	for _, c := range []struct {
		name   string
		levels []levelJSON
		want   capacityJSON
	}{
		{"bound by ITL", []levelJSON{level(1), level(4), level(8, missedITL), level(16, missedITL, missedTTFT)},
			capacityJSON{Concurrency: 4, BoundBy: []string{missedITL}, MissedAt: 8}},
		{"bound by both", []levelJSON{level(1), level(2, missedTTFT, missedITL)},
			capacityJSON{Concurrency: 1, BoundBy: []string{missedTTFT, missedITL}, MissedAt: 2}},
		{"bound by errors", []levelJSON{level(8), level(16, missedErrors)},
			capacityJSON{Concurrency: 8, BoundBy: []string{missedErrors}, MissedAt: 16}},
		{"met above a miss", []levelJSON{level(1), level(2, missedITL), level(4), level(8, missedTTFT)},
			capacityJSON{Concurrency: 4, BoundBy: []string{missedTTFT}, MissedAt: 8}},
		{"none met", []levelJSON{level(4, missedITL), level(8, missedITL)},
			capacityJSON{Concurrency: 0, BoundBy: []string{missedITL}, MissedAt: 4}},
		{"all met", []levelJSON{level(4), level(8)},
			capacityJSON{Concurrency: 8, BoundBy: []string{}, AtLeast: true}},
		{"no level", nil, capacityJSON{BoundBy: []string{}}},
	} {
		got := findCapacity(c.levels, o)
		if got.Concurrency != c.want.Concurrency || !slices.Equal(got.BoundBy, c.want.BoundBy) || got.MissedAt != c.want.MissedAt || got.AtLeast != c.want.AtLeast {
			t.Errorf("%s: %+v, want %+v", c.name, got, c.want)
		}
	}
	if got := findCapacity([]levelJSON{level(4)}, objectives{}); got.Concurrency != 0 || got.AtLeast {
		t.Errorf("without objectives: %+v, want no capacity", got)
	}
	v := findCapacity([]levelJSON{level(1), level(4)}, o).verdict([]levelJSON{level(1), level(4)}, o)
	if !strings.HasPrefix(v, "at least 4 streams") {
		t.Errorf("verdict %q", v)
	}
}
