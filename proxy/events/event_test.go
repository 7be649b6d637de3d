package events

import (
	"testing"

	"github.com/itlproxy/itlproxy/metrics"
)

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

// TestEndpointLabels: the label values are the metrics' own.
func TestEndpointLabels(t *testing.T) {
	for e, want := range map[Endpoint]string{
		ChatCompletions: metrics.EndpointChatCompletions,
		Completions:     metrics.EndpointCompletions,
		Responses:       metrics.EndpointResponses,
		Messages:        metrics.EndpointMessages,
		Other:           metrics.EndpointOther,

		OllamaChat:         metrics.EndpointOllamaChat,
		OllamaGenerate:     metrics.EndpointOllamaGenerate,
		TGIGenerate:        metrics.EndpointTGIGenerate,
		LlamaCppCompletion: metrics.EndpointLlamaCppCompletion,
		SGLangGenerate:     metrics.EndpointSGLangGenerate,
		Realtime:           metrics.EndpointRealtime,
		Realtime + 1:       metrics.EndpointOther,
	} {
		if got := e.Label(); got != want {
			t.Errorf("Endpoint(%d).Label() = %q, want %q", e, got, want)
		}
	}
}
