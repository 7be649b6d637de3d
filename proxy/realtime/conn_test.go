package realtime

import (
	"fmt"
	"slices"
	"testing"
	"time"
)

// watcher is an Observer that keeps everything it is told.
type watcher struct {
	started []Start
	resps   []*watched
	fails   []Failure
	wrote   []time.Duration
}

type watched struct {
	ttft  time.Duration
	first bool
	gaps  []time.Duration
	ends  []End
	// delays: each delta's own delay; wrote: each write while it was in
	// flight.
	delays, wrote []time.Duration
}

func (w *watcher) Start(s Start) ResponseObserver {
	w.started = append(w.started, s)
	r := &watched{ttft: -1}
	w.resps = append(w.resps, r)
	return r
}

func (w *watcher) Unreadable(f Failure)  { w.fails = append(w.fails, f) }
func (w *watcher) Wrote(d time.Duration) { w.wrote = append(w.wrote, d) }

func (r *watched) FirstDelta(ttft time.Duration, _ time.Time) { r.ttft, r.first = ttft, true }
func (r *watched) Gap(d time.Duration, _ time.Time)           { r.gaps = append(r.gaps, d) }
func (r *watched) End(e End)                                  { r.ends = append(r.ends, e) }
func (r *watched) OwnDelay(d time.Duration)                   { r.delays = append(r.delays, d) }
func (r *watched) ClientWrite(began, ended time.Time)         { r.wrote = append(r.wrote, ended.Sub(began)) }

// script plays events through a Conn: each step is one side's event,
// arriving ms milliseconds after the start.
type step struct {
	ms    int
	from  Side
	event string
}

var t0 = time.Unix(1000, 0)

func at(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }

func play(c *Conn, steps []step) {
	for _, s := range steps {
		mask := [4]byte{}
		if s.from == Client {
			mask = clientMask
		}
		c.Observe(s.from, text(mask, s.event), at(s.ms))
	}
}

func created(id string) string {
	return fmt.Sprintf(`{"type":"response.created","event_id":"e","response":{"id":%q,"status":"in_progress"}}`, id)
}

func delta(typ, id string) string {
	return fmt.Sprintf(`{"type":%q,"event_id":"e","response_id":%q,"item_id":"i","output_index":0,"content_index":0,"delta":"AAAA"}`, typ, id)
}

func done(id, status string, output int) string {
	return fmt.Sprintf(`{"type":"response.done","event_id":"e","response":{"id":%q,"status":%q,"output":[],"usage":{"total_tokens":%d,"input_tokens":7,"output_tokens":%d}}}`, id, status, 7+output, output)
}

const create = `{"type":"response.create","response":{"instructions":"be brief"}}`

func ms(n int) time.Duration { return time.Duration(n) * time.Millisecond }

