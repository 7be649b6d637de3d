package events

import (
	"encoding/json"
	"strings"
	"testing"
	"unicode/utf8"
)

func TestInspectRequest(t *testing.T) {
	cases := []struct {
		name string
		in   string
		want Request
		ok   bool
	}{
		{"chat", `{"model":"meta-llama/Llama-3.1-8B-Instruct","messages":[{"role":"user","content":"hi"}],"stream":true,"user":"u-42"}`,
			Request{Model: "meta-llama/Llama-3.1-8B-Instruct", Stream: true, User: "u-42", Turn: 1}, true},
		{"user not a string", `{"model":"m","user":{"id":1}}`, Request{Model: "m"}, true},
		{"not streaming", `{"stream":false,"model":"m"}`, Request{Model: "m", NoStream: true}, true},
		{"TGI's shape", `{"inputs":"hi","parameters":{}}`, Request{Inputs: true}, true},
		{"no stream field", `{"model":"qwen2.5:7b"}`, Request{Model: "qwen2.5:7b"}, true},
		{"escaped model", `{"model":"a\u002fb"}`, Request{Model: "a/b"}, true},
		{"model not a string", `{"model":42,"stream":true}`, Request{Stream: true}, true},
		{"stream not a bool", `{"model":"m","stream":"true"}`, Request{Model: "m"}, true},
		{"model inside messages ignored", `{"messages":[{"model":"x"}],"model":"y"}`, Request{Model: "y", Turn: 1}, true},
		{"chat, third turn", `{"messages":[{"role":"system","content":"be brief"},{"role":"user","content":"a"},{"role":"assistant","content":"b"},` +
			`{"role":"user","content":"c"},{"role":"assistant","content":null,"tool_calls":[{"id":"1","type":"function"}]},{"role":"tool","content":"d"}]}`,
			Request{Turn: 3}, true},
		{"a reply to continue is not a turn", `{"messages":[{"role":"user","content":"a"},{"role":"assistant","content":"b"},{"role":"user","content":"c"},{"role":"assistant","content":"The answer is"}]}`,
			Request{Turn: 2}, true},
		{"escaped role", `{"messages":[{"role":"user"},{"role":"assist\u0061nt"},{"role":"user"}]}`, Request{Turn: 2}, true},
		{"Anthropic, content blocks", `{"model":"claude","messages":[{"role":"user","content":[{"type":"text","text":"a"}]},` +
			`{"role":"assistant","content":[{"type":"tool_use","id":"t","name":"f","input":{"role":"assistant"}}]},{"role":"user","content":[{"type":"tool_result","tool_use_id":"t"}]}]}`,
			Request{Model: "claude", Turn: 2}, true},
		{"Responses, one string", `{"model":"m","input":"hi"}`, Request{Model: "m", Turn: 1}, true},
		{"Responses, items", `{"input":[{"role":"user","content":"a"},{"type":"reasoning","summary":[]},{"type":"function_call","call_id":"1"},` +
			`{"type":"function_call","call_id":"2"},{"type":"function_call_output","call_id":"1"},{"type":"function_call_output","call_id":"2"},` +
			`{"type":"message","role":"assistant","content":[]},{"role":"user","content":"b"}]}`, Request{Turn: 3}, true},
		{"Responses, continued by id", `{"previous_response_id":"resp_1","input":[{"role":"user","content":"b"}]}`, Request{}, true},
		{"Responses, continued by id first", `{"input":"b","previous_response_id":"resp_1"}`, Request{}, true},
		{"Responses, a conversation the server keeps", `{"conversation":"conv_1","input":"b"}`, Request{}, true},
		{"Responses, previous id null", `{"previous_response_id":null,"input":"b"}`, Request{Turn: 1}, true},
		{"no history: completions", `{"model":"m","prompt":"hi"}`, Request{Model: "m"}, true},
		{"messages not an array", `{"messages":"hi"}`, Request{}, true},
		{"a role twice", `{"model":"m","messages":[{"role":"user"},{"role":"assistant","role":"assistant","content":"a"},{"role":"user"}],"stream":true}`,
			Request{Model: "m", Stream: true, Turn: 2}, true},
		{"a role twice, the last counts", `{"messages":[{"role":"assistant","role":"user"},{"role":"user","role":"assistant"},{"role":"user"}]}`,
			Request{Turn: 2}, true},
		{"a type twice", `{"input":[{"type":"function_call","type":"message"},{"type":"x","role":"user","type":"reasoning","role":"user"},{"role":"user"}]}`,
			Request{Turn: 2}, true},
		{"a model twice", `{"model":"a","stream":true,"model":"b"}`, Request{Model: "b", Stream: true}, true},
		{"escaped keys", `{"\u006dodel":"m","str\u0065am":true,"\u006d\u0065ssag\u0065s":[{"\u0072ole":"user"},{"r\u006fle":"assistant"},{"role":"user"}],"us\u0065r":"u"}`,
			Request{Model: "m", Stream: true, User: "u", Turn: 2}, true},
		{"a key past the scratch", `{"model":"m","model` + strings.Repeat(`\u0020`, 70) + `":"x"}`, Request{Model: "m"}, true},
		{"a user cut at 1 KiB", `{"user":"` + strings.Repeat("u", 1023) + `é"}`, Request{User: strings.Repeat("u", 1023)}, true},
		{"an escaped user cut at 1 KiB", `{"user":"` + strings.Repeat(`\u00e9`, 600) + `"}`, Request{User: strings.Repeat("é", 512)}, true},
		{"not JSON", `model=m`, Request{}, false},
		{"empty", ``, Request{}, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := InspectRequest([]byte(tc.in))
			if got != tc.want || ok != tc.ok {
				t.Errorf("InspectRequest(%s) = %+v, %v; want %+v, %v", tc.in, got, ok, tc.want, tc.ok)
			}
		})
	}
}

