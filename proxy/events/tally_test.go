package events

import (
	"testing"
	"time"
)

func TestTally(t *testing.T) {
	t0 := time.Unix(1000, 0)
	ms := func(n int) time.Time { return t0.Add(time.Duration(n) * time.Millisecond) }
	tok := Event{Token: true, InputTokens: -1, OutputTokens: -1}
	withUsage := func(e Event, in, out int64) Event {
		e.HasUsage, e.InputTokens, e.OutputTokens = true, in, out
		return e
	}
	type arrival struct {
		e  Event
		at int // ms after t0
	}
	cases := []struct {
		name          string
		in            []arrival
		tokens        []Token // one per token-bearing event
		input, output int64
		tpot          time.Duration // 0: none
		average       float64
	}{
		{
			name:   "usage at the end",
			in:     []arrival{{tok, 0}, {tok, 10}, {tok, 20}, {tok, 30}, {withUsage(Event{}, 5, 8), 31}, {Event{Done: true}, 32}},
			tokens: []Token{{First: true}, {Gap: 10 * time.Millisecond}, {Gap: 10 * time.Millisecond}, {Gap: 10 * time.Millisecond}},
			input:  5, output: 8, tpot: 30 * time.Millisecond / 7, average: 2,
		},
		{
			name:   "cumulative usage on every event",
			in:     []arrival{{withUsage(tok, 3, 1), 0}, {withUsage(tok, 3, 3), 10}, {withUsage(tok, 3, 3), 30}, {withUsage(tok, -1, 4), 40}},
			tokens: []Token{{First: true, Tokens: 1}, {Gap: 10 * time.Millisecond, Tokens: 2}, {Gap: 20 * time.Millisecond, Tokens: 1}, {Gap: 10 * time.Millisecond, Tokens: 1}},
			input:  3, output: 4, tpot: 40 * time.Millisecond / 3,
		},
		{
			name:   "no usage: the events count",
			in:     []arrival{{tok, 0}, {Event{Invalid: true, Token: true}, 5}, {Event{Oversized: true}, 6}, {tok, 20}},
			tokens: []Token{{First: true}, {Gap: 20 * time.Millisecond}},
			input:  -1, output: -1, tpot: 20 * time.Millisecond,
		},
		{
			name:   "one token: no TPOT",
			in:     []arrival{{withUsage(Event{}, 25, -1), 0}, {tok, 7}, {withUsage(Event{}, -1, 1), 9}},
			tokens: []Token{{First: true}},
			input:  25, output: 1, average: 1,
		},
	}
	for _, c := range cases {
		tl := NewTally()
		var got []Token
		var first time.Time
		for _, a := range c.in {
			if tk, ok := tl.Add(a.e, ms(a.at)); ok {
				got = append(got, tk)
				if tk.First {
					first = ms(a.at)
				}
			}
		}
		if len(got) != len(c.tokens) {
			t.Errorf("%s: %d token-bearing events, want %d", c.name, len(got), len(c.tokens))
			continue
		}
		for i := range got {
			if got[i] != c.tokens[i] {
				t.Errorf("%s: token %d is %+v, want %+v", c.name, i, got[i], c.tokens[i])
			}
		}
		tpot, ok := tl.TPOT()
		if tl.Input != c.input || tl.Output != c.output || ok != (c.tpot > 0) || tpot != c.tpot || tl.AverageTokens() != c.average {
			t.Errorf("%s: input %d output %d TPOT %v %v average %v; want %d %d %v %v", c.name, tl.Input, tl.Output, tpot, ok, tl.AverageTokens(), c.input, c.output, c.tpot, c.average)
		}
		if tl.Events != int64(len(c.tokens)) || !tl.First.Equal(first) {
			t.Errorf("%s: %d events from %v", c.name, tl.Events, tl.First)
		}
	}
}

func TestTallyEnds(t *testing.T) {
	tl := NewTally()
	for _, e := range []Event{{Failed: true}, {Incomplete: true}, {Done: true}} {
		tl.Add(e, time.Unix(0, 0))
	}
	if !tl.Failed || !tl.Incomplete || !tl.Done || tl.OutputTokens() != 0 {
		t.Errorf("flags %+v", tl)
	}
}