// TestResponses: how events become responses, their clocks and outcomes.
func TestResponses(t *testing.T) {
	for _, tc := range []struct {
		name     string
		steps    []step
		endedBy  Side
		byServer []bool
		ttft     []time.Duration
		gaps     [][]time.Duration
		ends     []End // Outcome, Deltas, InputTokens, OutputTokens, TPOT, CancelRequested
	}{{
		name: "text, asked for by the client",
		steps: []step{{0, Client, create}, {5, Server, created("r1")}, {40, Server, delta("response.output_text.delta", "r1")},
			{55, Server, delta("response.output_text.delta", "r1")}, {75, Server, delta("response.text.delta", "r1")}, {80, Server, done("r1", "completed", 3)}},
		byServer: []bool{false}, ttft: []time.Duration{ms(40)}, gaps: [][]time.Duration{{ms(15), ms(20)}},
		ends: []End{{Outcome: Completed, Deltas: 3, InputTokens: 7, UsageReported: true, OutputTokens: 3, TPOT: ms(35) / 2}},
	}, {
		name: "audio with its transcript, begun by the server",
		steps: []step{{0, Server, created("r1")}, {30, Server, delta("response.output_audio.delta", "r1")},
			{30, Server, delta("response.output_audio_transcript.delta", "r1")}, {50, Server, delta("response.audio.delta", "r1")},
			{51, Server, delta("response.audio_transcript.delta", "r1")}, {60, Server, `{"type":"response.output_audio.done","response_id":"r1"}`},
			{61, Server, done("r1", "completed", 40)}},
		byServer: []bool{true}, ttft: []time.Duration{ms(30)}, gaps: [][]time.Duration{{0, ms(20), ms(1)}},
		ends: []End{{Outcome: Completed, Deltas: 4, InputTokens: 7, UsageReported: true, OutputTokens: 40, TPOT: ms(21) / 39}},
	}, {
		name: "cancelled by the client",
		steps: []step{{0, Client, create}, {2, Server, created("r1")}, {10, Server, delta("response.output_audio.delta", "r1")},
			{12, Client, `{"type":"response.cancel"}`}, {20, Server, done("r1", "cancelled", 1)}},
		byServer: []bool{false}, ttft: []time.Duration{ms(10)}, gaps: [][]time.Duration{nil},
		ends: []End{{Outcome: Cancelled, Deltas: 1, InputTokens: 7, UsageReported: true, OutputTokens: 1, TPOT: -1, CancelRequested: true}},
	}, {
		name: "incomplete, failed, and an error naming a response",
		steps: []step{{0, Server, created("r1")}, {1, Server, done("r1", "incomplete", 0)}, {2, Server, created("r2")},
			{3, Server, done("r2", "failed", 0)}, {4, Server, created("r3")}, {5, Server, delta("response.function_call_arguments.delta", "r3")},
			{6, Server, `{"type":"error","event_id":"e","error":{"type":"server_error","message":"m","response_id":"r3"}}`},
			{7, Server, done("r3", "completed", 9)}},
		byServer: []bool{true, true, true}, ttft: []time.Duration{-1, -1, ms(1)}, gaps: [][]time.Duration{nil, nil, nil},
		ends: []End{{Outcome: Incomplete, InputTokens: 7, UsageReported: true, TPOT: -1}, {Outcome: Failed, InputTokens: 7, UsageReported: true, TPOT: -1}, {Outcome: Failed, Deltas: 1, InputTokens: -1, OutputTokens: 1, TPOT: -1}},
	}, {
		name: "a create refused by an error does not start the next response's clock",
		steps: []step{{0, Client, `{"type":"response.create","event_id":"c1"}`},
			{1, Server, `{"type":"error","event_id":"e","error":{"type":"invalid_request_error","code":"conversation_already_has_active_response","event_id":"c1"}}`},
			{50, Server, created("r1")}, {60, Server, delta("response.output_text.delta", "r1")}, {61, Server, done("r1", "completed", 1)}},
		byServer: []bool{true}, ttft: []time.Duration{ms(10)}, gaps: [][]time.Duration{nil},
		ends: []End{{Outcome: Completed, Deltas: 1, InputTokens: 7, UsageReported: true, OutputTokens: 1, TPOT: -1}},
	}, {
		name: "two responses at once, told apart by id",
		steps: []step{{0, Client, create}, {1, Client, create}, {2, Server, created("a")}, {3, Server, created("b")},
			{10, Server, delta("response.output_text.delta", "b")}, {20, Server, delta("response.output_text.delta", "a")},
			{25, Server, delta("response.output_text.delta", "b")}, {30, Server, done("b", "completed", 2)},
			{40, Server, delta("response.output_text.delta", "a")}, {41, Server, delta("response.output_text.delta", "nobody")},
			{50, Server, done("a", "completed", 2)}},
		byServer: []bool{false, false}, ttft: []time.Duration{ms(20), ms(9)}, gaps: [][]time.Duration{{ms(20)}, {ms(15)}},
		ends: []End{{Outcome: Completed, Deltas: 2, InputTokens: 7, UsageReported: true, OutputTokens: 2, TPOT: ms(20)}, {Outcome: Completed, Deltas: 2, InputTokens: 7, UsageReported: true, OutputTokens: 2, TPOT: ms(15)}},
	}, {
		name: "the client leaves mid-response",
		steps: []step{{0, Client, create}, {5, Server, created("r1")}, {9, Server, delta("response.output_audio.delta", "r1")},
			{10, Server, delta("response.output_audio.delta", "r1")}},
		endedBy: Client, byServer: []bool{false}, ttft: []time.Duration{ms(9)}, gaps: [][]time.Duration{{ms(1)}},
		ends: []End{{Outcome: ClientGone, Deltas: 2, InputTokens: -1, OutputTokens: 2, TPOT: ms(1)}},
	}, {
		name:    "the server leaves mid-response",
		steps:   []step{{0, Server, created("r1")}, {9, Server, delta("response.output_audio.delta", "r1")}},
		endedBy: Server, byServer: []bool{true}, ttft: []time.Duration{ms(9)}, gaps: [][]time.Duration{nil},
		ends: []End{{Outcome: ServerGone, Deltas: 1, InputTokens: -1, OutputTokens: 1, TPOT: -1}},
	}, {
		name: "the server leaves after the client's cancel",
		steps: []step{{0, Client, create}, {1, Client, `{"type":"response.cancel"}`}, {2, Server, created("r1")},
			{3, Server, delta("response.output_audio.delta", "r1")}},
		endedBy: Server, byServer: []bool{false}, ttft: []time.Duration{ms(3)}, gaps: [][]time.Duration{nil},
		ends: []End{{Outcome: Cancelled, Deltas: 1, InputTokens: -1, OutputTokens: 1, TPOT: -1, CancelRequested: true}},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			var w watcher
			c := New(Config{MaxMessageBytes: 1 << 20}, &w)
			play(c, tc.steps)
			c.Ended(tc.endedBy)
			c.Close(at(1000))
			var byServer []bool
			for _, s := range w.started {
				byServer = append(byServer, s.ByServer)
			}
			if !slices.Equal(byServer, tc.byServer) || len(w.fails) > 0 {
				t.Fatalf("started %+v (failures %v); want by server %v", w.started, w.fails, tc.byServer)
			}
			for i, r := range w.resps {
				if r.ttft != tc.ttft[i] || !slices.Equal(r.gaps, tc.gaps[i]) {
					t.Errorf("response %d: TTFT %v, gaps %v; want %v, %v", i, r.ttft, r.gaps, tc.ttft[i], tc.gaps[i])
				}
				if len(r.ends) != 1 {
					t.Fatalf("response %d ended %d times", i, len(r.ends))
				}
				got, want := r.ends[0], tc.ends[i]
				got.At, got.AverageTokens = time.Time{}, 0
				if got != want {
					t.Errorf("response %d ended %+v, want %+v", i, got, want)
				}
			}
		})
	}
}

