package events

// usage is the token usage an upstream reported; -1 means not reported.
type usage struct {
	input, output int64
}

var noUsage = usage{input: -1, output: -1}

// chunk is what the measurement reads from one streamed event's JSON, or
// from a whole non-streamed response body, of the chat completions and
// completions APIs.
//
// The readers below follow JSON's semantics where they matter: when a key
// repeats, its last value counts (as encoding/json decides); a value of an
// unexpected type makes the chunk unparsable, except where the API allows
// null. A differential fuzz test holds them to encoding/json.
type chunk struct {
	// token: the chunk carries output, which makes its event
	// token-bearing: a choices[].delta with non-empty content,
	// reasoning_content, reasoning, refusal or tool-call name/arguments, or
	// a non-empty choices[].text.
	token bool
	// usage: the chunk's usage object, if it had one.
	usage    usage
	hasUsage bool
	// failed: the chunk is an error report ({"error": {...}}, or vLLM's
	// older {"object": "error", ...}).
	failed bool
	// model: the top-level "model" string as the JSON has it (escapes not
	// decoded), nil when absent or not a string; a slice of the data.
	model []byte
	// engine: the server's own timing, from llama.cpp server's "timings"
	// (on its last chunk).
	engine engineTimes
}

// parseChunk reads a chunk. ok is false when data is not one well-formed
// JSON object of the expected shape.
func parseChunk(data []byte) (c chunk, ok bool) {
	c.usage = noUsage
	s := jsonScan{b: data}
	if !s.open('{') {
		return c, false
	}
	var errorSet, objectIsError bool
	for n := 0; s.more('}', &n); {
		switch string(s.key()) {
		case "choices":
			c.token = choicesCarryOutput(&s)
		case "usage":
			c.hasUsage = readUsage(&s, &c.usage)
		case "error":
			errorSet = s.present()
		case "object":
			objectIsError = string(s.stringOrSkip()) == "error"
		case "model":
			c.model = s.stringOrSkip()
		case "timings":
			c.engine = readLlamaCppTimings(&s)
		default:
			s.skip()
		}
	}
	c.failed = errorSet || objectIsError
	return c, s.end()
}

// A set of the members of one object that carry output. Each member's bit
// is set or cleared by its last occurrence.
type outputFields uint8

func (f *outputFields) set(bit outputFields, on bool) {
	if on {
		*f |= bit
	} else {
		*f &^= bit
	}
}

// choicesCarryOutput reads a choices array and reports whether any choice
// carries output. Every choice counts: with n > 1 one event may carry
// several choices' tokens, and it is still one event on the wire.
func choicesCarryOutput(s *jsonScan) bool {
	if s.null() || !s.open('[') {
		return false
	}
	out := false
	for n := 0; s.more(']', &n); {
		if !s.open('{') {
			return false
		}
		var f outputFields
		for m := 0; s.more('}', &m); {
			switch string(s.key()) {
			case "delta":
				f.set(1, deltaCarriesOutput(s))
			case "text":
				f.set(2, s.nonEmptyString())
			default:
				s.skip()
			}
		}
		out = out || f != 0
	}
	return out
}

func deltaCarriesOutput(s *jsonScan) bool {
	if s.null() || !s.open('{') {
		return false
	}
	var f outputFields
	for n := 0; s.more('}', &n); {
		switch string(s.key()) {
		case "content":
			f.set(1, s.nonEmptyString())
		case "reasoning_content":
			f.set(2, s.nonEmptyString())
		case "reasoning":
			f.set(4, s.nonEmptyString())
		case "refusal":
			f.set(8, s.nonEmptyString())
		case "tool_calls":
			f.set(16, toolCallsCarryOutput(s))
		case "function_call": // the deprecated single-function form
			f.set(32, functionCarriesOutput(s))
		default:
			s.skip()
		}
	}
	return f != 0
}

func toolCallsCarryOutput(s *jsonScan) bool {
	if s.null() || !s.open('[') {
		return false
	}
	out := false
	for n := 0; s.more(']', &n); {
		if !s.open('{') {
			return false
		}
		var f outputFields
		for m := 0; s.more('}', &m); {
			if string(s.key()) == "function" {
				f.set(1, functionCarriesOutput(s))
			} else {
				s.skip()
			}
		}
		out = out || f != 0
	}
	return out
}

func functionCarriesOutput(s *jsonScan) bool {
	if s.null() || !s.open('{') {
		return false
	}
	var f outputFields
	for n := 0; s.more('}', &n); {
		switch string(s.key()) {
		case "name":
			f.set(1, s.nonEmptyString())
		case "arguments":
			f.set(2, s.nonEmptyString())
		default:
			s.skip()
		}
	}
	return f != 0
}

// readUsage reads a usage object into u, which it first resets to
// noUsage, and reports whether there was one (null is none). OpenAI's chat
// and completions name the counts prompt_tokens and completion_tokens; the
// Responses API and Anthropic's Messages API, input_tokens and
// output_tokens. When an object has both, the OpenAI names win.
//
// The input count is every prompt token the model attended to, cached or
// not. OpenAI's prompt_tokens and the Responses API's input_tokens include
// cached tokens already; Anthropic's input_tokens leaves out the tokens
// read from or written to its prompt cache (cache_read_input_tokens,
// cache_creation_input_tokens: "Messages API, Prompt caching"), which are
// added to it here.
func readUsage(s *jsonScan, u *usage) bool {
	*u = noUsage
	if s.null() || !s.open('{') {
		return false
	}
	prompt, completion, input, output := int64(-1), int64(-1), int64(-1), int64(-1)
	cacheRead, cacheWrite := int64(-1), int64(-1)
	for n := 0; s.more('}', &n); {
		switch string(s.key()) {
		case "prompt_tokens":
			prompt = s.int()
		case "completion_tokens":
			completion = s.int()
		case "input_tokens":
			input = s.int()
		case "output_tokens":
			output = s.int()
		case "cache_read_input_tokens":
			cacheRead = s.int()
		case "cache_creation_input_tokens":
			cacheWrite = s.int()
		default:
			s.skip()
		}
	}
	if input >= 0 {
		input += max(cacheRead, 0) + max(cacheWrite, 0)
	}
	u.input, u.output = firstCount(prompt, input), firstCount(completion, output)
	return true
}

// firstCount returns a if it is a count, else b.
func firstCount(a, b int64) int64 {
	if a >= 0 {
		return a
	}
	return b
}
