package e2e

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coder/websocket"
)

// RealtimePlan is how RealtimeUpstream answers one response.
type RealtimePlan struct {
	// Kind is "text" (response.output_text.delta), "audio"
	// (response.output_audio.delta, each followed by its
	// response.output_audio_transcript.delta) or "tool"
	// (response.function_call_arguments.delta).
	Kind string
	// Beta sends the beta's names (response.text.delta,
	// response.audio.delta, response.audio_transcript.delta).
	Beta bool
	// Deltas is the number of output deltas; TTFT the wait from the
	// response.create (or, for a response the server begins, from its
	// response.created) to the first; Gap the wait before each later one,
	// turn being the response's number on its connection, from 1.
	Deltas int
	TTFT   time.Duration
	Gap    func(turn int) time.Duration
	// Tokens is response.done's usage.output_tokens (0: Deltas).
	Tokens int
	// Then is how the response ends, after At deltas: "" (response.done,
	// status completed, after the last), "incomplete" or "failed" (that
	// status), "error" (an error event naming the response, and nothing
	// more), "drop" (the server closes the connection, without a Close
	// frame), "hang" (the server sends nothing more).
	Then string
	At   int
}

// ParsePlan reads a plan written as space-separated key=value pairs:
// kind=audio deltas=20 ttft=80ms gap=20ms-40ms tokens=44 then=drop at=5
// beta=true. A response.create carries one in response.metadata.plan; a
// session.update in session.instructions, for the responses the server
// begins.
func ParsePlan(s string) (RealtimePlan, error) {
	p := RealtimePlan{Kind: "text", Deltas: 10, TTFT: 20 * time.Millisecond, Gap: Uniform(10*time.Millisecond, 20*time.Millisecond)}
	for field := range strings.FieldsSeq(s) {
		k, v, _ := strings.Cut(field, "=")
		var err error
		switch k {
		case "kind":
			p.Kind = v
		case "beta":
			p.Beta, err = strconv.ParseBool(v)
		case "deltas":
			p.Deltas, err = strconv.Atoi(v)
		case "tokens":
			p.Tokens, err = strconv.Atoi(v)
		case "at":
			p.At, err = strconv.Atoi(v)
		case "then":
			p.Then = v
		case "ttft":
			p.TTFT, err = time.ParseDuration(v)
		case "gap":
			lo, hi, spread := strings.Cut(v, "-")
			var l, h time.Duration
			if l, err = time.ParseDuration(lo); err == nil && spread {
				h, err = time.ParseDuration(hi)
			}
			p.Gap = func(int) time.Duration { return l }
			if spread && err == nil && h > l {
				p.Gap = Uniform(l, h)
			}
		default:
			err = fmt.Errorf("unknown key")
		}
		if err != nil {
			return p, fmt.Errorf("plan %q: %s: %v", s, field, err)
		}
	}
	return p, nil
}

// RealtimeUpstream speaks OpenAI's Realtime API on a WebSocket, as a
// server with controlled timing: it answers each response.create with a
// response that follows the plan in its response.metadata.plan (else
// Default), refuses a response.create while a response is in flight (an
// error event, conversation_already_has_active_response, naming the
// client's event), stops a response at a response.cancel (response.done,
// status cancelled), and begins a response itself, as server-side voice
// activity detection does, at each input_audio_buffer.commit (the plan in
// the session's instructions, else Default).
type RealtimeUpstream struct {
	// Compression is the permessage-deflate mode it accepts; the zero
	// value accepts none.
	Compression websocket.CompressionMode
	Default     RealtimePlan

	responses atomic.Int64 // begun, on every connection: their ids

	mu sync.Mutex
	// Log, when not nil, gets every text message each session sent (from
	// "server") and read (from "client"), in order, with when: the moment
	// the read returned, or the moment before the write began.
	Log func(from string, msg []byte, at time.Time)
}

func (u *RealtimeUpstream) log(from string, msg []byte, at time.Time) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.Log != nil {
		u.Log(from, msg, at)
	}
}

