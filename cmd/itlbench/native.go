package main

import (
	"encoding/json"

	"github.com/itlproxy/itlproxy/proxy/events"
)

// nativeEndpoints are the servers' native APIs -api names, each read with
// the reader itlproxy measures it with.
var nativeEndpoints = map[string]events.Endpoint{
	"ollama":   events.OllamaChat,
	"tgi":      events.TGIGenerate,
	"llamacpp": events.LlamaCppCompletion,
	"sglang":   events.SGLangGenerate,
}

// nativeDefaultModel names the stats of a server that serves one model
// and whose API names none (TGI, llama.cpp, SGLang), when -model is not
// given; it is not sent.
const nativeDefaultModel = "default"

// path is the request path of the configured API, appended to -url.
func (cfg *config) path() string {
	switch cfg.endpoint {
	case events.Completions:
		return "/completions"
	case events.OllamaChat:
		return "/api/chat"
	case events.TGIGenerate:
		if cfg.stream {
			return "/generate_stream"
		}
		return "/generate"
	case events.LlamaCppCompletion:
		return "/completion"
	case events.SGLangGenerate:
		return "/generate"
	}
	return "/chat/completions"
}

// nativeRequestBody is the JSON body of a native API's request: the
// prompt, the token limit and the stream flag where each API names them.
// Only Ollama's names the model (the others' servers serve one).
func nativeRequestBody(cfg config, model string) ([]byte, error) {
	body := map[string]any{}
	limit := func(container, key string) {
		if cfg.maxTokens > 0 {
			body[container] = map[string]any{key: cfg.maxTokens}
		}
	}
	switch cfg.endpoint {
	case events.OllamaChat:
		body["model"] = model
		body["messages"] = []map[string]string{{"role": "user", "content": cfg.prompt}}
		body["stream"] = cfg.stream
		limit("options", "num_predict")
	case events.TGIGenerate:
		body["inputs"] = cfg.prompt
		body["parameters"] = map[string]any{"details": true}
		if cfg.maxTokens > 0 {
			body["parameters"] = map[string]any{"details": true, "max_new_tokens": cfg.maxTokens}
		}
	case events.LlamaCppCompletion:
		body["prompt"] = cfg.prompt
		body["stream"] = cfg.stream
		if cfg.maxTokens > 0 {
			body["n_predict"] = cfg.maxTokens
		}
	case events.SGLangGenerate:
		body["text"] = cfg.prompt
		body["stream"] = cfg.stream
		limit("sampling_params", "max_new_tokens")
	}
	for k, v := range cfg.extraBody {
		body[k] = v
	}
	return json.Marshal(body)
}