// TestResponsesWaitForTheClient: a response.created measured while bytes
// the client sent before it are still on their way waits for them: the
// response.create among them starts its clock, and the deltas that came
// meanwhile count from it. Client bytes read after the response.created
// cannot have asked for it.
func TestResponsesWaitForTheClient(t *testing.T) {
	t.Run("the create was on its way", func(t *testing.T) {
		var w watcher
		c := New(Config{MaxMessageBytes: 1 << 20}, &w)
		c.Arrived(Client, text(clientMask, create), at(0))
		c.Observe(Server, text([4]byte{}, created("r1")), at(3))
		c.Observe(Server, text([4]byte{}, delta("response.output_audio.delta", "r1")), at(10))
		c.Observe(Server, text([4]byte{}, delta("response.output_audio.delta", "r1")), at(14))
		if len(w.started) != 0 {
			t.Fatalf("started %+v before the client's bytes were measured", w.started)
		}
		c.Measure(Client, Written{})
		c.Observe(Server, text([4]byte{}, delta("response.output_audio.delta", "r1")), at(20))
		c.Close(at(30))
		if len(w.started) != 1 || w.started[0].ByServer || !w.started[0].At.Equal(at(0)) ||
			w.resps[0].ttft != ms(10) || !slices.Equal(w.resps[0].gaps, []time.Duration{ms(4), ms(6)}) {
			t.Fatalf("started %+v, TTFT %v, gaps %v; want the create at 0 to start it, TTFT 10ms, gaps 4ms 6ms",
				w.started, w.resps[0].ttft, w.resps[0].gaps)
		}
	})
	t.Run("the client's bytes came after", func(t *testing.T) {
		var w watcher
		c := New(Config{MaxMessageBytes: 1 << 20}, &w)
		c.Arrived(Client, text(clientMask, create), at(5))
		c.Observe(Server, text([4]byte{}, created("r1")), at(3))
		if len(w.started) != 1 || !w.started[0].ByServer || !w.started[0].At.Equal(at(3)) {
			t.Fatalf("started %+v; want the server's own response, at its response.created", w.started)
		}
		c.Measure(Client, Written{})
		c.Close(at(30))
	})
	t.Run("no create among them", func(t *testing.T) {
		var w watcher
		c := New(Config{MaxMessageBytes: 1 << 20}, &w)
		c.Arrived(Client, text(clientMask, `{"type":"input_audio_buffer.append","audio":"AAAA"}`), at(0))
		c.Observe(Server, text([4]byte{}, created("r1")), at(3))
		c.Observe(Server, text([4]byte{}, delta("response.output_audio.delta", "r1")), at(10))
		c.Measure(Client, Written{})
		c.Close(at(30))
		if len(w.started) != 1 || !w.started[0].ByServer || !w.started[0].At.Equal(at(3)) || w.resps[0].ttft != ms(7) {
			t.Fatalf("started %+v, TTFT %v; want the server's own response, TTFT 7ms", w.started, w.resps[0].ttft)
		}
	})
}

