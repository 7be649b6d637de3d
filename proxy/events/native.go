package events

import "time"

// The servers' native APIs. Each reader finds, in one pass over a line or
// an event's JSON, what the measurement needs, and the server's own
// account of its decode where it gives one (Event.EngineTPOT, EngineTTFT).
// Each also reads a whole non-streamed response, which has the shape of
// the stream's last line or event.

// parseOllamaEvent reads one line of Ollama's /api/chat or /api/generate
// (newline-delimited JSON). Token-bearing: a non-empty message.content,
// message.thinking or message.tool_calls (chat), or a non-empty response
// or thinking (generate). "done": true ends the stream and carries the
// usage (prompt_eval_count, eval_count) and the engine's timing, in
// nanoseconds: TPOT eval_duration / eval_count, TTFT load_duration +
// prompt_eval_duration. {"error": ...} reports a failure.
func parseOllamaEvent(data []byte) Event {
	e := noCounts
	s := jsonScan{b: data}
	if !s.open('{') {
		return invalidEvent
	}
	var f outputFields
	evalNs, promptNs, loadNs := int64(-1), int64(-1), int64(-1)
	for n := 0; s.more('}', &n); {
		switch string(s.key()) {
		case "message":
			f.set(1, ollamaMessageCarriesOutput(&s))
		case "response":
			f.set(2, s.nonEmptyString())
		case "thinking":
			f.set(4, s.nonEmptyString())
		case "done":
			e.Done = s.peek() == 't'
			s.skip()
		case "error":
			e.Failed = s.present()
		case "prompt_eval_count":
			e.InputTokens = s.int()
		case "eval_count":
			e.OutputTokens = s.int()
		case "eval_duration":
			evalNs = s.int()
		case "prompt_eval_duration":
			promptNs = s.int()
		case "load_duration":
			loadNs = s.int()
		default:
			s.skip()
		}
	}
	if !s.end() {
		return invalidEvent
	}
	e.Token = f != 0
	e.HasUsage = e.InputTokens >= 0 || e.OutputTokens >= 0
	if evalNs > 0 && e.OutputTokens > 0 {
		e.EngineTPOT = time.Duration(evalNs / e.OutputTokens)
	}
	if promptNs > 0 {
		e.EngineTTFT = time.Duration(promptNs + max(loadNs, 0))
	}
	return e
}

// ollamaMessageCarriesOutput reads a chat line's message: content,
// thinking or tool calls, each non-empty, are output.
func ollamaMessageCarriesOutput(s *jsonScan) bool {
	if s.null() || !s.open('{') {
		return false
	}
	var f outputFields
	for n := 0; s.more('}', &n); {
		switch string(s.key()) {
		case "content":
			f.set(1, s.nonEmptyString())
		case "thinking":
			f.set(2, s.nonEmptyString())
		case "tool_calls":
			f.set(4, nonEmptyArray(s))
		default:
			s.skip()
		}
	}
	return f != 0
}

// nonEmptyArray reads a value and reports whether it is an array with at
// least one element.
func nonEmptyArray(s *jsonScan) bool {
	if s.peek() != '[' {
		s.skip()
		return false
	}
	s.open('[')
	n := 0
	for s.more(']', &n) {
		s.skip()
	}
	return n > 0
}

// parseLlamaCppEvent reads one event of llama.cpp server's /completion
// (SSE). Token-bearing: a non-empty content. "stop": true ends the stream
// and carries the usage (tokens_evaluated, tokens_predicted) and the
// engine's timing in milliseconds: TPOT timings.predicted_per_token_ms,
// TTFT timings.prompt_ms. {"error": ...} reports a failure.
func parseLlamaCppEvent(data []byte) Event {
	e := noCounts
	s := jsonScan{b: data}
	if !s.open('{') {
		return invalidEvent
	}
	u := noUsage
	var t engineTimes
	for n := 0; s.more('}', &n); {
		switch string(s.key()) {
		case "content":
			e.Token = s.nonEmptyString()
		case "stop":
			e.Done = s.peek() == 't'
			s.skip()
		case "error":
			e.Failed = s.present()
		case "tokens_evaluated":
			u.input = s.int()
		case "tokens_predicted":
			u.output = s.int()
		case "timings":
			t = readLlamaCppTimings(&s)
		default:
			s.skip()
		}
	}
	if !s.end() {
		return invalidEvent
	}
	if e.Done { // partial events may carry running counts: the last one counts
		e.HasUsage = u.input >= 0 || u.output >= 0
		e.InputTokens, e.OutputTokens = u.input, u.output
		e.EngineTPOT, e.EngineTTFT = t.tpot, t.ttft
	}
	return e
}

// engineTimes is the timing an engine reports, 0 where it does not.
type engineTimes struct{ tpot, ttft time.Duration }

func readLlamaCppTimings(s *jsonScan) engineTimes {
	var t engineTimes
	if s.null() || !s.open('{') {
		return t
	}
	for n := 0; s.more('}', &n); {
		switch string(s.key()) {
		case "predicted_per_token_ms":
			t.tpot = millis(s.number())
		case "prompt_ms":
			t.ttft = millis(s.number())
		default:
			s.skip()
		}
	}
	return t
}

// millis converts milliseconds to a Duration; anything but a positive
// number of them up to a day (NaN included) is 0 (not reported).
func millis(ms float64) time.Duration {
	if !(ms > 0 && ms <= float64(24*time.Hour/time.Millisecond)) {
		return 0
	}
	return time.Duration(ms * float64(time.Millisecond))
}
