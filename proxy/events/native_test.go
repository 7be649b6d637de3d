package events

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"reflect"
	"strconv"
	"testing"
	"time"

	"github.com/itlproxy/itlproxy/proxy/internal/streamtest"
)

// TestNativeStreams reads each native fixture through a StreamScanner,
// however its bytes are cut: the token-bearing events, the end marker,
// the usage and the engine's timing come out the same.
func TestNativeStreams(t *testing.T) {
	cases := []struct {
		file                string
		endpoint            Endpoint
		events, in, out     int64
		engineTPOT, engTTFT time.Duration
	}{
		// Recorded: eval_duration 334808836 ns / eval_count 40;
		// load_duration 2349313 + prompt_eval_duration 10552477.
		{"ollama_chat.ndjson", OllamaChat, 40, 3, 40, 8370220, 12901790},
		{"ollama_generate.ndjson", OllamaGenerate, 40, 3, 40, 12616627, 12433731},
		{"llamacpp_completion.sse", LlamaCppCompletion, 7, 3, 7, 8762428, 12512000},
		{"tgi_generate_stream.sse", TGIGenerate, 7, 3, 8, 0, 0},
		{"sglang_generate.sse", SGLangGenerate, 7, 3, 7, 0, 0},
	}
	for _, tc := range cases {
		t.Run(tc.file, func(t *testing.T) {
			raw := streamtest.ReadNative(t, tc.file)
			for how, chunks := range streamtest.Cuts(raw) {
				tally := NewTally()
				at := time.Unix(0, 0)
				s := NewScanner(tc.endpoint, 1<<16, func(e Event, st Stamp) {
					if e.Invalid || e.Oversized {
						t.Fatalf("%s: unreadable event %+v", how, e)
					}
					tally.Add(e, st.At)
				})
				for _, c := range chunks {
					at = at.Add(time.Millisecond)
					s.Write(c, Stamp{At: at})
				}
				if s.End() {
					t.Fatalf("%s: truncated", how)
				}
				if tally.Events != tc.events || tally.Input != tc.in || tally.Output != tc.out || !tally.Done || tally.Failed {
					t.Fatalf("%s: tally %+v; want %d events, usage %d/%d, done", how, tally, tc.events, tc.in, tc.out)
				}
				if tally.EngineTPOT != tc.engineTPOT || tally.EngineTTFT != tc.engTTFT {
					t.Fatalf("%s: engine TPOT %v TTFT %v, want %v %v", how, tally.EngineTPOT, tally.EngineTTFT, tc.engineTPOT, tc.engTTFT)
				}
			}
		})
	}
}

// TestNativeBodies reads each non-streamed response for its usage.
func TestNativeBodies(t *testing.T) {
	for _, tc := range []struct {
		file       string
		endpoint   Endpoint
		in, out    int64
		engineTPOT time.Duration
	}{
		{"ollama_chat.json", OllamaChat, 3, 40, 8370220},
		{"llamacpp_completion.json", LlamaCppCompletion, 3, 7, 8762428},
		{"tgi_generate.json", TGIGenerate, -1, 8, 0},
		{"sglang_generate.json", SGLangGenerate, 3, 7, 0},
	} {
		e := ParseJSON(tc.endpoint, streamtest.ReadNative(t, tc.file))
		if e.Invalid || !e.HasUsage || e.InputTokens != tc.in || e.OutputTokens != tc.out || e.EngineTPOT != tc.engineTPOT {
			t.Errorf("%s: %+v; want usage %d/%d, engine TPOT %v", tc.file, e, tc.in, tc.out, tc.engineTPOT)
		}
	}
	if e := ParseJSON(OllamaChat, streamtest.ReadNative(t, "ollama_chat_unknown_model.json")); !e.Failed || e.Token {
		t.Errorf("the recorded 404 body reads as %+v; want a failure", e)
	}
}

