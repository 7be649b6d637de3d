package recorder

import "time"

// Gap is one gap between consecutive token-bearing events: its length,
// and the tokens the event that ends it carried (0 when the upstream does
// not say per event).
type Gap struct {
	Length time.Duration
	Tokens int32
}

// Rest summarizes the gaps past a timeline's cap.
type Rest struct {
	Gaps    int
	Total   time.Duration
	Longest time.Duration
	Tokens  int64
}

// Timeline is one stream's gaps as they happen: the first Options.MaxGaps
// one by one, the rest summed up. Its gap buffer starts at startGaps and
// doubles as the stream needs, up to MaxGaps, so that a stream in flight
// holds no more than its own length (within a factor of two) however
// large MaxGaps is; the recorded entry takes the buffer when the stream
// ends. A nil Timeline records nothing. It is used by one goroutine at a
// time.
type Timeline struct {
	gaps []Gap // len ≤ cap ≤ max
	max  int   // Options.MaxGaps
	rest Rest
}

// Gap records a gap of d ending with an event of tokens tokens.
func (t *Timeline) Gap(d time.Duration, tokens int64) {
	if t == nil {
		return
	}
	if len(t.gaps) == cap(t.gaps) && cap(t.gaps) < t.max {
		t.grow()
	}
	if len(t.gaps) < cap(t.gaps) {
		t.gaps = append(t.gaps, Gap{Length: d, Tokens: int32(min(tokens, 1<<31-1))})
		return
	}
	t.rest.Gaps++
	t.rest.Total += d
	t.rest.Longest = max(t.rest.Longest, d)
	t.rest.Tokens += tokens
}

// startGaps is a timeline's first buffer, in gaps: a typical answer's
// length, a kilobyte.
const startGaps = 64

// grow doubles the gap buffer (or makes the first), within max.
func (t *Timeline) grow() {
	gaps := make([]Gap, len(t.gaps), min(max(2*cap(t.gaps), startGaps), t.max))
	copy(gaps, t.gaps)
	t.gaps = gaps
}
