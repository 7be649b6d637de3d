package events

import (
	"reflect"
	"testing"
)

func TestParseResponsesEvent(t *testing.T) {
	ev := func(token, done, failed, incomplete, hasUsage bool, in, out int64) Event {
		return Event{Token: token, Done: done, Failed: failed, Incomplete: incomplete, HasUsage: hasUsage, InputTokens: in, OutputTokens: out}
	}
	cases := []struct {
		name string
		in   string
		want Event
	}{
		{"text delta", `{"type":"response.output_text.delta","item_id":"m","output_index":0,"content_index":0,"delta":"Hi"}`, ev(true, false, false, false, false, -1, -1)},
		{"delta before type", `{"delta":"Hi","type":"response.output_text.delta"}`, ev(true, false, false, false, false, -1, -1)},
		{"empty delta", `{"type":"response.output_text.delta","delta":""}`, ev(false, false, false, false, false, -1, -1)},
		{"reasoning summary delta", `{"type":"response.reasoning_summary_text.delta","delta":"x"}`, ev(true, false, false, false, false, -1, -1)},
		{"reasoning text delta", `{"type":"response.reasoning_text.delta","delta":"x"}`, ev(true, false, false, false, false, -1, -1)},
		{"function call arguments", `{"type":"response.function_call_arguments.delta","delta":"{\""}`, ev(true, false, false, false, false, -1, -1)},
		{"refusal delta", `{"type":"response.refusal.delta","delta":"no"}`, ev(true, false, false, false, false, -1, -1)},
		{"done events are not tokens", `{"type":"response.output_text.done","text":"Hi"}`, ev(false, false, false, false, false, -1, -1)},
		{"created carries usage null", `{"type":"response.created","response":{"status":"in_progress","usage":null}}`, ev(false, false, false, false, false, -1, -1)},
		{"created names the model", `{"type":"response.created","response":{"model":"gpt-x","usage":null}}`, Event{InputTokens: -1, OutputTokens: -1, Model: []byte("gpt-x")}},
		{"completed", `{"type":"response.completed","response":{"status":"completed","usage":{"input_tokens":14,"output_tokens":7,"total_tokens":21}}}`, ev(false, true, false, false, true, 14, 7)},
		{"failed", `{"type":"response.failed","response":{"status":"failed","error":{"code":"server_error"},"usage":null}}`, ev(false, true, true, false, false, -1, -1)},
		{"incomplete", `{"type":"response.incomplete","response":{"status":"incomplete","usage":{"input_tokens":5,"output_tokens":3}}}`, ev(false, true, false, true, true, 5, 3)},
		{"error event", `{"type":"error","code":"rate_limit_exceeded","message":"slow down"}`, ev(false, false, true, false, false, -1, -1)},
		{"a whole non-streamed response", `{"id":"resp_1","object":"response","status":"completed","output":[{"type":"message","content":[{"type":"output_text","text":"Hi"}]}],"usage":{"input_tokens":3,"output_tokens":2}}`, ev(false, false, false, false, true, 3, 2)},
		{"not JSON", `{"type":`, Event{Invalid: true, InputTokens: -1, OutputTokens: -1}},
	}
	for _, c := range cases {
		if got := parseResponsesEvent([]byte(c.in)); !reflect.DeepEqual(got, c.want) {
			t.Errorf("%s: %+v, want %+v", c.name, got, c.want)
		}
	}
}

