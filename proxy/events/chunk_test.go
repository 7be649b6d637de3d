package events

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"reflect"
	"regexp"
	"strconv"
	"testing"
	"time"
)

func TestParseChunk(t *testing.T) {
	tok := chunk{token: true, usage: noUsage}
	none := chunk{usage: noUsage}
	cases := []struct {
		name string
		in   string
		want chunk
		ok   bool
	}{
		{"content", `{"choices":[{"index":0,"delta":{"content":"Hi"},"finish_reason":null}]}`, tok, true},
		{"role only", `{"choices":[{"index":0,"delta":{"role":"assistant","content":""}}]}`, none, true},
		{"role and content together (Ollama)", `{"choices":[{"index":0,"delta":{"role":"assistant","content":"Hi"}}]}`, tok, true},
		{"null content", `{"choices":[{"delta":{"content":null}}]}`, none, true},
		{"empty delta with finish", `{"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}`, none, true},
		{"escaped content", `{"choices":[{"delta":{"content":"\n"}}]}`, tok, true},
		{"the response's model", `{"model":"llama-3.1-8b","choices":[{"delta":{"content":"x"}}]}`, chunk{token: true, usage: noUsage, model: []byte("llama-3.1-8b")}, true},
		{"a model that is not a string", `{"model":7,"choices":[]}`, none, true},
		{"whitespace content is output", `{"choices":[{"delta":{"content":" "}}]}`, tok, true},
		{"reasoning_content", `{"choices":[{"delta":{"reasoning_content":"think"}}]}`, tok, true},
		{"reasoning", `{"choices":[{"delta":{"reasoning":"think","content":null}}]}`, tok, true},
		{"refusal", `{"choices":[{"delta":{"refusal":"no"}}]}`, tok, true},
		{"tool call name", `{"choices":[{"delta":{"tool_calls":[{"index":0,"id":"c1","type":"function","function":{"name":"get","arguments":""}}]}}]}`, tok, true},
		{"tool call arguments", `{"choices":[{"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{\"a\""}}]}}]}`, tok, true},
		{"tool call empty", `{"choices":[{"delta":{"tool_calls":[{"index":0,"function":{"arguments":""}}]}}]}`, none, true},
		{"function_call", `{"choices":[{"delta":{"function_call":{"arguments":"{}"}}}]}`, tok, true},
		{"completions text", `{"object":"text_completion","choices":[{"index":0,"text":" the","logprobs":null}]}`, tok, true},
		{"completions empty text", `{"choices":[{"index":0,"text":"","finish_reason":"length"}]}`, none, true},
		{"several choices, one with output", `{"choices":[{"index":0,"delta":{}},{"index":1,"delta":{"content":"b"}}]}`, tok, true},
		{"usage only", `{"choices":[],"usage":{"prompt_tokens":12,"completion_tokens":34,"total_tokens":46}}`,
			chunk{usage: usage{12, 34}, hasUsage: true}, true},
		{"prompt_tokens include cached tokens: the cache fields add nothing", `{"choices":[],"usage":{"prompt_tokens":100,"input_tokens":5,"cache_read_input_tokens":50}}`,
			chunk{usage: usage{100, -1}, hasUsage: true}, true},
		{"usage null", `{"choices":[{"delta":{"content":"x"}}],"usage":null}`, tok, true},
		{"usage with token (continuous usage)", `{"choices":[{"delta":{"content":"x"}}],"usage":{"prompt_tokens":5,"completion_tokens":1}}`,
			chunk{token: true, usage: usage{5, 1}, hasUsage: true}, true},
		{"usage fraction is not a count", `{"usage":{"prompt_tokens":1.5,"completion_tokens":2e1}}`, chunk{usage: noUsage, hasUsage: true}, true},
		{"usage huge is not a count", `{"usage":{"completion_tokens":12345678901234567}}`, chunk{usage: noUsage, hasUsage: true}, true},
		{"error object", `{"error":{"message":"boom","type":"server_error","code":500}}`, chunk{usage: noUsage, failed: true}, true},
		{"error null", `{"error":null,"choices":[]}`, none, true},
		{"vLLM object error", `{"object":"error","message":"boom","code":400}`, chunk{usage: noUsage, failed: true}, true},
		{"unknown nested fields skipped", `{"x":{"choices":[{"delta":{"content":"no"}}]},"choices":[{"logprobs":{"content":[{"token":"a","bytes":[1,2]}]},"delta":{"content":"y"}}]}`, tok, true},
		{"escaped key", `{"choices":[{"delta":{"cont\u0065nt":"x"}}]}`, tok, true},
		{"last duplicate wins", `{"choices":[{"delta":{"content":"x","content":""}}]}`, none, true},
		{"whitespace everywhere", " {\n\t\"choices\" : [ { \"delta\" : { \"content\" : \"x\" } } ] }\r\n", tok, true},
		{"not JSON", `keep-alive`, none, false},
		{"truncated", `{"choices":[{"delta":{"content":"x"`, none, false},
		{"trailing garbage", `{"choices":[]} x`, none, false},
		{"array at top", `[{"choices":[]}]`, none, false},
		{"choices not an array", `{"choices":"x"}`, none, false},
		{"trailing comma", `{"choices":[],}`, none, false},
		{"empty", ``, none, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := parseChunk([]byte(tc.in))
			if ok != tc.ok || ok && !sameChunk(got, tc.want) {
				t.Errorf("parseChunk(%s) = %+v, %v; want %+v, %v", tc.in, got, ok, tc.want, tc.ok)
			}
			if ref, refOK, valid := referenceChunk([]byte(tc.in)); valid && (refOK != ok || ok && !sameChunk(ref, got)) {
				t.Errorf("encoding/json reference disagrees: %+v, %v", ref, refOK)
			}
		})
	}
}

