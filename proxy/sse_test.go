package proxy

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

// recorded is a copy of a dispatched event.
type recorded struct {
	Type, Data string
	Oversized  bool
}

type eventLog []recorded

func (l *eventLog) handleEvent(ev sseEvent) {
	*l = append(*l, recorded{Type: string(ev.Type), Data: string(ev.Data), Oversized: ev.Oversized})
}

// splitInto feeds chunks to a new splitter and returns what it dispatched
// and whether the stream ended inside an event.
func splitInto(max int, chunks [][]byte) (eventLog, bool) {
	var got eventLog
	s := newSSESplitter(&got, max)
	for _, c := range chunks {
		s.write(c)
	}
	return got, s.end()
}

// chunkings returns the ways every case is fed: whole, cut in two at every
// byte boundary, one byte at a time, and cut at random points.
func chunkings(in []byte) map[string][][]byte {
	out := map[string][][]byte{"whole": {in}}
	for i := 1; i < len(in); i++ {
		out[fmt.Sprintf("split at %d", i)] = [][]byte{in[:i], in[i:]}
	}
	var bytewise [][]byte
	for i := range in {
		bytewise = append(bytewise, in[i:i+1])
	}
	out["byte by byte"] = bytewise
	for seed := range uint64(8) {
		rng := rand.New(rand.NewPCG(seed, 42))
		var parts [][]byte
		for rest := in; len(rest) > 0; {
			n := min(len(rest), 1+rng.IntN(7))
			parts = append(parts, rest[:n])
			rest = rest[n:]
		}
		out[fmt.Sprintf("random %d", seed)] = parts
	}
	return out
}

func TestSSESplitter(t *testing.T) {
	ev := func(data string) recorded { return recorded{Data: data} }
	typed := func(typ, data string) recorded { return recorded{Type: typ, Data: data} }
	cases := []struct {
		name      string
		in        string
		max       int
		want      eventLog
		truncated bool
	}{
		{name: "LF", in: "data: a\n\ndata: b\n\n", want: eventLog{ev("a"), ev("b")}},
		{name: "CRLF", in: "data: a\r\n\r\ndata: b\r\n\r\n", want: eventLog{ev("a"), ev("b")}},
		{name: "CR", in: "data: a\r\rdata: b\r\r", want: eventLog{ev("a"), ev("b")}},
		{name: "mixed line ends", in: "data: a\r\n\ndata: b\r\rdata: c\n\r\n", want: eventLog{ev("a"), ev("b"), ev("c")}},
		{name: "CR CR LF is two line ends", in: "data: a\r\r\ndata: b\n\n", want: eventLog{ev("a"), ev("b")}},
		{name: "comments are not events", in: ": keep-alive\n\n: ping\ndata: x\n\n:\n\n", want: eventLog{ev("x")}},
		{name: "event id retry fields", in: "event: delta\nid: 7\nretry: 1000\ndata: x\n\n", want: eventLog{typed("delta", "x")}},
		{name: "last event field wins", in: "event: a\nevent: b\ndata: x\n\n", want: eventLog{typed("b", "x")}},
		{name: "event type does not carry over", in: "event: a\ndata: 1\n\ndata: 2\n\n", want: eventLog{typed("a", "1"), ev("2")}},
		{name: "event without data is not dispatched", in: "event: ping\n\ndata: x\n\n", want: eventLog{ev("x")}},
		{name: "multi-line data joined with LF", in: "data: a\ndata: b\ndata:\ndata: c\n\n", want: eventLog{ev("a\nb\n\nc")}},
		{name: "multi-line data with CRLF", in: "data: a\r\ndata: b\r\n\r\n", want: eventLog{ev("a\nb")}},
		{name: "no space after colon", in: "data:x\n\n", want: eventLog{ev("x")}},
		{name: "only one space stripped", in: "data:  x \n\n", want: eventLog{ev(" x ")}},
		{name: "field name without colon", in: "data\n\n", want: eventLog{ev("")}},
		{name: "empty data line is an event", in: "data:\n\n", want: eventLog{ev("")}},
		{name: "unknown fields ignored", in: "foo: bar\ndata: x\nDATA: y\n\n", want: eventLog{ev("x")}},
		{name: "colons in value", in: "data: {\"a\":\"b:c\"}\n\n", want: eventLog{ev(`{"a":"b:c"}`)}},
		{name: "BOM at start stripped", in: "\xEF\xBB\xBFdata: x\n\n", want: eventLog{ev("x")}},
		{name: "BOM elsewhere kept", in: "data: \xEF\xBB\xBFx\n\n", want: eventLog{ev("\xEF\xBB\xBFx")}},
		{name: "DONE is data", in: "data: [DONE]\n\n", want: eventLog{ev("[DONE]")}},
		{name: "empty stream", in: ""},
		{name: "blank lines only", in: "\n\n\r\n\r"},
		{name: "binary garbage", in: "\x00\xff\x01garbage\x00\n\n", want: nil},
		{name: "cut mid-line", in: "data: a\n\ndata: b", want: eventLog{ev("a")}, truncated: true},
		{name: "missing final blank line", in: "data: a\n\ndata: b\n", want: eventLog{ev("a")}, truncated: true},
		{name: "ends after CR", in: "data: a\r\r", want: eventLog{ev("a")}},
		{
			name: "oversized line skipped, next event measured", max: 16,
			in:   "data: " + strings.Repeat("x", 40) + "\n\ndata: ok\n\n",
			want: eventLog{{Oversized: true}, ev("ok")},
		},
		{
			name: "oversized over several lines", max: 16,
			in:   "data: 0123456789\ndata: 0123456789\n\ndata: ok\n\n",
			want: eventLog{{Oversized: true}, ev("ok")},
		},
		{
			name: "oversized comment", max: 16,
			in:   ":" + strings.Repeat("c", 40) + "\ndata: ok\n\n",
			want: eventLog{{Oversized: true}},
		},
		{
			name: "oversized at end", max: 16,
			in:   "data: ok\n\ndata: " + strings.Repeat("x", 40),
			want: eventLog{ev("ok")}, truncated: true,
		},
	}
	for _, tc := range cases {
		if tc.max == 0 {
			tc.max = 1 << 20
		}
		for how, chunks := range chunkings([]byte(tc.in)) {
			got, truncated := splitInto(tc.max, chunks)
			if !slices.Equal(got, tc.want) || truncated != tc.truncated {
				t.Errorf("%s, %s: got %+v truncated=%v, want %+v truncated=%v", tc.name, how, got, truncated, tc.want, tc.truncated)
			}
		}
	}
}

