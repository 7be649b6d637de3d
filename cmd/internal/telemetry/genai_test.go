package telemetry

import (
	"testing"

	"go.opentelemetry.io/otel/attribute"

	"github.com/itlproxy/itlproxy/proxy/events"
)

// TestGenAIProvider: the configured provider first, then a well-known
// API host's, then the API the route speaks.
func TestGenAIProvider(t *testing.T) {
	for _, tc := range []struct {
		configured, host string
		e                events.Endpoint
		want             string
	}{
		{"", "127.0.0.1", events.ChatCompletions, "openai"},
		{"", "vllm.llm.svc", events.Responses, "openai"},
		{"", "vllm.llm.svc", events.Messages, "anthropic"},
		{"", "ollama", events.OllamaGenerate, "ollama"},
		{"", "tgi", events.TGIGenerate, "tgi"},
		{"", "llama", events.LlamaCppCompletion, "llama_cpp"},
		{"", "sglang", events.SGLangGenerate, "sglang"},
		{"", "api.openai.com", events.ChatCompletions, "openai"},
		{"", "API.Anthropic.com", events.Messages, "anthropic"},
		{"", "my-resource.openai.azure.com", events.ChatCompletions, "azure.ai.openai"},
		{"", "us-central1-aiplatform.googleapis.com", events.ChatCompletions, "gcp.vertex_ai"},
		{"", "bedrock-runtime.us-east-1.amazonaws.com", events.ChatCompletions, "aws.bedrock"},
		{"", "my-lb.elb.amazonaws.com", events.ChatCompletions, "openai"},
		{"", "generativelanguage.googleapis.com", events.ChatCompletions, "gcp.gemini"},
		{"groq", "api.openai.com", events.ChatCompletions, "groq"},
	} {
		g := GenAI{ServerAddress: tc.host, Provider: tc.configured}
		if got := g.provider(tc.e); got != tc.want {
			t.Errorf("provider %q, host %q, %s: %q, want %q", tc.configured, tc.host, tc.e.Label(), got, tc.want)
		}
	}
}

// TestGenAIAttributes: the conventions' attributes of an itlproxy series;
// a request that named no model has no request model; a series of no
// measured API has none.
func TestGenAIAttributes(t *testing.T) {
	g := GenAI{ServerAddress: "vllm", ServerPort: 8000}
	attrs, ok := g.attributes(attribute.NewSet(attribute.String("model", "_unknown"), attribute.String("endpoint", "completions"),
		attribute.String("type", "output")))
	want := attribute.NewSet(attribute.String("gen_ai.operation.name", "text_completion"), attribute.String("gen_ai.provider.name", "openai"),
		attribute.String("gen_ai.token.type", "output"), attribute.String(EndpointAttr, "completions"),
		attribute.String("server.address", "vllm"), attribute.Int("server.port", 8000))
	if !ok || !attrs.Equals(&want) {
		t.Errorf("attributes %v, want %v", attrs.ToSlice(), want.ToSlice())
	}
	if _, ok := g.attributes(attribute.NewSet(attribute.String("model", "m"), attribute.String("endpoint", "other"))); ok {
		t.Error("a series of endpoint other has GenAI attributes")
	}
	attrs, _ = GenAI{}.attributes(attribute.NewSet(attribute.String("model", "m"), attribute.String("endpoint", "messages")))
	if _, ok := attrs.Value("server.address"); ok || attrs.Len() != 4 {
		t.Errorf("attributes without an upstream %v, want no server attributes", attrs.ToSlice())
	}
}
