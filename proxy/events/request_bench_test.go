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