// FuzzParseChunk holds the allocation-free reader to encoding/json: on
// every input that encoding/json accepts as JSON, both must agree on
// whether it is a chunk and on what it says. On any input, no panic.
func FuzzParseChunk(f *testing.F) {
	for _, seed := range []string{
		`{"choices":[{"index":0,"delta":{"content":"Hi"}}]}`,
		`{"choices":[{"delta":{"tool_calls":[{"function":{"name":"f","arguments":"{}"}}]}}],"usage":null}`,
		`{"choices":[],"usage":{"prompt_tokens":1,"completion_tokens":2}}`,
		`{"choices":[{"text":"a"},{"text":""}],"object":"text_completion"}`,
		`{"error":{"message":"x"}}`,
		`{"object":"error"}`,
		`{"choices":[{"delta":{"cont\u0065nt":"x","content":""}}]}`,
		`[1,{"a":[true,false,null,-1.5e3,"\"\\"]}]`,
		`{"choices":[],"timings":{"prompt_n":12,"prompt_ms":30.1,"predicted_per_token_ms":8.762428571428572e0}}`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		got, ok := parseChunk(data)
		ref, refOK, valid := referenceChunk(data)
		if !valid || hasDuplicateKeys(data) {
			// A map cannot tell which of two same-named members came first;
			// the table test covers duplicates.
			return
		}
		if ok != refOK || ok && !sameChunk(got, ref) {
			t.Fatalf("parseChunk(%q) = %+v, %v; encoding/json says %+v, %v", data, got, ok, ref, refOK)
		}
	})
}

// referenceChunk is parseChunk written plainly with encoding/json. valid
// reports whether data is JSON at all; ok whether it has a chunk's shape.
func referenceChunk(data []byte) (c chunk, ok, valid bool) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var v any
	if dec.Decode(&v) != nil {
		return c, false, false
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return c, false, false
	}
	c.usage = noUsage
	top, isObj := v.(map[string]any)
	if !isObj {
		return c, false, true
	}
	if ch, present := top["choices"]; present {
		if c.token, ok = refAny(ch, refChoice); !ok {
			return c, false, true
		}
	}
	if u, present := top["usage"]; present && u != nil {
		m, isObj := u.(map[string]any)
		if !isObj {
			return c, false, true
		}
		c.hasUsage = true
		input := refCount(m["input_tokens"])
		if input >= 0 {
			input += max(refCount(m["cache_read_input_tokens"]), 0) + max(refCount(m["cache_creation_input_tokens"]), 0)
		}
		c.usage = usage{
			firstCount(refCount(m["prompt_tokens"]), input),
			firstCount(refCount(m["completion_tokens"]), refCount(m["output_tokens"])),
		}
	}
	obj, _ := top["object"].(string)
	c.failed = top["error"] != nil || obj == "error"
	if model, isString := top["model"].(string); isString {
		c.model = []byte(model)
	}
	if t, present := top["timings"]; present && t != nil {
		m, isObj := t.(map[string]any)
		if !isObj {
			return c, false, true
		}
		c.engine = engineTimes{tpot: refMillis(m["predicted_per_token_ms"]), ttft: refMillis(m["prompt_ms"])}
	}
	return c, true, true
}

