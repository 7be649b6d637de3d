package events

// OpenAI's Realtime API carries JSON events over a WebSocket, one per text
// message, in both directions; its "type" says what each is
// (https://platform.openai.com/docs/api-reference/realtime-client-events
// and realtime-server-events). A response runs from the server's
// response.created to its response.done; its output arrives as delta
// events that name it by response_id.

// RealtimeType is the kind of a Realtime API event, among those the
// measurement acts on.
type RealtimeType uint8

// The Realtime event types the measurement acts on; every other event is
// RealtimeOther.
const (
	RealtimeOther RealtimeType = iota
	// Sent by the client.
	RealtimeResponseCreate // response.create: the client asks for a response
	RealtimeResponseCancel // response.cancel: the client cancels one
	// Sent by the server.
	RealtimeResponseCreated // response.created: a response began
	RealtimeDelta           // an output delta (RealtimeEvent.Token says whether it carried output)
	RealtimeResponseDone    // response.done: a response ended, with its status and usage
	RealtimeError           // error
)

// ResponseStatus is response.done's response.status.
type ResponseStatus uint8

// The statuses of a finished response. StatusUnknown is a status absent
// or not one of these.
const (
	StatusUnknown ResponseStatus = iota
	StatusCompleted
	StatusCancelled // the client's response.cancel, or the caller speaking over it (turn_detected)
	StatusIncomplete
	StatusFailed
)

// RealtimeEvent is what the measurement makes of one Realtime API event.
// Its byte slices are slices of the event's data: valid only during the
// call.
type RealtimeEvent struct {
	Type RealtimeType
	// ResponseID names the response the event is about: response.id
	// (response.created, response.done), response_id (a delta, the
	// client's response.cancel, an error that names one, at its top level
	// or in its error object); nil when it names none.
	ResponseID []byte
	// EventID is the client event's event_id (response.create), or, for
	// an error, the client event it answers (error.event_id); nil when
	// absent.
	EventID []byte
	// Status is response.done's response.status.
	Status ResponseStatus
	// Event says, as for the other APIs: Token, an output delta with a
	// non-empty delta; HasUsage, InputTokens and OutputTokens,
	// response.done's response.usage; Done, response.done; Failed, status
	// failed or an error event; Incomplete, status incomplete; Invalid,
	// data that is not one JSON object.
	Event
}

// realtimeDeltas are the output deltas of a response: the GA names and
// the beta's. Transcriptions of the caller's audio
// (conversation.item.input_audio_transcription.delta) are input, not
// output.
var realtimeDeltas = [...]string{
	"response.output_text.delta",
	"response.output_audio.delta",
	"response.output_audio_transcript.delta",
	"response.function_call_arguments.delta",
	"response.text.delta",
	"response.audio.delta",
	"response.audio_transcript.delta",
}

// ParseRealtime reads one Realtime API event, from the client or the
// server, in one pass and without allocating.
func ParseRealtime(data []byte) RealtimeEvent {
	e := RealtimeEvent{Event: noCounts}
	s := jsonScan{b: data}
	if !s.open('{') {
		return RealtimeEvent{Event: invalidEvent}
	}
	var typ, topEventID, errEventID, errResponseID []byte
	var delta bool
	u := noUsage
	for n := 0; s.more('}', &n); {
		switch string(s.key()) {
		case "type":
			typ = s.stringOrSkip()
		case "event_id":
			topEventID = s.stringOrSkip()
		case "response_id":
			e.ResponseID = s.stringOrSkip()
		case "delta":
			delta = s.nonEmptyString()
		case "response":
			var id []byte
			id, e.Status, e.HasUsage = readRealtimeResponse(&s, &u)
			if id != nil {
				e.ResponseID = id
			}
		case "error":
			errEventID, errResponseID = readRealtimeError(&s)
		default:
			s.skip()
		}
	}
	if !s.end() {
		return RealtimeEvent{Event: invalidEvent}
	}
	switch {
	case is(typ, "response.create"):
		e.Type, e.EventID = RealtimeResponseCreate, topEventID
	case is(typ, "response.cancel"):
		e.Type = RealtimeResponseCancel
	case is(typ, "response.created"):
		e.Type = RealtimeResponseCreated
	case is(typ, "response.done"):
		e.Type, e.Done = RealtimeResponseDone, true
		e.InputTokens, e.OutputTokens = u.input, u.output
		e.Failed, e.Incomplete = e.Status == StatusFailed, e.Status == StatusIncomplete
	case is(typ, "error"):
		e.Type, e.Failed, e.EventID = RealtimeError, true, errEventID
		if e.ResponseID == nil {
			e.ResponseID = errResponseID
		}
	case isRealtimeDelta(typ):
		e.Type, e.Token = RealtimeDelta, delta
	}
	if e.Type != RealtimeResponseDone {
		e.HasUsage = false
	}
	return e
}

func isRealtimeDelta(typ []byte) bool {
	for _, name := range realtimeDeltas {
		if is(typ, name) {
			return true
		}
	}
	return false
}

// readRealtimeResponse reads a "response" object: its id, its status and
// its usage (null is none).
func readRealtimeResponse(s *jsonScan, u *usage) (id []byte, status ResponseStatus, hasUsage bool) {
	if s.null() || !s.open('{') {
		return nil, StatusUnknown, false
	}
	for n := 0; s.more('}', &n); {
		switch string(s.key()) {
		case "id":
			id = s.stringOrSkip()
		case "status":
			status = responseStatus(s.stringOrSkip())
		case "usage":
			hasUsage = readUsage(s, u)
		default:
			s.skip()
		}
	}
	return id, status, hasUsage
}

func responseStatus(v []byte) ResponseStatus {
	switch {
	case is(v, "completed"):
		return StatusCompleted
	case is(v, "cancelled"):
		return StatusCancelled
	case is(v, "incomplete"):
		return StatusIncomplete
	case is(v, "failed"):
		return StatusFailed
	}
	return StatusUnknown
}

// readRealtimeError reads an error event's "error" object: the client
// event it answers and the response it names, when it names them.
func readRealtimeError(s *jsonScan) (eventID, responseID []byte) {
	if s.null() || !s.open('{') {
		return nil, nil
	}
	for n := 0; s.more('}', &n); {
		switch string(s.key()) {
		case "event_id":
			eventID = s.stringOrSkip()
		case "response_id":
			responseID = s.stringOrSkip()
		default:
			s.skip()
		}
	}
	return eventID, responseID
}