// TestForwarding: each output delta is reported with its own delay, from
// its bytes being available (when the read returned, unless the proxy
// says they were waiting before) to the start of their write, whether the
// response had started or was waiting for the client's bytes. Each write
// of the server's bytes while responses are in flight, from the one that
// carries a response's response.created to the one that carries its end,
// is observed once, and summed in each of those responses; bytes measured
// without a write's times count neither.
func TestForwarding(t *testing.T) {
	var w watcher
	c := New(Config{MaxMessageBytes: 1 << 20}, &w)
	forward := func(event string, ms int, waited, delay, write time.Duration) {
		p := text([4]byte{}, event)
		c.Arrived(Server, p, at(ms))
		start := at(ms).Add(delay)
		c.Measure(Server, Written{Available: at(ms).Add(-waited), Start: start, End: start.Add(write)})
	}
	audio := delta("response.output_audio.delta", "r1")
	c.Arrived(Client, text(clientMask, create), at(0))
	forward(created("r1"), 3, 0, time.Microsecond, ms(1))
	// Held until the client's bytes are measured: the first and a gap.
	forward(audio, 10, 0, 2*time.Microsecond, ms(2))
	forward(audio, 14, 50*time.Microsecond, 3*time.Microsecond, ms(3))
	c.Measure(Client, Written{})
	forward(`{"type":"rate_limits.updated","event_id":"e","rate_limits":[]}`, 16, 0, time.Microsecond, ms(4))
	forward(created("r2"), 18, 0, time.Microsecond, ms(5))
	forward(done("r1", "completed", 2), 20, 0, time.Microsecond, ms(6))
	c.Observe(Server, text([4]byte{}, delta("response.output_text.delta", "r2")), at(22))
	forward(done("r2", "completed", 1), 24, 0, time.Microsecond, ms(7))
	forward(`{"type":"input_audio_buffer.speech_started","event_id":"e","audio_start_ms":0,"item_id":"i"}`, 26, 0, time.Microsecond, ms(8))
	c.Close(at(30))

	if len(w.resps) != 2 {
		t.Fatalf("%d responses, want 2", len(w.resps))
	}
	r1, r2 := w.resps[0], w.resps[1]
	if want := []time.Duration{2 * time.Microsecond, 53 * time.Microsecond}; !slices.Equal(r1.delays, want) || len(r1.gaps) != 1 {
		t.Errorf("r1's own delays %v, gaps %v; want %v, and 1 gap", r1.delays, r1.gaps, want)
	}
	if len(r2.delays) != 0 {
		t.Errorf("r2's own delays %v; its delta was measured without a write's times", r2.delays)
	}
	if want := []time.Duration{ms(1), ms(2), ms(3), ms(4), ms(5), ms(6), ms(7)}; !slices.Equal(w.wrote, want) {
		t.Errorf("writes observed %v, want %v: each write while a response is in flight, once", w.wrote, want)
	}
	if len(r1.ends) != 1 || r1.ends[0].ClientWriteWait != ms(21) || len(r2.ends) != 1 || r2.ends[0].ClientWriteWait != ms(18) {
		t.Errorf("ends %+v, %+v; want r1's writes 1+2+3+4+5+6 ms, r2's 5+6+7 ms", r1.ends, r2.ends)
	}
	// Each response hears the writes while it was in flight, as their
	// intervals (its stalls' causes), from its start on: r1's waited for
	// the client's bytes to be measured (the microseconds that tell
	// whether it answers a response.create), and hears the writes after.
	if want := []time.Duration{ms(4), ms(5), ms(6)}; !slices.Equal(r1.wrote, want) {
		t.Errorf("r1 heard writes %v, want %v", r1.wrote, want)
	}
	if want := []time.Duration{ms(6), ms(7)}; !slices.Equal(r2.wrote, want) {
		t.Errorf("r2 heard writes %v, want %v", r2.wrote, want)
	}
}