// TestSSESplitterMemoryBound feeds an 8 MiB line in proxy-sized reads and
// checks that the splitter never holds more than its bound.
func TestSSESplitterMemoryBound(t *testing.T) {
	const max = 64 << 10
	var got eventLog
	s := newSSESplitter(&got, max)
	line := append([]byte("data: "), bytes.Repeat([]byte("x"), 8<<20)...)
	line = append(line, "\n\ndata: after\n\n"...)
	for rest := line; len(rest) > 0; {
		n := min(len(rest), 32<<10)
		s.write(rest[:n])
		rest = rest[n:]
		if cap(s.line) > max || cap(s.data) > max {
			t.Fatalf("splitter holds line=%d data=%d bytes, bound %d", cap(s.line), cap(s.data), max)
		}
	}
	want := eventLog{{Oversized: true}, {Data: "after"}}
	if !slices.Equal(got, want) {
		t.Fatalf("got %+v, want %+v", got, want)
	}
}

// FuzzSSESplitter: on any bytes, however cut, the splitter holds no more
// than its bound and dispatches the same events as from one piece.
func FuzzSSESplitter(f *testing.F) {
	f.Add([]byte("data: a\r\n\r\nevent: e\rdata: b\ndata: c\n\n:comment\n"), uint8(3))
	f.Add([]byte("data: "+strings.Repeat("x", 100)+"\n\ndata: y\n\n"), uint8(7))
	f.Fuzz(func(t *testing.T, in []byte, cut uint8) {
		const max = 64
		want, wantTrunc := splitInto(max, [][]byte{in})
		var got eventLog
		s := newSSESplitter(&got, max)
		step := int(cut%32) + 1
		for rest := in; len(rest) > 0; {
			n := min(step, len(rest))
			s.write(rest[:n])
			rest = rest[n:]
			if cap(s.line) > max || cap(s.data) > max || cap(s.typ) > max {
				t.Fatalf("holds line %d, data %d, type %d bytes; bound %d", cap(s.line), cap(s.data), cap(s.typ), max)
			}
		}
		if trunc := s.end(); !slices.Equal(got, want) || trunc != wantTrunc {
			t.Fatalf("cut every %d bytes: %+v %v; whole: %+v %v", step, got, trunc, want, wantTrunc)
		}
	})
}
