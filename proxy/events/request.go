package events

import "bytes"

// Request is what the proxy reads from a request body.
type Request struct {
	Model  string
	Stream bool
	User   string // the end-user id some clients send; a session id fallback
	// NoStream: "stream" is false, said explicitly (Ollama streams unless
	// asked not to).
	NoStream bool
	// Inputs: the body has a top-level "inputs", as TGI's /generate
	// requests do (SGLang's, served on the same path, have "text" or
	// "input_ids").
	Inputs bool
}

// InspectRequest reads the top-level "model", "stream", "user" and
// "inputs" of a request body. ok is false when the body is not one well-formed JSON
// object.
func InspectRequest(body []byte) (info Request, ok bool) {
	s := jsonScan{b: body}
	if !s.open('{') {
		return info, false
	}
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
		default:
			s.skip()
		}
	}
	return info, s.end()
}

// stringValue reads a string value, or skips any other and returns "".
func stringValue(s *jsonScan) string {
	if s.peek() != '"' {
		s.skip()
		return ""
	}
	return decodeString(s.str())
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
