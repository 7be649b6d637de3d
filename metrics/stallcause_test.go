package metrics

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
)

// stallScene drives streams of one model on servers as the proxy would,
// on a clock of its own: each stream is sent, gets its first token and
// its gaps at the times the case gives, milliseconds from an origin.
type stallScene struct {
	t    *testing.T
	m    *Metrics
	zero time.Time
	last map[*Stream]time.Time // each stream's last token
}

func newStallScene(t *testing.T) *stallScene {
	m, _ := newTestMetrics(t, Options{MaxModels: 2, StallThreshold: 200 * ms})
	return &stallScene{t: t, m: m, zero: time.Now(), last: map[*Stream]time.Time{}}
}

func (c *stallScene) at(msec int) time.Time { return c.zero.Add(time.Duration(msec) * ms) }

// stream starts a stream known by id on v, sent at sent.
func (c *stallScene) stream(id string, v *Server, sent int) *Stream {
	s := c.m.StartStream(c.m.RequestLabels("m", "chat_completions", "", ""), IDs{Request: id})
	s.SetServer(v)
	s.Sent(c.at(sent))
	return s
}

// tokens gives s a token at each time: its first, then gaps.
func (c *stallScene) tokens(s *Stream, times ...int) {
	for _, msec := range times {
		at := c.at(msec)
		if last, ok := c.last[s]; ok {
			s.GapInFlight(at.Sub(last), 0, 1, at)
		} else {
			s.FirstTokenAt(at.Sub(c.zero), at)
		}
		c.last[s] = at
	}
}

// write hands s's write to its client from began to ended.
func (c *stallScene) write(s *Stream, began, ended int) { s.ClientWrite(c.at(began), c.at(ended)) }

// want checks s's stalls, each as "cause" or "prefill of id".
func (c *stallScene) want(s *Stream, want ...string) {
	c.t.Helper()
	list, _ := s.Stalls()
	var got []string
	for _, st := range list {
		switch st.Cause {
		case StallPrefill:
			got = append(got, "prefill of "+st.Prefill)
		case "":
			got = append(got, "undecided")
		default:
			got = append(got, st.Cause)
		}
	}
	if !slices.Equal(got, want) {
		c.t.Errorf("%s's stalls are %q, want %q", s.ids.Request, got, want)
	}
}

// counted checks the stalls counted by cause.
func (c *stallScene) counted(prefill, client, upstream int) {
	c.t.Helper()
	for cause, want := range map[string]int{StallPrefill: prefill, StallClient: client, StallUpstream: upstream} {
		var got float64
		if ctr, err := c.m.stalls.GetMetricWithLabelValues("m", "chat_completions", cause); err == nil {
			got = testutil.ToFloat64(ctr)
		}
		if got != float64(want) {
			c.t.Errorf("%s stalls counted: %v, want %d", cause, got, want)
		}
	}
}

// running starts a stream known by id on v, sent at 0, whose tokens came
// every 20 ms until 100 ms: a token at 720 ms ends a stall of 620 ms.
func (c *stallScene) running(id string, v *Server) *Stream {
	s := c.stream(id, v, 0)
	c.tokens(s, steady(0, 100, 0, 0)...)
	return s
}

// steady is a running stream's tokens every 20 ms from start to end, but
// in (gapFrom, gapTo).
func steady(start, end, gapFrom, gapTo int) []int {
	var out []int
	for msec := start; msec <= end; msec += 20 {
		if msec <= gapFrom || msec >= gapTo {
			out = append(out, msec)
		}
	}
	return out
}

// TestPrefillStall: a long prompt sent while two streams run is prefilled
// for 600 ms, its first token 20 ms before their next: each of them
// stalled for the prefill, which their stalls name. Its own stream has
// none.
func TestPrefillStall(t *testing.T) {
	c := newStallScene(t)
	v := NewServer()
	a, b := c.running("a", v), c.running("b", v)
	p := c.stream("long-prompt", v, 95)
	c.tokens(p, 700, 720, 740)
	c.tokens(a, steady(720, 800, 0, 0)...)
	c.tokens(b, steady(720, 800, 0, 0)...)
	c.want(a, "prefill of long-prompt")
	c.want(b, "prefill of long-prompt")
	c.want(p)
	c.counted(2, 0, 0)
}

// TestShortRequestInAPause: the server pauses for 600 ms on its own; a
// short request sent in the middle of it gets its first token at its end,
// just before the running streams' next tokens: it waited behind the
// stall, and did not cause it.
func TestShortRequestInAPause(t *testing.T) {
	c := newStallScene(t)
	v := NewServer()
	a := c.running("a", v)
	q := c.stream("short", v, 400)
	c.tokens(q, 705, 720)
	c.tokens(a, steady(720, 800, 0, 0)...)
	c.want(a, StallUpstream)
	c.counted(0, 0, 1)
}