// refMillis reads a number of milliseconds as millis does.
func refMillis(v any) time.Duration {
	n, ok := v.(json.Number)
	if !ok {
		return 0
	}
	f, _ := strconv.ParseFloat(n.String(), 64)
	return millis(f)
}

// sameChunk compares chunks, the engine's timing within the rounding of
// a decimal read without strconv (a nanosecond or two), and the model as
// the reader keeps it: raw, so compared byte for byte only when it holds
// no escape (a decoded reference would differ there).
func sameChunk(a, b chunk) bool {
	near := func(x, y time.Duration) bool { return max(x-y, y-x) <= 2+max(x, y)/1e12 }
	if !near(a.engine.tpot, b.engine.tpot) || !near(a.engine.ttft, b.engine.ttft) {
		return false
	}
	if (a.model == nil) != (b.model == nil) ||
		!bytes.ContainsRune(a.model, '\\') && !bytes.ContainsRune(b.model, '\\') && !bytes.Equal(a.model, b.model) {
		return false
	}
	a.engine, b.engine = engineTimes{}, engineTimes{}
	a.model, b.model = nil, nil
	return reflect.DeepEqual(a, b)
}

// refAny applies each to the elements of an array (null: none) and
// reports whether any carries output.
func refAny(v any, each func(map[string]any) (bool, bool)) (out, ok bool) {
	if v == nil {
		return false, true
	}
	arr, isArr := v.([]any)
	if !isArr {
		return false, false
	}
	for _, e := range arr {
		m, isObj := e.(map[string]any)
		if !isObj {
			return false, false
		}
		o, ok := each(m)
		if !ok {
			return false, false
		}
		out = out || o
	}
	return out, true
}

// refObject applies fields to an object value (null: no output).
func refObject(v any, fields func(map[string]any) (bool, bool)) (bool, bool) {
	if v == nil {
		return false, true
	}
	m, isObj := v.(map[string]any)
	if !isObj {
		return false, false
	}
	return fields(m)
}

func refChoice(m map[string]any) (bool, bool) {
	delta, ok := refObject(m["delta"], refDelta)
	return delta || refNonEmpty(m["text"]), ok
}

func refDelta(m map[string]any) (bool, bool) {
	out := refNonEmpty(m["content"]) || refNonEmpty(m["reasoning_content"]) ||
		refNonEmpty(m["reasoning"]) || refNonEmpty(m["refusal"])
	calls, ok1 := refAny(m["tool_calls"], func(tc map[string]any) (bool, bool) {
		return refObject(tc["function"], refFunction)
	})
	fn, ok2 := refObject(m["function_call"], refFunction)
	return out || calls || fn, ok1 && ok2
}

func refFunction(m map[string]any) (bool, bool) {
	return refNonEmpty(m["name"]) || refNonEmpty(m["arguments"]), true
}

func refNonEmpty(v any) bool {
	s, ok := v.(string)
	return ok && s != ""
}

var countPattern = regexp.MustCompile(`^[0-9]{1,15}$`)

func refCount(v any) int64 {
	n, ok := v.(json.Number)
	if !ok || !countPattern.MatchString(n.String()) {
		return -1
	}
	i, _ := strconv.ParseInt(n.String(), 10, 64)
	return i
}

// hasDuplicateKeys reports whether any object in the JSON text data names a
// member twice.
func hasDuplicateKeys(data []byte) bool {
	dec := json.NewDecoder(bytes.NewReader(data))
	type frame struct {
		keys     map[string]bool
		isObject bool
		wantKey  bool
	}
	var stack []*frame
	for {
		tok, err := dec.Token()
		if err != nil {
			return false
		}
		var top *frame
		if len(stack) > 0 {
			top = stack[len(stack)-1]
		}
		if top != nil && top.isObject && top.wantKey {
			if k, isKey := tok.(string); isKey {
				if top.keys[k] {
					return true
				}
				top.keys[k] = true
				top.wantKey = false
				continue
			}
		}
		if top != nil && top.isObject {
			top.wantKey = true
		}
		switch tok {
		case json.Delim('{'):
			stack = append(stack, &frame{keys: map[string]bool{}, isObject: true, wantKey: true})
		case json.Delim('['):
			stack = append(stack, &frame{})
		case json.Delim('}'), json.Delim(']'):
			stack = stack[:len(stack)-1]
			if len(stack) > 0 && stack[len(stack)-1].isObject {
				stack[len(stack)-1].wantKey = true
			}
		}
	}
}