// FuzzInspectRequest holds the request inspector to encoding/json: on any
// JSON object, repeated keys included (the last counts), the same model,
// stream flag, user and turn, the model and user cut as the inspector
// cuts them.
func FuzzInspectRequest(f *testing.F) {
	for _, seed := range []string{
		`{"model":"meta-llama/Llama-3.1-8B-Instruct","messages":[{"role":"user","content":"hi"}],"stream":true,"user":"u1"}`,
		`{"model":"a\u002fb","stream":false,"stream_options":{"include_usage":true}}`,
		`{"model":42,"stream":"true","user":null}`,
		`{"messages":[{"model":"inner"}],"model":"outer"}`,
		`{"inputs":"hi","parameters":{"max_new_tokens":8}}`,
		`{"model":"llama3","messages":[],"stream":false}`,
		`{"messages":[{"role":"user"},{"role":"assistant"},{"role":"assistant"},{"role":"tool"},{"role":"assistant"}]}`,
		`{"input":[{"role":"user"},{"type":"function_call"},{"type":"function_call_output"},{"type":"message","role":"assistant"},{"role":"user"}],"previous_response_id":null}`,
		`{"input":"hi","conversation":{"id":"c"}}`,
		`{"model":"m","messages":[{"role":"assistant","role":"assistant"},{"role":"user","r\u006fle":"assistant"},{"role":"user"}],"model":"\ud83d\ude00"}`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		got, ok := InspectRequest(body)
		var top map[string]any
		if json.Unmarshal(body, &top) != nil || top == nil {
			return
		}
		want := Request{}
		want.Model, _ = top["model"].(string)
		want.User, _ = top["user"].(string)
		want.Model, want.User = firstBytes(want.Model, maxNameBytes), firstBytes(want.User, maxNameBytes)
		want.Stream = top["stream"] == true
		want.NoStream = top["stream"] == false
		_, want.Inputs = top["inputs"]
		want.Turn = turnOf(top)
		if !ok || got != want {
			t.Fatalf("InspectRequest(%q) = %+v, %v; encoding/json reads %+v", body, got, ok, want)
		}
	})
}

// firstBytes is s cut to at most n bytes at a character boundary.
func firstBytes(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

// turnOf is Request.Turn as encoding/json reads the body: the runs of
// items the model wrote that a later item follows, plus one.
func turnOf(top map[string]any) int {
	history, ok := top["input"]
	_, isString := history.(string)
	if m, has := top["messages"]; has {
		history, ok, isString = m, true, false
	}
	if top["previous_response_id"] != nil || top["conversation"] != nil || !ok {
		return 0
	}
	if isString {
		return 1
	}
	items, isArray := history.([]any)
	if !isArray {
		return 0
	}
	turns, inRun := 0, false
	for _, it := range items {
		o, _ := it.(map[string]any)
		role, _ := o["role"].(string)
		typ, _ := o["type"].(string)
		model := role == "assistant" || typ == "reasoning" || strings.HasSuffix(typ, "_call")
		if model && !inRun {
			turns++
		}
		inRun = model
	}
	if inRun {
		turns--
	}
	return turns + 1
}