func TestParseMessagesEvent(t *testing.T) {
	ev := func(token, done, failed, hasUsage bool, in, out int64) Event {
		return Event{Token: token, Done: done, Failed: failed, HasUsage: hasUsage, InputTokens: in, OutputTokens: out}
	}
	cases := []struct {
		name string
		in   string
		want Event
	}{
		{"message_start: input only", `{"type":"message_start","message":{"id":"m","usage":{"input_tokens":25,"output_tokens":1}}}`, ev(false, false, false, true, 25, -1)},
		{"message_start names the model", `{"type":"message_start","message":{"model":"claude-x","usage":{"input_tokens":2,"output_tokens":1}}}`,
			Event{HasUsage: true, InputTokens: 2, OutputTokens: -1, Model: []byte("claude-x")}},
		{"text delta", `{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Hi"}}`, ev(true, false, false, false, -1, -1)},
		{"input json delta", `{"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":"{\"a\""}}`, ev(true, false, false, false, -1, -1)},
		{"empty input json delta", `{"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":""}}`, ev(false, false, false, false, -1, -1)},
		{"thinking delta", `{"type":"content_block_delta","index":0,"delta":{"type":"thinking_delta","thinking":"hmm"}}`, ev(true, false, false, false, -1, -1)},
		{"signature delta is not output", `{"type":"content_block_delta","index":0,"delta":{"type":"signature_delta","signature":"abc"}}`, ev(false, false, false, false, -1, -1)},
		{"ping", `{"type": "ping"}`, ev(false, false, false, false, -1, -1)},
		{"block start with text is not a delta", `{"type":"content_block_start","index":0,"content_block":{"type":"text","text":"x"}}`, ev(false, false, false, false, -1, -1)},
		{"message_delta: output", `{"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"output_tokens":15}}`, ev(false, false, false, true, -1, 15)},
		// Anthropic leaves the prompt cache's tokens out of input_tokens;
		// the model attends to them all the same.
		{"message_start: cached prompt tokens count", `{"type":"message_start","message":{"usage":{"input_tokens":12,"cache_creation_input_tokens":2048,"cache_read_input_tokens":3000,"output_tokens":1}}}`,
			ev(false, false, false, true, 5060, -1)},
		{"message_start: null cache counts", `{"type":"message_start","message":{"usage":{"cache_read_input_tokens":null,"input_tokens":7,"cache_creation_input_tokens":null}}}`,
			ev(false, false, false, true, 7, -1)},
		{"message_delta: cumulative counts with the cache", `{"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"input_tokens":12,"cache_creation_input_tokens":0,"cache_read_input_tokens":5048,"output_tokens":15}}`,
			ev(false, false, false, true, 5060, 15)},
		{"cache counts without input_tokens are no input count", `{"type":"message_delta","usage":{"cache_read_input_tokens":50,"output_tokens":3}}`,
			ev(false, false, false, true, -1, 3)},
		{"message_stop", `{"type":"message_stop"}`, ev(false, true, false, false, -1, -1)},
		{"error", `{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}`, ev(false, false, true, false, -1, -1)},
		{"a whole non-streamed message", `{"id":"m","type":"message","role":"assistant","content":[{"type":"text","text":"Hi"}],"usage":{"input_tokens":12,"output_tokens":6}}`, ev(false, false, false, true, 12, 6)},
	}
	for _, c := range cases {
		if got := parseMessagesEvent([]byte(c.in)); !reflect.DeepEqual(got, c.want) {
			t.Errorf("%s: %+v, want %+v", c.name, got, c.want)
		}
	}
}

// TestTypedEventsAllocateNothing: reading an event of the Responses or
// Messages API allocates nothing, whatever the length of its type name
// (the Responses API's reach 38 bytes).
func TestTypedEventsAllocateNothing(t *testing.T) {
	for _, c := range []struct {
		name  string
		parse func([]byte) Event
		data  string
	}{
		{"function call arguments", parseResponsesEvent, `{"type":"response.function_call_arguments.delta","delta":"{\""}`},
		{"reasoning summary", parseResponsesEvent, `{"type":"response.reasoning_summary_text.delta","delta":"x"}`},
		{"completed", parseResponsesEvent, `{"type":"response.completed","response":{"model":"m","usage":{"input_tokens":1,"output_tokens":2}}}`},
		{"message start", parseMessagesEvent, `{"type":"message_start","message":{"model":"m","usage":{"input_tokens":2}}}`},
		{"message start with the cache", parseMessagesEvent, `{"type":"message_start","message":{"model":"m","usage":{"input_tokens":2,"cache_read_input_tokens":9}}}`},
		{"text delta", parseMessagesEvent, `{"type":"content_block_delta","delta":{"type":"text_delta","text":"x"}}`},
	} {
		data := []byte(c.data)
		if n := testing.AllocsPerRun(100, func() { c.parse(data) }); n != 0 {
			t.Errorf("%s: %v allocations per event", c.name, n)
		}
	}
}
