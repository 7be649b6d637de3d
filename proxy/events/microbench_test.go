//go:build unix

package events

import (
	"bytes"
	"fmt"
	"strings"
	"testing"

	"github.com/itlproxy/itlproxy/proxy/internal/streamtest"
)

// Each stage of the proxy's measuring path alone: the SSE splitter and the
// chunk reader, reported per event (ns/event, B/event, allocs/event,
// cpu-ns/event) as the proxy's own benchmarks of whole streams are, and
// tabulated with them in BENCHMARKS.md by bench/run.sh.

// countEvents is an eventHandler that only counts.
type countEvents int

func (c *countEvents) handleEvent(rawEvent) { *c++ }

// BenchmarkSSESplitter is the splitter alone over a recorded vLLM stream:
// one event per write (events a token apart, as a proxy reads them), each
// event cut in two writes (the partial-line path), and the whole stream in
// one write (events that arrive together).
func BenchmarkSSESplitter(b *testing.B) {
	raw := streamtest.Read(b, "vllm_chat_usage.sse")
	evs := streamtest.Events(string(raw))
	var halves [][]byte
	for _, e := range evs {
		halves = append(halves, e[:len(e)/2], e[len(e)/2:])
	}
	for _, tc := range []struct {
		name   string
		writes [][]byte
	}{
		{"event-per-write", evs},
		{"split-events", halves},
		{"stream-per-write", [][]byte{raw}},
	} {
		b.Run(tc.name, func(b *testing.B) {
			var n countEvents
			s := newSSESplitter(&n, 1<<20)
			b.SetBytes(int64(len(raw)))
			streamtest.PerEvent(b, len(evs), func() {
				for _, w := range tc.writes {
					s.write(w)
				}
			})
			if int(n) != b.N*len(evs) {
				b.Fatalf("dispatched %d events, want %d", n, b.N*len(evs))
			}
		})
	}
}

// largeChunk is a content chunk with logprobs (top 5 per token, as vLLM
// sends with "logprobs": true, "top_logprobs": 5): about 1.5 KB of JSON the
// reader must skip to find the delta.
func largeChunk() []byte {
	var top []string
	for i := range 5 {
		top = append(top, fmt.Sprintf(`{"token":"tok%d","logprob":-%d.25,"bytes":[116,111,107,%d]}`, i, i, 48+i))
	}
	entry := fmt.Sprintf(`{"token":"Hello","logprob":-0.0123,"bytes":[72,101,108,108,111],"top_logprobs":[%s]}`, strings.Join(top, ","))
	return []byte(`{"id":"chatcmpl-4b1e3f0c9a","object":"chat.completion.chunk","created":1763700000,"model":"meta-llama/Llama-3.1-8B-Instruct",` +
		`"choices":[{"index":0,"logprobs":{"content":[` + entry + `,` + entry + `]},"finish_reason":null,"delta":{"content":"Hello"}}]}`)
}

// BenchmarkParseChunk is the chunk reader alone (no splitting) on the
// shapes it meets most: a small content chunk, a large one with logprobs,
// a tool-call arguments delta, a reasoning delta, and the usage chunk.
func BenchmarkParseChunk(b *testing.B) {
	data := func(file string, i int) []byte {
		evs := streamtest.Events(string(streamtest.Read(b, file)))
		return bytes.TrimSuffix(bytes.TrimPrefix(evs[i], []byte("data: ")), []byte("\n\n"))
	}
	for _, tc := range []struct {
		name        string
		chunk       []byte
		token, uses bool
	}{
		{"small", data("vllm_chat_usage.sse", 1), true, false},
		{"large-logprobs", largeChunk(), true, false},
		{"tool-call", data("openai_tool_calls.sse", 1), true, false},
		{"reasoning", data("sglang_reasoning.sse", 1), true, false},
		{"usage", data("vllm_chat_usage.sse", 9), false, true},
	} {
		c, ok := parseChunk(tc.chunk)
		if !ok || c.token != tc.token || c.hasUsage != tc.uses {
			b.Fatalf("%s: parseChunk(%s) = %+v, %v; the fixture moved", tc.name, tc.chunk, c, ok)
		}
		b.Run(tc.name, func(b *testing.B) {
			b.SetBytes(int64(len(tc.chunk)))
			streamtest.PerEvent(b, 1, func() {
				parseChunk(tc.chunk)
			})
		})
	}
}

// BenchmarkNDJSONScanner is the NDJSON splitter and Ollama's line reader
// over a recorded /api/chat stream: one line per write, and the whole
// stream in one write.
func BenchmarkNDJSONScanner(b *testing.B) {
	raw := streamtest.ReadNative(b, "ollama_chat.ndjson")
	lines := bytes.SplitAfter(raw, []byte{'\n'})
	lines = lines[:len(lines)-1] // the empty rest after the last '\n'
	for _, tc := range []struct {
		name   string
		writes [][]byte
	}{
		{"line-per-write", lines},
		{"stream-per-write", [][]byte{raw}},
	} {
		b.Run(tc.name, func(b *testing.B) {
			n := 0
			s := NewScanner(OllamaChat, 1<<20, func(Event, Stamp) { n++ })
			b.SetBytes(int64(len(raw)))
			streamtest.PerEvent(b, len(lines), func() {
				for _, w := range tc.writes {
					s.Write(w, Stamp{})
				}
			})
			if n != b.N*len(lines) {
				b.Fatalf("read %d lines, want %d", n, b.N*len(lines))
			}
		})
	}
}
