package events

import (
	"bytes"
	"slices"
	"strings"
	"testing"

	"github.com/itlproxy/itlproxy/proxy/internal/streamtest"
)

// spanLog records dispatched lines with where they lie in the stream.
type spanLog struct {
	eventLog
	spans []rawEvent
}

func (l *spanLog) handleEvent(ev rawEvent) {
	l.eventLog.handleEvent(ev)
	l.spans = append(l.spans, rawEvent{Start: ev.Start, End: ev.End, DataAt: ev.DataAt})
}

func splitLines(max int, chunks [][]byte) (*spanLog, bool) {
	got := &spanLog{}
	s := newNDJSONSplitter(got, max)
	for _, c := range chunks {
		s.write(c)
		if cap(s.line) > max {
			panic("ndjson splitter holds more than its bound")
		}
	}
	return got, s.end()
}

// ndjsonOracle splits a whole stream the plain way, as the splitter's doc
// comment says it does.
func ndjsonOracle(max int, in []byte) (eventLog, bool) {
	var want eventLog
	lines := bytes.Split(in, []byte{'\n'})
	for i, line := range lines {
		last := i == len(lines)-1
		switch {
		case len(line) > max && last:
			return want, true
		case len(line) > max:
			want = append(want, recorded{Oversized: true})
		case len(bytes.TrimSpace(bytes.TrimSuffix(line, []byte{'\r'}))) > 0:
			want = append(want, recorded{Data: string(bytes.TrimSuffix(line, []byte{'\r'}))})
		}
	}
	return want, false
}

func TestNDJSONSplitter(t *testing.T) {
	ev := func(data string) recorded { return recorded{Data: data} }
	cases := []struct {
		name      string
		in        string
		max       int
		want      eventLog
		truncated bool
	}{
		{name: "LF", in: "{\"a\":1}\n{\"b\":2}\n", want: eventLog{ev(`{"a":1}`), ev(`{"b":2}`)}},
		{name: "CRLF", in: "{}\r\n[]\r\n", want: eventLog{ev("{}"), ev("[]")}},
		{name: "blank lines skipped", in: "\n\r\n  \n{}\n\n", want: eventLog{ev("{}")}},
		{name: "a lone CR is not a line end", in: "a\rb\n", want: eventLog{ev("a\rb")}},
		{name: "last line without LF is dispatched", in: "{}\n{\"done\":true}", want: eventLog{ev("{}"), ev(`{"done":true}`)}},
		{name: "empty stream", in: ""},
		{name: "DONE is data", in: "[DONE]\n", want: eventLog{ev("[DONE]")}},
		{
			name: "oversized line skipped, next measured", max: 8,
			in: strings.Repeat("x", 20) + "\n{}\n", want: eventLog{{Oversized: true}, ev("{}")},
		},
		{name: "line of exactly the bound", max: 4, in: "abcd\n", want: eventLog{ev("abcd")}},
		{name: "oversized last line is truncated", max: 4, in: "{}\nabcdef", want: eventLog{ev("{}")}, truncated: true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			max := tc.max
			if max == 0 {
				max = 1 << 10
			}
			for how, chunks := range streamtest.Cuts([]byte(tc.in)) {
				got, trunc := splitLines(max, chunks)
				if !slices.Equal(got.eventLog, tc.want) || trunc != tc.truncated {
					t.Fatalf("%s: got %+v truncated %v, want %+v %v", how, got.eventLog, trunc, tc.want, tc.truncated)
				}
			}
			if want, trunc := ndjsonOracle(max, []byte(tc.in)); !slices.Equal(want, tc.want) || trunc != tc.truncated {
				t.Fatalf("the oracle disagrees with the table: %+v %v", want, trunc)
			}
		})
	}
}

// checkLineSpans: every dispatched line's data is the stream's bytes at
// DataAt, inside [Start, End), and the spans follow each other.
func checkLineSpans(t *testing.T, in []byte, got *spanLog) {
	t.Helper()
	prev := int64(0)
	for i, sp := range got.spans {
		if sp.Start < prev || sp.End < sp.Start || sp.End > int64(len(in)) {
			t.Fatalf("line %d spans [%d, %d) after %d in %q", i, sp.Start, sp.End, prev, in)
		}
		data := got.eventLog[i].Data
		if sp.DataAt >= 0 && !bytes.Equal(in[sp.DataAt:sp.DataAt+int64(len(data))], []byte(data)) {
			t.Fatalf("line %d: data %q is not at %d in %q", i, data, sp.DataAt, in)
		}
		prev = sp.End
	}
}

// FuzzNDJSONSplitter: on any bytes, however cut, the splitter holds no
// more than its bound, dispatches what the plain whole-stream split says,
// and places each line's data where it lies in the stream.
func FuzzNDJSONSplitter(f *testing.F) {
	f.Add([]byte("{\"a\":1}\r\n\n{\"done\":true}\n"), uint8(3))
	f.Add([]byte(strings.Repeat("x", 100)+"\n{}\nlast"), uint8(7))
	f.Fuzz(func(t *testing.T, in []byte, cut uint8) {
		const max = 64
		want, wantTrunc := ndjsonOracle(max, in)
		step := int(cut%32) + 1
		var chunks [][]byte
		for rest := in; len(rest) > 0; rest = rest[min(step, len(rest)):] {
			chunks = append(chunks, rest[:min(step, len(rest))])
		}
		got, trunc := splitLines(max, chunks)
		if !slices.Equal(got.eventLog, want) || trunc != wantTrunc {
			t.Fatalf("cut every %d bytes: %+v %v; whole: %+v %v", step, got.eventLog, trunc, want, wantTrunc)
		}
		checkLineSpans(t, in, got)
	})
}