// ServeHTTP accepts the WebSocket and serves the session until either end
// closes it.
func (u *RealtimeUpstream) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	c, err := websocket.Accept(w, r, &websocket.AcceptOptions{CompressionMode: u.Compression, InsecureSkipVerify: true})
	if err != nil {
		return
	}
	c.SetReadLimit(64 << 20)
	ctx, cancel := context.WithCancel(context.Background())
	s := &realtimeSession{u: u, c: c, ctx: ctx, plan: u.Default, model: r.URL.Query().Get("model")}
	defer func() {
		cancel()
		s.wg.Wait()
		_ = c.CloseNow()
	}()
	s.send(map[string]any{"type": "session.created", "session": map[string]any{"id": "sess_1", "object": "realtime.session", "model": s.model}})
	for {
		_, msg, err := c.Read(ctx)
		if err != nil {
			return
		}
		at := time.Now()
		u.log("client", msg, at)
		s.handle(msg, at)
	}
}

// realtimeSession is one connection's state.
type realtimeSession struct {
	u     *RealtimeUpstream
	c     *websocket.Conn
	ctx   context.Context
	model string
	wg    sync.WaitGroup

	mu     sync.Mutex // writes, and what follows
	events int
	plan   RealtimePlan    // the plan of the responses the server begins
	active *realtimeAnswer // the response in flight
	number int             // responses begun
}

type realtimeAnswer struct {
	id     string
	turn   int
	cancel chan struct{}
}

// send writes one event, numbering it.
func (s *realtimeSession) send(ev map[string]any) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.events++
	ev["event_id"] = fmt.Sprintf("event_%d", s.events)
	msg, _ := json.Marshal(ev)
	at := time.Now()
	if s.c.Write(s.ctx, websocket.MessageText, msg) != nil {
		return false
	}
	s.u.log("server", msg, at)
	return true
}

func (s *realtimeSession) handle(msg []byte, at time.Time) {
	if bytes.HasPrefix(msg, []byte(`{"type":"input_audio_buffer.append"`)) {
		return // audio: nothing to answer, and not worth decoding
	}
	var ev struct {
		Type     string `json:"type"`
		EventID  string `json:"event_id"`
		Response struct {
			Metadata map[string]string `json:"metadata"`
		} `json:"response"`
		Session struct {
			Instructions string `json:"instructions"`
		} `json:"session"`
	}
	if json.Unmarshal(msg, &ev) != nil {
		s.send(map[string]any{"type": "error", "error": map[string]any{"type": "invalid_request_error", "code": "invalid_json", "message": "not JSON"}})
		return
	}
	switch ev.Type {
	case "session.update":
		if p, err := ParsePlan(ev.Session.Instructions); err == nil && ev.Session.Instructions != "" {
			s.mu.Lock()
			s.plan = p
			s.mu.Unlock()
		}
		s.send(map[string]any{"type": "session.updated", "session": map[string]any{"id": "sess_1"}})
	case "response.create":
		plan := s.u.Default
		if spec, ok := ev.Response.Metadata["plan"]; ok {
			var err error
			if plan, err = ParsePlan(spec); err != nil {
				s.send(map[string]any{"type": "error", "error": map[string]any{"type": "invalid_request_error", "message": err.Error(), "event_id": ev.EventID}})
				return
			}
		}
		s.begin(plan, at, ev.EventID)
	case "response.cancel":
		s.mu.Lock()
		if s.active != nil {
			close(s.active.cancel)
			s.active = nil
		}
		s.mu.Unlock()
	case "input_audio_buffer.commit":
		s.send(map[string]any{"type": "input_audio_buffer.committed", "item_id": "item_in"})
		s.mu.Lock()
		plan := s.plan
		s.mu.Unlock()
		s.begin(plan, time.Time{}, "")
	}
}

// begin starts a response, whose clock started at asked (zero: now, at
// its response.created), unless one is in flight.
func (s *realtimeSession) begin(plan RealtimePlan, asked time.Time, eventID string) {
	s.mu.Lock()
	if s.active != nil {
		s.mu.Unlock()
		s.send(map[string]any{"type": "error", "error": map[string]any{"type": "invalid_request_error",
			"code": "conversation_already_has_active_response", "message": "a response is in progress", "event_id": eventID}})
		return
	}
	s.number++
	a := &realtimeAnswer{id: fmt.Sprintf("resp_%d", s.u.responses.Add(1)), turn: s.number, cancel: make(chan struct{})}
	s.active = a
	s.mu.Unlock()
	s.wg.Go(func() { s.answer(a, plan, asked) })
}

