package events

import "testing"

// TestEndpointOf: every endpoint's label leads back to it, and a label no
// endpoint has is refused.
func TestEndpointOf(t *testing.T) {
	for e := range Endpoint(len(labels)) {
		if got, ok := EndpointOf(e.Label()); !ok || got != e {
			t.Errorf("EndpointOf(%q) = %v, %v; want %v", e.Label(), got, ok, e)
		}
	}
	if _, ok := EndpointOf("embeddings"); ok {
		t.Error("EndpointOf(\"embeddings\") found an endpoint")
	}
}

// TestGenAIOperation: the APIs that continue a prompt are text_completion,
// the others chat, as the GenAI conventions name them.
func TestGenAIOperation(t *testing.T) {
	for e, want := range map[Endpoint]string{
		ChatCompletions: "chat", Responses: "chat", Messages: "chat", OllamaChat: "chat", Realtime: "chat",
		Completions: "text_completion", OllamaGenerate: "text_completion", TGIGenerate: "text_completion",
		LlamaCppCompletion: "text_completion", SGLangGenerate: "text_completion",
	} {
		if got := e.GenAIOperation(); got != want {
			t.Errorf("%s: %q, want %q", e.Label(), got, want)
		}
	}
}