// TestConnClose: a Close frame says who ended the connection before
// either end closes; a message cut short counts; the responses in flight
// end once, at Close; bytes not measured by then, and any after, are not.
func TestConnClose(t *testing.T) {
	var w watcher
	c := New(Config{MaxMessageBytes: 1 << 20}, &w)
	play(c, []step{{0, Server, created("r1")}})
	c.Observe(Client, frame(0x8, true, false, clientMask, []byte{0x03, 0xe8}), at(1))
	c.Ended(Server) // the server closes its end after the client's Close frame
	c.Observe(Server, append(text([4]byte{}, delta("response.output_audio.delta", "r1")), 0x81, 0x05, 'a'), at(2))
	c.Arrived(Server, text([4]byte{}, delta("response.output_audio.delta", "r1")), at(3))
	c.Close(at(4))
	c.Measure(Server, Written{})
	c.Observe(Server, text([4]byte{}, done("r1", "completed", 1)), at(5))
	r := w.resps[0]
	if len(r.ends) != 1 || r.ends[0].Outcome != ClientGone || r.ends[0].Deltas != 1 || !r.ends[0].At.Equal(at(4)) {
		t.Errorf("ended %+v; want once, ClientGone at 4ms, with the one delta measured before Close", r.ends)
	}
	if !slices.Equal(w.fails, []Failure{Truncated}) {
		t.Errorf("failures %v, want the cut message", w.fails)
	}
}

// TestConnConcurrent: both directions measured at once, on goroutines of
// their own, and closed while they still run (go test -race).
func TestConnConcurrent(t *testing.T) {
	var w watcher
	c := New(Config{MaxMessageBytes: 1 << 20, Extensions: "permessage-deflate"}, &w)
	d := newDeflater(true)
	client := make([][]byte, 200)
	for i := range client {
		client[i] = frame(0x1, true, true, clientMask, d.compress([]byte(create)))
	}
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		for i, f := range client {
			c.Observe(Client, f, at(i))
		}
	}()
	for i := range 200 {
		c.Observe(Server, text([4]byte{}, created(fmt.Sprint("r", i))), at(i))
		c.Observe(Server, text([4]byte{}, delta("response.output_text.delta", fmt.Sprint("r", i))), at(i))
		if i%2 == 0 {
			c.Observe(Server, text([4]byte{}, done(fmt.Sprint("r", i), "completed", 1)), at(i))
		}
		if i == 150 {
			c.Close(at(i))
		}
	}
	<-finished
	for i, r := range w.resps {
		if len(r.ends) != 1 {
			t.Errorf("response %d ended %d times", i, len(r.ends))
		}
	}
	if len(w.resps) == 0 || len(w.fails) > 0 {
		t.Errorf("%d responses, failures %v", len(w.resps), w.fails)
	}
}

// TestExtensions: what the 101 response's Sec-WebSocket-Extensions sets.
func TestExtensions(t *testing.T) {
	for _, tc := range []struct {
		header                  string
		deflate, client, server bool // in effect; each side's context takeover
		unknown                 bool
	}{
		{"", false, false, false, false},
		{"permessage-deflate", true, true, true, false},
		{"permessage-deflate; client_max_window_bits=15; server_no_context_takeover", true, true, false, false},
		{"permessage-deflate;client_no_context_takeover;server_no_context_takeover", true, false, false, false},
		{"x-webkit-deflate-frame", false, false, false, true},
		{"permessage-deflate; server_max_window_bits=99", false, false, false, true},
		{"permessage-deflate, permessage-deflate", true, true, true, true},
	} {
		c := New(Config{MaxMessageBytes: 1, Extensions: tc.header}, &watcher{})
		cl, sv := c.sides[Client].frames, c.sides[Server].frames
		if cl.deflate != tc.deflate || sv.deflate != tc.deflate || cl.takeover != tc.client || sv.takeover != tc.server || cl.unknownExtension != tc.unknown {
			t.Errorf("%q: deflate %v/%v, takeover client %v server %v, unknown %v; want %v, %v %v, %v",
				tc.header, cl.deflate, sv.deflate, cl.takeover, sv.takeover, cl.unknownExtension, tc.deflate, tc.client, tc.server, tc.unknown)
		}
	}
	var w watcher
	c := New(Config{MaxMessageBytes: 1 << 20, Extensions: "x-unknown"}, &w)
	play(c, []step{{0, Server, created("r1")}})
	if len(w.started) != 0 || !slices.Equal(w.fails, []Failure{UnknownExtension}) {
		t.Errorf("under an unknown extension: started %v, failures %v; want nothing read, one UnknownExtension", w.started, w.fails)
	}
}
