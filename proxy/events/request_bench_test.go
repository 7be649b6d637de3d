package events

import (
	"fmt"
	"strings"
	"testing"
)

// conversationBody is the body of a chat request of the given API at turn
// turn: the history of turn-1 user and assistant messages (each a
// paragraph, as chat clients resend it), then the new user message.
func conversationBody(api string, turn int) []byte {
	var b strings.Builder
	paragraph := strings.Repeat("The quick brown fox jumps over the lazy dog. ", 12)
	item := func(role string) string {
		if api == "responses" {
			return fmt.Sprintf(`{"type":"message","role":%q,"content":[{"type":"input_text","text":%q}]}`, role, paragraph)
		}
		return fmt.Sprintf(`{"role":%q,"content":%q}`, role, paragraph)
	}
	field := "messages"
	if api == "responses" {
		field = "input"
	}
	fmt.Fprintf(&b, `{"model":"llama-3.1-8b-instruct","stream":true,"max_tokens":256,%q:[`, field)
	if api == "chat" {
		b.WriteString(`{"role":"system","content":"You are a helpful assistant."},`)
	}
	for range turn - 1 {
		b.WriteString(item("user") + "," + item("assistant") + ",")
	}
	b.WriteString(item("user") + `],"user":"u-1"}`)
	return []byte(b.String())
}

// BenchmarkInspectRequest is the request inspection of the measured
// routes: one pass over the body for its model, stream flag, user and
// turn, on a first turn and on an 18-turn conversation of each API that
// carries its history. Reported per request.
func BenchmarkInspectRequest(b *testing.B) {
	for _, api := range []string{"chat", "messages", "responses"} {
		for _, turn := range []int{1, 18} {
			body := conversationBody(api, turn)
			b.Run(fmt.Sprintf("%s/turn=%d", api, turn), func(b *testing.B) {
				b.SetBytes(int64(len(body)))
				b.ReportAllocs()
				for b.Loop() {
					if _, ok := InspectRequest(body); !ok {
						b.Fatal("not read")
					}
				}
			})
		}
	}
}

// keysBody is a chat request of n messages whose keys (the top level's
// and the messages') are written plainly, or each with its letters
// escaped as \u00XX; the plain body's contents are padded to the escaped
// one's size, so that the two differ in their keys alone.
func keysBody(n int, escaped bool) []byte {
	key := func(k string) string {
		if !escaped {
			return `"` + k + `"`
		}
		var b strings.Builder
		b.WriteByte('"')
		for _, c := range k {
			fmt.Fprintf(&b, `\u%04x`, c)
		}
		b.WriteByte('"')
		return b.String()
	}
	pad := strings.Repeat(" ", len(key("role"))+len(key("content"))-len(`"role""content"`))
	if escaped {
		pad = ""
	}
	var b strings.Builder
	fmt.Fprintf(&b, `{%s:"m",%s:true,%s:[`, key("model"), key("stream"), key("messages"))
	for i := range n {
		if i > 0 {
			b.WriteByte(',')
		}
		role := "user"
		if i%2 == 1 {
			role = "assistant"
		}
		fmt.Fprintf(&b, `{%s:%q,%s:"Hello there, how are you today?%s"}`, key("role"), role, key("content"), pad)
	}
	b.WriteString(`]}`)
	return []byte(b.String())
}

// BenchmarkInspectRequestKeys reads the same request with plain keys and
// with escaped ones, of the same size: the escaped keys' ns/op over the
// plain keys' is what decoding escapes costs (a general JSON decoder per
// key made it about ten).
func BenchmarkInspectRequestKeys(b *testing.B) {
	for _, escaped := range []bool{false, true} {
		body := keysBody(10_000, escaped)
		name := "plain"
		if escaped {
			name = "escaped"
		}
		b.Run(name, func(b *testing.B) {
			b.SetBytes(int64(len(body)))
			b.ReportAllocs()
			for b.Loop() {
				if info, ok := InspectRequest(body); !ok || info.Model != "m" || info.Turn != 5_000 {
					b.Fatalf("read %+v, %v", info, ok)
				}
			}
		})
	}
}
