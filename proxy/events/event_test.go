package events

import "testing"

// TestStreamScannerEvents: what the scanner reports of an error event, the
// end marker, an event past the bound, data that is not JSON, and a stream
// cut inside an event. (The proxy's tests hold the scanner to every
// recorded stream.)
func TestStreamScannerEvents(t *testing.T) {
	var events []Event
	s := NewStreamScanner(ChatCompletions, 64, func(e Event) { events = append(events, e) })
	s.Write([]byte("event: error\ndata: {}\n\ndata: [DONE]\n\ndata: " + string(make([]byte, 100)) + "\n\ndata: {\n\ndata: {\"choices\""))
	if len(events) != 4 || !events[0].Failed || !events[1].Done || !events[2].Oversized || !events[3].Invalid || !s.End() {
		t.Errorf("events %+v; want error, done, oversized, invalid, then a truncated end", events)
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
