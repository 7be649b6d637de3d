package events

import "bytes"

// The Responses API and Anthropic's Messages API stream typed events: the
// SSE event name and the data's "type" field say what each is. Their
// readers below find what the measurement needs in one pass over the
// event's JSON, as parseChunk does for chat completions.

// parseResponsesEvent reads one event of the Responses API
// (/v1/responses). Token-bearing: a response.*.delta event with a
// non-empty delta (output text, reasoning text and summaries, refusals,
// function-call arguments, ...). response.completed ends the stream and
// carries the usage; response.failed and error report a failure;
// response.incomplete ends it early (a token limit, a content filter).
// Also reads a whole non-streamed response object, whose usage is at the
// top level.
func parseResponsesEvent(data []byte) Event {
	e := noCounts
	s := jsonScan{b: data}
	if !s.open('{') {
		return invalidEvent
	}
	var typ []byte
	var delta, errorSet bool
	u := noUsage
	for n := 0; s.more('}', &n); {
		switch string(s.key()) {
		case "type":
			typ = s.stringOrSkip()
		case "delta":
			delta = s.nonEmptyString()
		case "response":
			e.HasUsage = readNestedUsage(&s, &u, &e.Model) || e.HasUsage
		case "usage":
			e.HasUsage = readUsage(&s, &u) || e.HasUsage
		case "error":
			errorSet = s.present()
		default:
			s.skip()
		}
	}
	if !s.end() {
		return invalidEvent
	}
	e.InputTokens, e.OutputTokens = u.input, u.output
	e.Token = delta && bytes.HasPrefix(typ, []byte("response.")) && bytes.HasSuffix(typ, []byte(".delta"))
	e.Done = is(typ, "response.completed") || is(typ, "response.failed") || is(typ, "response.incomplete")
	e.Failed = is(typ, "response.failed") || is(typ, "error") || errorSet && !is(typ, "response.completed")
	e.Incomplete = is(typ, "response.incomplete")
	return e
}

// is reports whether an event's type is name, without copying it (a
// conversion held in a variable would allocate past 32 bytes, as the
// Responses API's longer type names are).
func is(typ []byte, name string) bool { return string(typ) == name }

// readNestedUsage reads an object that may hold a "usage" object and a
// "model" string (the Responses API's "response", Anthropic's "message");
// null is none. model is set to the model's raw bytes when present.
func readNestedUsage(s *jsonScan, u *usage, model *[]byte) bool {
	if s.null() || !s.open('{') {
		return false
	}
	found := false
	for n := 0; s.more('}', &n); {
		switch string(s.key()) {
		case "usage":
			found = readUsage(s, u)
		case "model":
			*model = s.stringOrSkip()
		default:
			s.skip()
		}
	}
	return found
}

// parseMessagesEvent reads one event of Anthropic's Messages API
// (/v1/messages). Token-bearing: content_block_delta with a non-empty
// text_delta, input_json_delta or thinking_delta (not signature_delta).
// Input tokens come from message_start's message.usage (its output_tokens
// is a placeholder, ignored), output tokens from message_delta's usage;
// message_stop ends the stream; error reports a failure. Also reads a
// whole non-streamed message, whose usage is at the top level.
func parseMessagesEvent(data []byte) Event {
	e := noCounts
	s := jsonScan{b: data}
	if !s.open('{') {
		return invalidEvent
	}
	var typ []byte
	var text, errorSet bool
	u, start := noUsage, noUsage
	for n := 0; s.more('}', &n); {
		switch string(s.key()) {
		case "type":
			typ = s.stringOrSkip()
		case "delta":
			text = messagesDeltaCarriesOutput(&s)
		case "message":
			start = noUsage
			e.HasUsage = readNestedUsage(&s, &start, &e.Model) || e.HasUsage
		case "usage":
			e.HasUsage = readUsage(&s, &u) || e.HasUsage
		case "error":
			errorSet = s.present()
		default:
			s.skip()
		}
	}
	if !s.end() {
		return invalidEvent
	}
	if is(typ, "message_start") {
		u.input = start.input
	}
	e.InputTokens, e.OutputTokens = u.input, u.output
	e.Token = text && is(typ, "content_block_delta")
	e.Done = is(typ, "message_stop")
	e.Failed = is(typ, "error") || errorSet
	return e
}

// messagesDeltaCarriesOutput reads a content_block_delta's delta: text,
// tool input JSON or thinking, each non-empty, is output.
func messagesDeltaCarriesOutput(s *jsonScan) bool {
	if s.null() || !s.open('{') {
		return false
	}
	var f outputFields
	for n := 0; s.more('}', &n); {
		switch string(s.key()) {
		case "text":
			f.set(1, s.nonEmptyString())
		case "partial_json":
			f.set(2, s.nonEmptyString())
		case "thinking":
			f.set(4, s.nonEmptyString())
		default:
			s.skip()
		}
	}
	return f != 0
}
