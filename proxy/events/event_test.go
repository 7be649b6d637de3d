package events

import (
	"slices"
	"testing"
	"time"
)

// TestScannerEvents: what the scanner reports of an error event, the
// end marker, an event past the bound, data that is not JSON, and a stream
// cut inside an event. (The proxy's tests hold the scanner to every
// recorded stream.)
func TestScannerEvents(t *testing.T) {
	var events []Event
	s := NewScanner(ChatCompletions, 64, func(e Event, _ Stamp) { events = append(events, e) })
	s.Write([]byte("event: error\ndata: {}\n\ndata: [DONE]\n\ndata: "+string(make([]byte, 100))+"\n\ndata: {\n\ndata: {\"choices\""), Stamp{})
	if len(events) != 4 || !events[0].Failed || !events[1].Done || !events[2].Oversized || !events[3].Invalid || !s.End() {
		t.Errorf("events %+v; want error, done, oversized, invalid, then a truncated end", events)
	}
}

// TestScannerStamps: each event is handed on with the stamp of the write
// that completed it, however the writes cut the events: an event begun in
// one read and ended in the next arrived with the second.
func TestScannerStamps(t *testing.T) {
	var got []Stamp
	s := NewScanner(ChatCompletions, 1<<10, func(_ Event, at Stamp) { got = append(got, at) })
	t0 := time.Unix(1000, 0)
	stamp := func(i int64) Stamp { return Stamp{At: t0.Add(time.Duration(i) * time.Millisecond), Load: i} }
	for i, w := range []string{
		"data: {}\n\ndata: {\"a\"",   // one event, and the start of the next
		":1}\n",                      // its end, but for the blank line
		"\ndata: {}\n\ndata: {}\n\n", // the blank line, then two more
	} {
		s.Write([]byte(w), stamp(int64(i+1)))
	}
	want := []Stamp{stamp(1), stamp(3), stamp(3), stamp(3)}
	if !slices.Equal(got, want) {
		t.Errorf("stamps %v, want %v", got, want)
	}
}

// TestEndpointLabels: the endpoint label values, which the dashboards,
// rules and alerts query, are these and never change.
func TestEndpointLabels(t *testing.T) {
	for e, want := range map[Endpoint]string{
		ChatCompletions: "chat_completions",
		Completions:     "completions",
		Responses:       "responses",
		Messages:        "messages",
		Other:           "other",

		OllamaChat:         "ollama_chat",
		OllamaGenerate:     "ollama_generate",
		TGIGenerate:        "tgi_generate",
		LlamaCppCompletion: "llamacpp_completion",
		SGLangGenerate:     "sglang_generate",
		Realtime:           "realtime",
		Realtime + 1:       "other",
	} {
		if got := e.Label(); got != want {
			t.Errorf("Endpoint(%d).Label() = %q, want %q", e, got, want)
		}
	}
}
