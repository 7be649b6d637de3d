package events

import (
	"bytes"
	"time"
)

// Event is what the measurement makes of one server-sent event's data, or
// of a whole non-streamed response body.
type Event struct {
	// Token: the event is token-bearing, it carries output. Per API:
	// chat completions and completions, a choices[].delta with non-empty
	// content, reasoning_content, reasoning, refusal or tool-call
	// name/arguments, or a non-empty choices[].text; the Responses API, a
	// response.*.delta event with a non-empty delta; Anthropic's Messages
	// API, a content_block_delta with non-empty text, partial_json or
	// thinking.
	Token bool
	// Done: the event ends the stream: data [DONE], or the Responses
	// API's response.completed, response.failed or response.incomplete,
	// or the Messages API's message_stop.
	Done bool
	// Failed: the event reports an error: an "error" event type, or a
	// chunk {"error": ...} (or vLLM's older {"object": "error"}).
	Failed bool
	// Invalid: the data is not one JSON object of the expected shape.
	Invalid bool
	// Oversized: the event grew past the scanner's bound and was dropped
	// unread.
	Oversized bool
	// Incomplete: the upstream ended the response early (the Responses
	// API's response.incomplete: a token limit or a content filter).
	Incomplete bool
	// HasUsage: the event had a usage object; InputTokens and
	// OutputTokens are its counts (prompt/input and completion/output
	// tokens), -1 when absent. InputTokens counts every prompt token,
	// cached or not (Anthropic's cache counts added to its input_tokens).
	HasUsage                  bool
	InputTokens, OutputTokens int64
	// EngineTPOT and EngineTTFT are the upstream's own account of the
	// generation, where its API reports one (on a native API's last line
	// or event: see each reader): its time per output token and its time
	// to first token; 0 when not reported.
	EngineTPOT, EngineTTFT time.Duration
	// Model is the model the response says generated it (a chunk's
	// "model", the Responses API's response.model, Anthropic's
	// message.model) as its JSON has it, escapes not decoded; nil when the
	// event names none. It is a slice of the event's data: valid only
	// during the call.
	Model []byte
}

// ParseJSON classifies one event's JSON data, or a whole non-streamed
// response body, of endpoint's API (Other reads as chat completions).
func ParseJSON(endpoint Endpoint, data []byte) Event { return parserFor(endpoint)(data) }

// parserFor returns the reader of an endpoint's events.
func parserFor(endpoint Endpoint) func([]byte) Event {
	switch endpoint {
	case Responses:
		return parseResponsesEvent
	case Messages:
		return parseMessagesEvent
	case OllamaChat, OllamaGenerate:
		return parseOllamaEvent
	case LlamaCppCompletion:
		return parseLlamaCppEvent
	case TGIGenerate:
		return parseTGIEvent
	case SGLangGenerate:
		return parseSGLangEvent
	}
	return parseChatEvent
}

// noCounts is an event that reports nothing yet, no counts included:
// every reader starts from it.
var noCounts = Event{InputTokens: -1, OutputTokens: -1}

// invalidEvent is what a reader makes of data that is not one JSON object
// of the expected shape.
var invalidEvent = Event{Invalid: true, InputTokens: -1, OutputTokens: -1}

// parseChatEvent reads a chat completions or completions chunk.
func parseChatEvent(data []byte) Event {
	c, ok := parseChunk(data)
	return Event{
		Token:        c.token,
		Failed:       c.failed,
		Invalid:      !ok,
		HasUsage:     c.hasUsage,
		InputTokens:  c.usage.input,
		OutputTokens: c.usage.output,
		EngineTPOT:   c.engine.tpot,
		EngineTTFT:   c.engine.ttft,
		Model:        c.model,
	}
}

var doneData = []byte("[DONE]")

// classify makes an Event of a dispatched server-sent event, reading its
// data with parse.
func classify(ev rawEvent, parse func([]byte) Event) Event {
	switch {
	case ev.Oversized:
		return Event{Oversized: true, InputTokens: -1, OutputTokens: -1}
	case bytes.Equal(ev.Data, doneData):
		return Event{Done: true, InputTokens: -1, OutputTokens: -1}
	case string(ev.Type) == "error":
		return Event{Failed: true, InputTokens: -1, OutputTokens: -1}
	}
	return parse(ev.Data)
}
