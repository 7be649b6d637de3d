// Package recorder keeps a bounded, in-memory record of recent streams,
// so that a request id seen in an exemplar leads to the stream behind it:
// the last streams that ended and, over a sliding window, the slowest by
// longest gap and by time to first token, each with its gap timeline.
//
// Memory is bounded by construction: a fixed number of entries, each with
// at most Options.MaxGaps gaps and MaxStalls stalls, and ids cut to
// MaxIDBytes. Only what the
// proxy measured is kept: never a prompt, a completion or a header.
//
// How data flows: the proxy takes a Timeline from [Recorder.Start] when a
// response turns out to be an event stream, appends each gap to it as the
// meter measures it (its buffer starts at 64 gaps and doubles as the
// stream needs, up to the cap, so that a gap costs no allocation once the
// buffer has room), and hands it to [Recorder.Record] with the stream's end
// record (its outcome, timing, gap summary, the ITL objective it was
// judged by, and its stalls with their causes) when the exchange finishes; the entry takes the timeline's
// buffer. The admin listener reads the record through the query functions
// (the JSON of /debug/streams and the live page).
package recorder
