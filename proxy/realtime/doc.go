// Package realtime measures OpenAI's Realtime API as its WebSocket
// connections pass a proxy: one connection per conversation, JSON events
// both ways, each response's audio and text arriving as delta events. For
// a voice agent, the time to a response's first delta is the silence a
// caller hears after they stop speaking, and the gaps between its deltas
// are the stutter.
//
// # Data flow
//
// The proxy copies each direction of the connection on a goroutine of its
// own; for each read it hands a Conn the bytes (Arrived), forwards them,
// then has them measured (Measure). The Conn never changes or holds up a
// byte: it follows copies, and each direction is measured on its own
// goroutine without waiting for the other's (only applying an event to
// the responses takes the Conn's lock). Each direction's frameReader
// follows the frames (RFC 6455 section 5: headers, masking, messages fragmented into
// continuation frames with control frames between them), decompresses
// permessage-deflate messages as the 101 response negotiated them (RFC
// 7692, with or without context takeover: inflate.go), and hands each
// text message to the event reader (package events' ParseRealtime). The
// events build responses (responses.go), which report to the Observer the
// caller gave: when each response starts, its first delta, each gap
// between deltas, and how it ended.
//
// # Definitions
//
// A response runs from the server's response.created to its
// response.done. Its clock starts when the client's response.create
// passed the proxy, or, when the server began the response itself
// (server-side voice activity detection: no response.create was waiting), when
// response.created passed. A response.created measured while bytes the
// client sent before it are still being forwarded or measured waits for
// them (holding its gaps) before it tells the two apart. Each event is stamped with the time the read
// that completed it returned. Output deltas are response.output_text.delta,
// response.output_audio.delta, response.output_audio_transcript.delta and
// response.function_call_arguments.delta, and the beta's
// response.text.delta, response.audio.delta and
// response.audio_transcript.delta, each with a non-empty delta, counted
// together in the order they arrive: TTFT is the first one's stamp less
// the start, each ITL sample the gap between consecutive ones. Usage comes
// from response.done's response.usage; TPOT is computed as for every
// stream (events.Tally). How each response ended is an Outcome.
//
// # Bounds and cost
//
// A direction holds at most Config.MaxMessageBytes of one message, after
// decompression; a larger message is forwarded, counted (TooLarge) and
// not kept, while a compressed one still inflates, so that the window of
// the messages after it stays whole. A decompressing direction holds a
// DEFLATE window (32 KiB), 12 KiB of buffers and a coroutine. The ids kept, the
// response.create events waiting and the responses in flight are bounded
// (responses.go). Reading a delta allocates nothing.
package realtime
