package events

import (
	"testing"
)

// TestParseRealtime: what the reader makes of each Realtime event the
// measurement acts on, in the GA's and the beta's names, and of others.
func TestParseRealtime(t *testing.T) {
	type want struct {
		typ               RealtimeType
		responseID, evID  string
		status            ResponseStatus
		token, done, fail bool
		incomplete        bool
		hasUsage          bool
		input, output     int64
		invalid           bool
	}
	none := want{input: -1, output: -1}
	with := func(f func(*want)) want { w := none; f(&w); return w }
	for _, tc := range []struct {
		name, data string
		want       want
	}{
		{"response.create", `{"type":"response.create","event_id":"evt_1","response":{"modalities":["audio"]}}`,
			with(func(w *want) { w.typ, w.evID = RealtimeResponseCreate, "evt_1" })},
		{"response.cancel naming a response", `{"event_id":"c","type":"response.cancel","response_id":"resp_9"}`,
			with(func(w *want) { w.typ, w.responseID = RealtimeResponseCancel, "resp_9" })},
		{"response.created", `{"type":"response.created","event_id":"e","response":{"object":"realtime.response","id":"resp_1","status":"in_progress","usage":null}}`,
			with(func(w *want) { w.typ, w.responseID = RealtimeResponseCreated, "resp_1" })},
		{"an audio delta", `{"type":"response.output_audio.delta","event_id":"e","response_id":"resp_1","item_id":"i","output_index":0,"content_index":0,"delta":"UklGRg=="}`,
			with(func(w *want) { w.typ, w.responseID, w.token = RealtimeDelta, "resp_1", true })},
		{"a beta transcript delta, type last", `{"response_id":"resp_1","delta":"Hel","type":"response.audio_transcript.delta"}`,
			with(func(w *want) { w.typ, w.responseID, w.token = RealtimeDelta, "resp_1", true })},
		{"function-call arguments", `{"type":"response.function_call_arguments.delta","response_id":"r","call_id":"c","delta":"{\"a\""}`,
			with(func(w *want) { w.typ, w.responseID, w.token = RealtimeDelta, "r", true })},
		{"an empty delta carries nothing", `{"type":"response.output_text.delta","response_id":"r","delta":""}`,
			with(func(w *want) { w.typ, w.responseID = RealtimeDelta, "r" })},
		{"input transcription is not output", `{"type":"conversation.item.input_audio_transcription.delta","item_id":"i","delta":"hi"}`, none},
		{"response.done", `{"type":"response.done","event_id":"e","response":{"id":"resp_1","status":"completed","status_details":null,"output":[{"type":"message","content":[{"type":"output_audio","transcript":"Hi."}]}],"usage":{"total_tokens":40,"input_tokens":12,"output_tokens":28,"output_token_details":{"text_tokens":4,"audio_tokens":24}}}}`,
			with(func(w *want) {
				w.typ, w.responseID, w.status, w.done, w.hasUsage, w.input, w.output = RealtimeResponseDone, "resp_1", StatusCompleted, true, true, 12, 28
			})},
		{"response.done, cancelled", `{"type":"response.done","response":{"id":"r","status":"cancelled","status_details":{"type":"cancelled","reason":"turn_detected"},"usage":null}}`,
			with(func(w *want) {
				w.typ, w.responseID, w.status, w.done = RealtimeResponseDone, "r", StatusCancelled, true
			})},
		{"response.done, failed", `{"type":"response.done","response":{"id":"r","status":"failed"}}`,
			with(func(w *want) {
				w.typ, w.responseID, w.status, w.done, w.fail = RealtimeResponseDone, "r", StatusFailed, true, true
			})},
		{"response.done, incomplete", `{"type":"response.done","response":{"id":"r","status":"incomplete"}}`,
			with(func(w *want) {
				w.typ, w.responseID, w.status, w.done, w.incomplete = RealtimeResponseDone, "r", StatusIncomplete, true, true
			})},
		{"an error answering a client event", `{"type":"error","event_id":"e","error":{"type":"invalid_request_error","code":"x","message":"m","param":null,"event_id":"evt_1"}}`,
			with(func(w *want) { w.typ, w.evID, w.fail = RealtimeError, "evt_1", true })},
		{"an error naming a response", `{"type":"error","error":{"message":"m","response_id":"resp_2"}}`,
			with(func(w *want) { w.typ, w.responseID, w.fail = RealtimeError, "resp_2", true })},
		{"a server event of no interest", `{"type":"session.created","session":{"id":"sess_1","model":"gpt-realtime"}}`, none},
		{"not JSON", `{"type":"response.done"`, with(func(w *want) { w.invalid = true })},
		{"not an object", `["response.done"]`, with(func(w *want) { w.invalid = true })},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := ParseRealtime([]byte(tc.data))
			got := want{typ: e.Type, responseID: string(e.ResponseID), evID: string(e.EventID), status: e.Status,
				token: e.Token, done: e.Done, fail: e.Failed, incomplete: e.Incomplete, hasUsage: e.HasUsage,
				input: e.InputTokens, output: e.OutputTokens, invalid: e.Invalid}
			if got != tc.want {
				t.Errorf("ParseRealtime(%s)\n = %+v\nwant %+v", tc.data, got, tc.want)
			}
		})
	}
}

// TestParseRealtimeAllocs: reading a delta allocates nothing.
func TestParseRealtimeAllocs(t *testing.T) {
	data := []byte(`{"type":"response.output_audio_transcript.delta","event_id":"event_4f","response_id":"resp_1","item_id":"item_1","output_index":0,"content_index":0,"delta":"Hello"}`)
	if n := testing.AllocsPerRun(100, func() { ParseRealtime(data) }); n != 0 {
		t.Errorf("ParseRealtime allocates %v times per delta", n)
	}
}
