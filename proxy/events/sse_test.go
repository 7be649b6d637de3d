package events

import (
	"bytes"
	"slices"
	"strings"
	"testing"

	"github.com/itlproxy/itlproxy/proxy/internal/streamtest"
)

// recorded is a copy of a dispatched event.
type recorded struct {
	Type, Data string
	Oversized  bool
}

type eventLog []recorded

func (l *eventLog) handleEvent(ev rawEvent) {
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
		for how, chunks := range streamtest.Cuts([]byte(tc.in)) {
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

// spans records where each dispatched event lies in the stream.
type spans []rawEvent

func (l *spans) handleEvent(ev rawEvent) {
	*l = append(*l, rawEvent{Data: bytes.Clone(ev.Data), Oversized: ev.Oversized, Start: ev.Start, End: ev.End, DataAt: ev.DataAt})
}

// checkSpans holds the spans of the events split from in, cut as chunks,
// to their definition: in order and apart; each from the end of a blank
// line (or the start) to the end of its own; the data of a one-line event
// where DataAt says; and the same however in is cut, but for a '\n' that
// completes a "\r\n" after a cut.
func checkSpans(t *testing.T, in []byte, chunks [][]byte) {
	t.Helper()
	var got, whole spans
	s, w := newSSESplitter(&got, 64), newSSESplitter(&whole, 64)
	for _, c := range chunks {
		s.write(c)
	}
	w.write(in)
	if len(got) != len(whole) {
		t.Fatalf("%d events cut, %d whole", len(got), len(whole))
	}
	lineEnd := func(i int64) bool { return i == 0 || in[i-1] == '\n' || in[i-1] == '\r' }
	prev := int64(0)
	for i, ev := range got {
		if ev.Start < prev || ev.End <= ev.Start || ev.End > int64(len(in)) || !lineEnd(ev.Start) || !lineEnd(ev.End) {
			t.Fatalf("event %d spans [%d, %d) after %d in %q", i, ev.Start, ev.End, prev, in)
		}
		if ev.DataAt >= 0 && !bytes.Equal(in[ev.DataAt:ev.DataAt+int64(len(ev.Data))], ev.Data) {
			t.Fatalf("event %d: data %q is not at %d in %q", i, ev.Data, ev.DataAt, in)
		}
		if ev.DataAt >= 0 && (ev.DataAt < ev.Start || ev.DataAt > ev.End) {
			t.Fatalf("event %d: data at %d, outside [%d, %d)", i, ev.DataAt, ev.Start, ev.End)
		}
		end := ev.End
		if in[end-1] == '\r' && end < int64(len(in)) && in[end] == '\n' {
			end++ // the '\n' a later write brought
		}
		if ev.Start != whole[i].Start || end != whole[i].End || ev.DataAt != whole[i].DataAt {
			t.Fatalf("event %d: cut [%d, %d) data at %d, whole [%d, %d) data at %d", i, ev.Start, ev.End, ev.DataAt, whole[i].Start, whole[i].End, whole[i].DataAt)
		}
		prev = ev.End
	}
}

func TestSSESplitterSpans(t *testing.T) {
	for _, in := range []string{
		"data: a\n\ndata: b\r\n\r\n: c\n\nevent: e\ndata:x\r\rdata: 1\ndata: 2\n\n",
		"\xEF\xBB\xBFdata: a\r\n\r\ndata: b\r\n\r\n",
		"data: " + strings.Repeat("x", 100) + "\n\nid: 1\n\ndata: {}\n\n",
	} {
		for how, chunks := range streamtest.Cuts([]byte(in)) {
			t.Run(how, func(t *testing.T) { checkSpans(t, []byte(in), chunks) })
		}
	}
}

// FuzzSSESplitter: on any bytes, however cut, the splitter holds no more
// than its bound, dispatches the same events as from one piece, and places
// them in the stream as checkSpans says.
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
		var chunks [][]byte
		for rest := in; len(rest) > 0; rest = rest[min(step, len(rest)):] {
			chunks = append(chunks, rest[:min(step, len(rest))])
		}
		checkSpans(t, in, chunks)
	})
}
