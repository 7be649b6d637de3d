package events

// Endpoint is an API whose requests and responses this package reads: it
// chooses the reader of a response's events.
type Endpoint uint8

// The endpoints. Other is every request the proxy forwards without
// measuring.
const (
	ChatCompletions Endpoint = iota // /v1/chat/completions
	Completions                     // /v1/completions
	Responses                       // /v1/responses
	Messages                        // /v1/messages (Anthropic)
	Other
	OllamaChat         // Ollama's /api/chat (newline-delimited JSON)
	OllamaGenerate     // Ollama's /api/generate (newline-delimited JSON)
	TGIGenerate        // TGI's /generate_stream and /generate
	LlamaCppCompletion // llama.cpp server's /completion
	SGLangGenerate     // SGLang's /generate
	Realtime           // OpenAI's Realtime API: GET /v1/realtime, a WebSocket
)

// labels are the endpoint label values of itlproxy's metrics, which its
// dashboards and alerts query: they never change.
var labels = [...]string{
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

	Realtime: "realtime",
}

// Label returns the endpoint's metric label value ("chat_completions",
// "completions", "responses", "messages", "other", or a native API's:
// "ollama_chat", "ollama_generate", "tgi_generate", "llamacpp_completion",
// "sglang_generate"; "realtime" for the Realtime API's WebSocket).
func (e Endpoint) Label() string {
	if int(e) < len(labels) {
		return labels[e]
	}
	return labels[Other]
}

// NDJSON reports whether the endpoint streams newline-delimited JSON
// (application/x-ndjson) rather than server-sent events.
func (e Endpoint) NDJSON() bool { return e == OllamaChat || e == OllamaGenerate }

// EndpointOf returns the endpoint whose metric label is label, and false
// for a label no endpoint has.
func EndpointOf(label string) (Endpoint, bool) {
	for e, l := range labels {
		if l == label {
			return Endpoint(e), true
		}
	}
	return Other, false
}

// GenAIOperation is the OpenTelemetry GenAI operation
// (gen_ai.operation.name) the endpoint serves: the continuation of a
// prompt (text_completion) on the completions API and the native generate
// APIs, a conversation (chat) on the others, the Realtime API's among
// them.
func (e Endpoint) GenAIOperation() string {
	switch e {
	case Completions, OllamaGenerate, TGIGenerate, LlamaCppCompletion, SGLangGenerate:
		return "text_completion"
	}
	return "chat"
}