// TestPrefillEarlyInTheStall: a request sent within the first eighth of
// the stall (the proxy's stamps of two streams are not in strict order)
// is its prefill; one sent later is not.
func TestPrefillEarlyInTheStall(t *testing.T) {
	for _, tc := range []struct {
		sent int
		want string
	}{
		{100 + 620/8 - 5, "prefill of p"},
		{100 + 620/8 + 5, StallUpstream},
	} {
		t.Run(fmt.Sprint(tc.sent), func(t *testing.T) {
			c := newStallScene(t)
			v := NewServer()
			a := c.running("a", v)
			p := c.stream("p", v, tc.sent)
			c.tokens(p, 700)
			c.tokens(a, 720)
			c.want(a, tc.want)
		})
	}
}

// TestPrefillAfterAnother: a prompt that arrived while another was being
// prefilled is prefilled right after it, before the running streams get
// a token: the stall ends at its first token, and names it; a request
// sent after the first prefill's first token is not part of the stall.
func TestPrefillAfterAnother(t *testing.T) {
	c := newStallScene(t)
	v := NewServer()
	a := c.running("a", v)
	first := c.stream("first", v, 90)
	second := c.stream("second", v, 400)
	late := c.stream("late", v, 650)
	c.tokens(first, 600)
	c.tokens(second, 1000)
	c.tokens(late, 1005)
	c.tokens(a, 1020)
	c.want(a, "prefill of second")
}

// TestClientStall: the stream's write to its client was blocked for most
// of the gap: the client's, even with a prefill on the server then; a
// write of the bytes that ended the gap, handed before the gap is
// measured, is not part of it.
func TestClientStall(t *testing.T) {
	c := newStallScene(t)
	v := NewServer()
	a := c.running("a", v)
	p := c.stream("p", v, 95)
	c.write(a, 102, 690)
	c.tokens(p, 700)
	c.tokens(a, 720)
	c.want(a, StallClient)

	b := c.stream("b", NewServer(), 0)
	c.tokens(b, steady(0, 100, 0, 0)...)
	c.write(b, 102, 300)  // not most of the gap
	c.write(b, 705, 1500) // the write of the bytes that end it
	c.tokens(b, 700, 720)
	c.want(b, StallUpstream)
	c.counted(0, 1, 1)
}

// TestStallWaitsForItsPrefill: a stall measured before the first token of
// a stream that was waiting when it began is judged once that token is
// known (at the stream's next gap), and counted then; one whose waiting
// stream never answers is the upstream's once as long as it lasted has
// passed, or when the stream ends.
func TestStallWaitsForItsPrefill(t *testing.T) {
	c := newStallScene(t)
	v := NewServer()
	a := c.running("a", v)
	p := c.stream("p", v, 95)
	queued := c.stream("queued", v, 50)
	c.tokens(a, 720)
	c.want(a, "undecided")
	c.counted(0, 0, 0)
	c.tokens(p, 700) // measured after a's stall
	c.tokens(a, 740)
	c.want(a, "prefill of p")
	c.counted(1, 0, 0)

	// queued still waits: a's next stall waits for it until the stall's
	// length has passed since it ended.
	c.tokens(a, steady(760, 900, 900, 1500)...)
	c.tokens(a, 1500)
	c.want(a, "prefill of p", "undecided")
	c.tokens(a, steady(1520, 2080, 0, 0)...)
	c.want(a, "prefill of p", "undecided")
	c.tokens(a, 2100)
	c.want(a, "prefill of p", StallUpstream)

	c.tokens(a, 2800)
	c.want(a, "prefill of p", StallUpstream, "undecided")
	a.End(StreamEnd{Outcome: OutcomeCompleted, TPOT: -1})
	c.want(a, "prefill of p", StallUpstream, StallUpstream)
	c.counted(1, 0, 2)
	queued.End(StreamEnd{Outcome: OutcomeClientCanceled, TPOT: -1})
}

// TestStallsPerServer: a prefill on one server while the other pauses is
// the first's streams' prefill and the second's upstream stall.
func TestStallsPerServer(t *testing.T) {
	c := newStallScene(t)
	one, two := NewServer(), NewServer()
	a, b := c.running("a", one), c.running("b", two)
	p := c.stream("p", one, 95)
	c.tokens(p, 700)
	c.tokens(a, 720)
	c.tokens(b, 720)
	c.want(a, "prefill of p")
	c.want(b, StallUpstream)
	c.counted(1, 0, 1)
}

// TestStallsListed: a stream lists its first 32 stalls and counts the
// rest; every one is counted by cause.
func TestStallsListed(t *testing.T) {
	c := newStallScene(t)
	a := c.stream("a", NewServer(), 0)
	var times []int
	for i := range 40 {
		times = append(times, 10+300*i)
	}
	c.tokens(a, times...)
	list, more := a.Stalls()
	if len(list) != maxListedStalls || more != 39-maxListedStalls {
		t.Errorf("%d stalls listed and %d more, want %d and %d", len(list), more, maxListedStalls, 39-maxListedStalls)
	}
	c.counted(0, 0, 39)
}