// TestNativeEvents: each API's token rule, end marker and failures, on
// the shapes that are not in the fixtures.
func TestNativeEvents(t *testing.T) {
	type want struct{ token, done, failed, invalid bool }
	cases := []struct {
		name     string
		endpoint Endpoint
		data     string
		want     want
	}{
		{"ollama thinking", OllamaChat, `{"message":{"role":"assistant","content":"","thinking":"hm"},"done":false}`, want{token: true}},
		{"ollama tool call", OllamaChat, `{"message":{"role":"assistant","content":"","tool_calls":[{"function":{"name":"f","arguments":{}}}]},"done":false}`, want{token: true}},
		{"ollama empty tool calls", OllamaChat, `{"message":{"content":"","tool_calls":[]},"done":false}`, want{}},
		{"ollama null message", OllamaChat, `{"message":null,"done":false}`, want{}},
		{"ollama generate thinking", OllamaGenerate, `{"response":"","thinking":"x","done":false}`, want{token: true}},
		{"ollama last content repeated key", OllamaGenerate, `{"response":"x","response":"","done":false}`, want{}},
		{"ollama error mid-stream", OllamaChat, `{"error":"an error was encountered while running the model"}`, want{failed: true}},
		{"ollama done false", OllamaChat, `{"message":{"content":"x"},"done":false}`, want{token: true}},
		{"ollama not an object", OllamaChat, `["done"]`, want{invalid: true}},
		{"ollama cut", OllamaChat, `{"message":{"content":"x"`, want{invalid: true}},
		{"llama.cpp empty content", LlamaCppCompletion, `{"content":"","stop":false}`, want{}},
		{"llama.cpp error", LlamaCppCompletion, `{"error":{"code":500,"message":"x","type":"server_error"}}`, want{failed: true}},
		{"tgi special token", TGIGenerate, `{"index":1,"token":{"id":2,"text":"</s>","special":true},"generated_text":null,"details":null}`, want{}},
		{"tgi error", TGIGenerate, `{"error":"Request failed during generation","error_type":"generation"}`, want{failed: true}},
		{"tgi token of a wrong type is unparsable", TGIGenerate, `{"token":"x"}`, want{invalid: true}},
		{"sglang empty text", SGLangGenerate, `{"text":"","meta_info":{"completion_tokens":0}}`, want{}},
		{"sglang error", SGLangGenerate, `{"error":{"message":"x"}}`, want{failed: true}},
	}
	for _, tc := range cases {
		e := ParseJSON(tc.endpoint, []byte(tc.data))
		if got := (want{e.Token, e.Done, e.Failed, e.Invalid}); got != tc.want {
			t.Errorf("%s: %+v, want %+v", tc.name, got, tc.want)
		}
	}
}

// TestEngineTimingBounds: timing the engine cannot have measured is not
// reported.
func TestEngineTimingBounds(t *testing.T) {
	for _, data := range []string{
		`{"done":true,"eval_count":0,"eval_duration":5}`,
		`{"done":true,"eval_count":4,"eval_duration":-5}`,
		`{"done":true,"eval_count":4,"eval_duration":"5"}`,
	} {
		if e := ParseJSON(OllamaChat, []byte(data)); e.Invalid || e.EngineTPOT != 0 {
			t.Errorf("%s: engine TPOT %v", data, e.EngineTPOT)
		}
	}
	for _, data := range []string{
		`{"stop":true,"timings":{"predicted_per_token_ms":-1}}`,
		`{"stop":true,"timings":{"predicted_per_token_ms":1e300}}`,
		`{"stop":true,"timings":null}`,
	} {
		if e := ParseJSON(LlamaCppCompletion, []byte(data)); e.Invalid || e.EngineTPOT != 0 {
			t.Errorf("%s: engine TPOT %v", data, e.EngineTPOT)
		}
	}
	if e := ParseJSON(LlamaCppCompletion, []byte(`{"stop":true,"timings":{"predicted_per_token_ms":2.5e1}}`)); e.EngineTPOT != 25*time.Millisecond {
		t.Errorf("an exponent: engine TPOT %v, want 25ms", e.EngineTPOT)
	}
	if e := ParseJSON(LlamaCppCompletion, []byte(`{"stop":false,"tokens_predicted":3,"timings":{"predicted_per_token_ms":2}}`)); e.HasUsage || e.EngineTPOT != 0 {
		t.Errorf("a partial event's running counts are not the usage: %+v", e)
	}
}

// TestNDJSONScannerAllocs: reading an NDJSON stream costs no allocation
// per line once the scanner exists.
func TestNDJSONScannerAllocs(t *testing.T) {
	raw := streamtest.ReadNative(t, "ollama_chat.ndjson")
	lines := 0
	s := NewScanner(OllamaChat, 1<<16, func(Event, Stamp) { lines++ })
	allocs := testing.AllocsPerRun(50, func() {
		for i := 0; i < len(raw); i += 37 { // lines cut across writes
			s.Write(raw[i:min(i+37, len(raw))], Stamp{})
		}
	})
	if allocs != 0 || lines != 51*41 {
		t.Fatalf("%v allocations per stream, %d lines; want 0 and %d", allocs, lines, 51*41)
	}
}

