package events

import "bytes"

// Request is what the proxy reads from a request body.
type Request struct {
	// Model and User (the end-user id some clients send; a session id
	// fallback) are decoded, their first maxNameBytes (1 KiB) at most, cut
	// at a character boundary.
	Model, User string
	Stream      bool
	// NoStream: "stream" is false, said explicitly (Ollama streams unless
	// asked not to).
	NoStream bool
	// Inputs: the body has a top-level "inputs", as TGI's /generate
	// requests do (SGLang's, served on the same path, have "text" or
	// "input_ids").
	Inputs bool
	// Turn is the request's place in its conversation, read from the
	// history it carries: the model's turns before the new one, plus one
	// (1 for a conversation's first request). 0 when the body carries no
	// history: no "messages" or "input" (completions, the generate APIs),
	// or a Responses API request that continues a conversation the server
	// keeps (previous_response_id, conversation), whose earlier turns it
	// does not carry.
	Turn int
}

// InspectRequest reads the top-level "model", "stream", "user" and
// "inputs" of a request body, and its turn from "messages" or "input"
// (Request.Turn), in one pass and without allocating but for the strings
// it returns. ok is false when the body is not one well-formed JSON
// object.
func InspectRequest(body []byte) (info Request, ok bool) {
	s := jsonScan{b: body}
	if !s.open('{') {
		return info, false
	}
	var history conversation
	continued := false
	for n := 0; s.more('}', &n); {
		switch string(s.key()) {
		case "model":
			info.Model = stringValue(&s)
		case "user":
			info.User = stringValue(&s)
		case "stream":
			info.Stream, info.NoStream = s.peek() == 't', s.peek() == 'f'
			s.skip()
		case "inputs":
			info.Inputs = true
			s.skip()
		case "messages":
			history.read(&s, false)
		case "input":
			history.read(&s, true)
		case "previous_response_id", "conversation":
			continued = s.present()
		default:
			s.skip()
		}
	}
	if history.found && !continued {
		info.Turn = history.modelTurns + 1
	}
	return info, s.end()
}

// conversation is what a request's history says of its turns: the
// chat APIs' "messages" (chat completions, Anthropic Messages, Ollama's
// /api/chat) and the Responses API's "input" alike.
type conversation struct {
	found bool // a history was read: an array, or the Responses API's input as one string
	// messages: the history was "messages", which the chat APIs name so;
	// an "input" beside it (no API sends both) is not read.
	messages bool
	// modelTurns counts the runs of consecutive items the model wrote
	// that a later item follows: each is one model call, answered (a run
	// at the end is a reply the client asks the model to continue, not a
	// turn of its own).
	modelTurns int
}

// read reads one "messages" value, or with input one "input" value. An
// input string (the Responses API's input as one user message) is a
// history with no model turn; any other value but an array is none.
func (c *conversation) read(s *jsonScan, input bool) {
	switch {
	case input && c.messages:
		s.skip()
		return
	case input && s.peek() == '"':
		s.skip()
		*c = conversation{found: true}
		return
	case s.peek() != '[':
		s.skip()
		*c = conversation{messages: !input}
		return
	}
	*c = conversation{found: true, messages: !input}
	s.open('[')
	inRun := false
	for n := 0; s.more(']', &n); {
		model := byModel(s)
		if model && !inRun {
			c.modelTurns++
		}
		inRun = model
	}
	if inRun {
		c.modelTurns-- // the last run is followed by nothing
	}
}

// byModel reads one item of a history and reports whether the model wrote
// it: a message whose role is assistant (every chat API), or a Responses
// API item of the model's own (its reasoning, its tool calls: a type that
// ends in _call, as function_call and web_search_call do; their outputs,
// function_call_output and the like, are the client's).
func byModel(s *jsonScan) bool {
	if s.peek() != '{' {
		s.skip()
		return false
	}
	s.open('{')
	byRole, byType := false, false
	for n := 0; s.more('}', &n); {
		switch string(s.key()) {
		case "role":
			// Read whatever was read before: a key met twice counts by its
			// last value, as encoding/json has it.
			byRole = string(stringBytes(s)) == "assistant"
		case "type":
			typ := stringBytes(s)
			byType = string(typ) == "reasoning" || bytes.HasSuffix(typ, callSuffix)
		default:
			s.skip()
		}
	}
	return byRole || byType
}

var callSuffix = []byte("_call")

// stringBytes reads a string value's contents, for a comparison: the raw
// bytes (no allocation), decoded where they hold an escape (into the
// scan's scratch when they fit); any other value is skipped and reads as
// empty, as does a string that is not one.
func stringBytes(s *jsonScan) []byte {
	raw := s.stringOrSkip()
	if bytes.IndexByte(raw, '\\') < 0 {
		return raw
	}
	d, n := appendUnescaped(s.scratch[:0], raw, -1)
	if n < 0 {
		return nil
	}
	return d
}

// stringValue reads a string value, its first maxNameBytes decoded, or
// skips any other and returns "".
func stringValue(s *jsonScan) string {
	if s.peek() != '"' {
		s.skip()
		return ""
	}
	return decodeString(s.str(), maxNameBytes)
}

// Usage injection: OpenAI-compatible servers report a stream's token usage
// only when the request asks for it (stream_options.include_usage), and
// many clients do not. With injection on, the proxy asks on their behalf
// (WithUsageRequested), reads the usage, and takes out of the stream what
// asking added (UsageStripper), so that the client receives the bytes the
// upstream would have sent had nothing been injected.

// WithUsageRequested returns body with stream_options.include_usage set to
// true, changing only that part of the JSON: the member is added, or its
// value replaced. It returns nil when there is nothing to do or nothing it
// can do safely: the client asked for usage itself, or the body is not a
// JSON object, or stream_options is neither an object nor null.
func WithUsageRequested(body []byte) []byte {
	s := jsonScan{b: body}
	if !s.open('{') {
		return nil
	}
	members := 0
	optStart, optEnd := -1, -1
	for s.more('}', &members) {
		if string(s.key()) != "stream_options" {
			s.skip()
			continue
		}
		s.peek()
		optStart = s.i
		s.skip()
		optEnd = s.i
	}
	closeAt := s.i - 1 // the top-level object's '}'
	if !s.end() {
		return nil
	}
	if optStart < 0 { // no stream_options: add the member
		member := `"stream_options":{"include_usage":true}`
		if members > 0 {
			member = "," + member
		}
		return splice(body, closeAt, closeAt, member)
	}
	opts := jsonScan{b: body[:optEnd], i: optStart}
	if opts.null() {
		return splice(body, optStart, optEnd, `{"include_usage":true}`)
	}
	if !opts.open('{') {
		return nil
	}
	inner := 0
	for opts.more('}', &inner) {
		if string(opts.key()) != "include_usage" {
			opts.skip()
			continue
		}
		opts.peek()
		valStart := opts.i
		if bytes.HasPrefix(body[valStart:], []byte("true")) {
			return nil // asked for it
		}
		opts.skip()
		return splice(body, valStart, opts.i, "true")
	}
	member := `"include_usage":true`
	if inner > 0 {
		member += ","
	}
	open := bytes.IndexByte(body[optStart:optEnd], '{') + optStart
	return splice(body, open+1, open+1, member)
}

// splice returns b with b[from:to] replaced by with.
func splice(b []byte, from, to int, with string) []byte {
	out := make([]byte, 0, len(b)-(to-from)+len(with))
	out = append(out, b[:from]...)
	out = append(out, with...)
	return append(out, b[to:]...)
}
