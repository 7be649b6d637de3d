package events

import (
	"encoding/json"
	"testing"
)

func TestInspectRequest(t *testing.T) {
	cases := []struct {
		name string
		in   string
		want Request
		ok   bool
	}{
		{"chat", `{"model":"meta-llama/Llama-3.1-8B-Instruct","messages":[{"role":"user","content":"hi"}],"stream":true,"user":"u-42"}`,
			Request{Model: "meta-llama/Llama-3.1-8B-Instruct", Stream: true, User: "u-42"}, true},
		{"user not a string", `{"model":"m","user":{"id":1}}`, Request{Model: "m"}, true},
		{"not streaming", `{"stream":false,"model":"m"}`, Request{Model: "m", NoStream: true}, true},
		{"TGI's shape", `{"inputs":"hi","parameters":{}}`, Request{Inputs: true}, true},
		{"no stream field", `{"model":"qwen2.5:7b"}`, Request{Model: "qwen2.5:7b"}, true},
		{"escaped model", `{"model":"a\u002fb"}`, Request{Model: "a/b"}, true},
		{"model not a string", `{"model":42,"stream":true}`, Request{Stream: true}, true},
		{"stream not a bool", `{"model":"m","stream":"true"}`, Request{Model: "m"}, true},
		{"model inside messages ignored", `{"messages":[{"model":"x"}],"model":"y"}`, Request{Model: "y"}, true},
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
// JSON object without repeated keys, the same model, stream flag and user.
func FuzzInspectRequest(f *testing.F) {
	for _, seed := range []string{
		`{"model":"meta-llama/Llama-3.1-8B-Instruct","messages":[{"role":"user","content":"hi"}],"stream":true,"user":"u1"}`,
		`{"model":"a\u002fb","stream":false,"stream_options":{"include_usage":true}}`,
		`{"model":42,"stream":"true","user":null}`,
		`{"messages":[{"model":"inner"}],"model":"outer"}`,
		`{"inputs":"hi","parameters":{"max_new_tokens":8}}`,
		`{"model":"llama3","messages":[],"stream":false}`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		got, ok := InspectRequest(body)
		var top map[string]any
		if json.Unmarshal(body, &top) != nil || top == nil || hasDuplicateKeys(body) {
			return
		}
		want := Request{}
		want.Model, _ = top["model"].(string)
		want.User, _ = top["user"].(string)
		want.Stream = top["stream"] == true
		want.NoStream = top["stream"] == false
		_, want.Inputs = top["inputs"]
		if !ok || got != want {
			t.Fatalf("InspectRequest(%q) = %+v, %v; encoding/json reads %+v", body, got, ok, want)
		}
	})
}