// FuzzOllamaEvent holds Ollama's line reader to encoding/json, as
// FuzzParseChunk holds the chunk reader: on every input encoding/json
// accepts, both agree on what the line says. On any input, no panic.
func FuzzOllamaEvent(f *testing.F) {
	for _, line := range bytes.Split(streamtest.ReadNative(f, "ollama_chat.ndjson"), []byte{'\n'})[38:] {
		f.Add(line)
	}
	f.Add([]byte(`{"message":{"content":"","tool_calls":[{"function":{"name":"f"}}]},"done":false}`))
	f.Add([]byte(`{"response":"","thinking":"x","done":true,"eval_count":2,"eval_duration":9,"prompt_eval_duration":3}`))
	f.Add([]byte(`{"error":"x","message":null}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		got := parseOllamaEvent(data)
		v, valid := refDecode(data)
		if !valid || hasDuplicateKeys(data) {
			return
		}
		if want := referenceOllama(v); !reflect.DeepEqual(got, want) {
			t.Fatalf("parseOllamaEvent(%q) = %+v; encoding/json says %+v", data, got, want)
		}
	})
}

// refDecode decodes one JSON text, numbers as json.Number.
func refDecode(data []byte) (any, bool) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var v any
	if dec.Decode(&v) != nil {
		return nil, false
	}
	_, err := dec.Token()
	return v, errors.Is(err, io.EOF)
}

// referenceOllama is parseOllamaEvent written plainly.
func referenceOllama(v any) Event {
	invalid := Event{Invalid: true, InputTokens: -1, OutputTokens: -1}
	top, isObj := v.(map[string]any)
	if !isObj {
		return invalid
	}
	message, ok := refObject(top["message"], func(m map[string]any) (bool, bool) {
		calls, _ := m["tool_calls"].([]any)
		return refNonEmpty(m["content"]) || refNonEmpty(m["thinking"]) || len(calls) > 0, true
	})
	if !ok {
		return invalid
	}
	e := Event{
		Token:        message || refNonEmpty(top["response"]) || refNonEmpty(top["thinking"]),
		Done:         top["done"] == true,
		Failed:       top["error"] != nil,
		InputTokens:  refCount(top["prompt_eval_count"]),
		OutputTokens: refCount(top["eval_count"]),
	}
	e.HasUsage = e.InputTokens >= 0 || e.OutputTokens >= 0
	evalNs, promptNs, loadNs := refCount(top["eval_duration"]), refCount(top["prompt_eval_duration"]), refCount(top["load_duration"])
	if evalNs > 0 && e.OutputTokens > 0 {
		e.EngineTPOT = time.Duration(evalNs / e.OutputTokens)
	}
	if promptNs > 0 {
		e.EngineTTFT = time.Duration(promptNs + max(loadNs, 0))
	}
	return e
}

// TestNumber: the decimal reader agrees with strconv on the numbers
// engines write, and on extremes, within a nanosecond of a millisecond
// count.
func TestNumber(t *testing.T) {
	for _, in := range []string{"8.762428571428572", "30.1", "0", "1E+2", "2.5e-1", "0.0000e350", "1e-400", "1e400",
		"123456789012345678901234567890e-25", "0.000001", "86400000", "86400000.5"} {
		s := jsonScan{b: []byte(in)}
		want, _ := strconv.ParseFloat(in, 64)
		if got, w := millis(s.number()), millis(want); max(got-w, w-got) > 1 {
			t.Errorf("%s: %v ms, strconv %v ms", in, got, w)
		}
	}
	for _, in := range []string{"-1", `"5"`, "null", "1.2.3"} {
		if s := (jsonScan{b: []byte(in)}); s.number() != -1 {
			t.Errorf("%s read as a number", in)
		}
	}
}

// TestLlamaCppChatTimings: llama.cpp server's OpenAI-compatible chat
// stream carries its timings on the last chunk, read as on /completion.
func TestLlamaCppChatTimings(t *testing.T) {
	tally := NewTally()
	s := NewScanner(ChatCompletions, 1<<16, func(e Event, at Stamp) { tally.Add(e, at.At) })
	s.Write(streamtest.Read(t, "llamacpp_chat.sse"), Stamp{At: time.Unix(0, 0)})
	if tally.EngineTTFT != 30100*time.Microsecond || tally.EngineTPOT != 0 {
		t.Errorf("engine TTFT %v, TPOT %v; want 30.1ms and none (the fixture has no predicted_per_token_ms)", tally.EngineTTFT, tally.EngineTPOT)
	}
}