// finished says a response is no longer in flight.
func (s *realtimeSession) finished(a *realtimeAnswer) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.active == a {
		s.active = nil
	}
}

// The delta event names, GA and beta, by kind.
var realtimeDeltaNames = map[bool]map[string][2]string{
	false: {"text": {"response.output_text.delta"}, "tool": {"response.function_call_arguments.delta"},
		"audio": {"response.output_audio.delta", "response.output_audio_transcript.delta"}},
	true: {"text": {"response.text.delta"}, "tool": {"response.function_call_arguments.delta"},
		"audio": {"response.audio.delta", "response.audio_transcript.delta"}},
}

// audioChunk is 20 ms of 24 kHz 16-bit audio, base64.
var audioChunk = base64.StdEncoding.EncodeToString(make([]byte, 960))

// answer sends one response as its plan says.
func (s *realtimeSession) answer(a *realtimeAnswer, p RealtimePlan, asked time.Time) {
	defer s.finished(a)
	if !s.send(map[string]any{"type": "response.created", "response": map[string]any{"id": a.id, "object": "realtime.response", "status": "in_progress", "output": []any{}, "usage": nil}}) {
		return
	}
	if asked.IsZero() {
		asked = time.Now()
	}
	names := realtimeDeltaNames[p.Beta][p.Kind]
	next := asked.Add(p.TTFT)
	status := "completed"
	sent := 0
	for ; sent < p.Deltas; sent++ {
		if p.Then != "" && sent == p.At {
			switch p.Then {
			case "drop":
				_ = s.c.CloseNow()
				return
			case "hang":
				<-s.ctx.Done()
				return
			case "error":
				s.finished(a) // as at response.done: the next may follow at once
				s.send(map[string]any{"type": "error", "error": map[string]any{"type": "server_error", "message": "the model failed", "response_id": a.id}})
				return
			}
		}
		select {
		case <-time.After(time.Until(next)):
		case <-a.cancel:
			status = "cancelled"
		case <-s.ctx.Done():
			return
		}
		if status == "cancelled" {
			break
		}
		name, delta := names[0], fmt.Sprintf("w%d ", sent)
		switch {
		case p.Kind == "audio" && sent%2 == 0:
			delta = audioChunk
		case p.Kind == "audio":
			name = names[1]
		case p.Kind == "tool":
			delta = fmt.Sprintf(`"a%d":`, sent)
		}
		if !s.send(map[string]any{"type": name, "response_id": a.id, "item_id": "item_" + a.id, "output_index": 0, "content_index": 0, "delta": delta}) {
			return
		}
		if p.Gap != nil {
			next = time.Now().Add(p.Gap(a.turn))
		}
	}
	if status == "completed" && (p.Then == "incomplete" || p.Then == "failed") {
		status = p.Then
	}
	tokens := p.Tokens
	if tokens == 0 || status == "cancelled" {
		tokens = sent
	}
	// The next response.create may follow response.done at once.
	s.finished(a)
	s.send(map[string]any{"type": "response.done", "response": map[string]any{
		"id": a.id, "object": "realtime.response", "status": status, "output": []any{},
		"usage": map[string]any{"total_tokens": 11 + tokens, "input_tokens": 11, "output_tokens": tokens},
	}})
}

// realtimeLoad is a Load client of the Realtime API: one connection to
// /v1/realtime?model=model, with permessage-deflate offered, asking for
// one response after another (each as the upstream's default plan says)
// until deadline.
func realtimeLoad(ctx context.Context, addr, model string, deadline time.Time) error {
	c, _, err := websocket.Dial(ctx, "ws://"+addr+"/v1/realtime?model="+model, &websocket.DialOptions{CompressionMode: websocket.CompressionContextTakeover})
	if err != nil {
		return err
	}
	defer c.CloseNow()
	for first := true; first || time.Now().Before(deadline); first = false {
		if err := c.Write(ctx, websocket.MessageText, []byte(`{"type":"response.create"}`)); err != nil {
			return err
		}
		for {
			_, msg, err := c.Read(ctx)
			if err != nil {
				return err
			}
			if strings.Contains(string(msg), `"type":"response.done"`) {
				break
			}
		}
	}
	return c.Close(websocket.StatusNormalClosure, "")
}
