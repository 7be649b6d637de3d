package events

// parseTGIEvent reads one event of TGI's /generate_stream (SSE), or the
// whole response of its /generate. Token-bearing: a token whose text is
// non-empty and that is not special (special tokens, such as the end of
// sequence, are not output text). The last event carries a non-null
// generated_text, which ends the stream, and details with the usage
// (input_length, generated_tokens; /generate has details only when the
// request asks for them). {"error": ...} reports a failure. TGI reports
// its timing in response headers (x-time-per-token), not here.
func parseTGIEvent(data []byte) Event {
	e := noCounts
	s := jsonScan{b: data}
	if !s.open('{') {
		return invalidEvent
	}
	u := noUsage
	for n := 0; s.more('}', &n); {
		switch string(s.key()) {
		case "token":
			e.Token = tgiTokenIsOutput(&s)
		case "generated_text":
			e.Done = s.present()
		case "details":
			e.HasUsage = readCounts(&s, &u, "input_length", "generated_tokens")
		case "error":
			e.Failed = s.present()
		default:
			s.skip()
		}
	}
	return withCounts(&s, e, u)
}

// tgiTokenIsOutput reads a stream event's token: output when its text is
// non-empty and it is not special.
func tgiTokenIsOutput(s *jsonScan) bool {
	if s.null() || !s.open('{') {
		return false
	}
	text, special := false, false
	for n := 0; s.more('}', &n); {
		switch string(s.key()) {
		case "text":
			text = s.nonEmptyString()
		case "special":
			special = s.peek() == 't'
			s.skip()
		default:
			s.skip()
		}
	}
	return text && !special
}

// readCounts reads an object holding an input and an output count under
// the names given into u, which it first resets to noUsage, and reports
// whether there was one (null is none).
func readCounts(s *jsonScan, u *usage, input, output string) bool {
	*u = noUsage
	if s.null() || !s.open('{') {
		return false
	}
	for n := 0; s.more('}', &n); {
		switch string(s.key()) {
		case input:
			u.input = s.int()
		case output:
			u.output = s.int()
		default:
			s.skip()
		}
	}
	return true
}

// parseSGLangEvent reads one event of SGLang's /generate with "stream":
// true (SSE), or its whole non-streamed response. Each event carries the
// text so far: token-bearing when it is non-empty. meta_info carries the
// counts so far (prompt_tokens, completion_tokens), so that each event's
// own count is the difference from the previous one; data [DONE] ends the
// stream. {"error": ...} reports a failure. SGLang reports no per-token
// timing of its own.
func parseSGLangEvent(data []byte) Event {
	e := noCounts
	s := jsonScan{b: data}
	if !s.open('{') {
		return invalidEvent
	}
	u := noUsage
	for n := 0; s.more('}', &n); {
		switch string(s.key()) {
		case "text":
			e.Token = s.nonEmptyString()
		case "meta_info":
			e.HasUsage = readCounts(&s, &u, "prompt_tokens", "completion_tokens")
		case "error":
			e.Failed = s.present()
		default:
			s.skip()
		}
	}
	return withCounts(&s, e, u)
}

// withCounts ends a reader: e with u's counts, or an invalid event when
// the JSON was not well formed.
func withCounts(s *jsonScan, e Event, u usage) Event {
	if !s.end() {
		return invalidEvent
	}
	e.InputTokens, e.OutputTokens = u.input, u.output
	return e
}
