package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/itlproxy/itlproxy/internal/e2e"
)

// turnTokens is how many tokens each answer of turnUpstream streams: six
// gaps, enough for a stream's median gap.
const turnTokens = 7

// turnUpstream answers chat completions and Anthropic Messages requests
// with a short stream, its tokens 2 ms apart, whatever the history.
func turnUpstream(w http.ResponseWriter, r *http.Request) {
	_, _ = io.Copy(io.Discard, r.Body)
	w.Header().Set("Content-Type", "text/event-stream")
	rc := http.NewResponseController(w)
	event := func(s string) {
		_, _ = io.WriteString(w, s)
		_ = rc.Flush()
	}
	if r.URL.Path == "/v1/messages" {
		event("event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_1\",\"model\":\"m\",\"usage\":{\"input_tokens\":20,\"output_tokens\":1}}}\n\n")
		for range turnTokens {
			time.Sleep(2 * time.Millisecond)
			event("event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"a\"}}\n\n")
		}
		event("event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\"},\"usage\":{\"output_tokens\":7}}\n\n")
		event("event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n")
		return
	}
	for range turnTokens {
		time.Sleep(2 * time.Millisecond)
		event("data: {\"id\":\"c\",\"object\":\"chat.completion.chunk\",\"model\":\"m\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"a\"}}]}\n\n")
	}
	event("data: [DONE]\n\n")
}

// roundRobin is a balancer that sends each request to the next of its
// targets in turn, as kube-proxy's choice of a pod per connection does
// to a client that opens one per request. It serves full duplex, as
// itlproxy does: Go's HTTP/1 server otherwise closes the request body when
// the response starts, which cuts a stream whose request the transport
// has not quite finished sending.
func roundRobin(targets []string) http.Handler {
	var next atomic.Uint64
	rp := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			u, _ := url.Parse("http://" + targets[(next.Add(1)-1)%uint64(len(targets))])
			pr.SetURL(u)
		},
		FlushInterval: -1,
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_ = http.NewResponseController(w).EnableFullDuplex()
		rp.ServeHTTP(w, r)
	})
}

// chatSession sends the turns of one conversation of api ("chat" or
// "messages") to base, each request carrying the history so far as chat
// clients send it, and the session header when session is not "".
func chatSession(t *testing.T, base, api, session string, turns int) {
	t.Helper()
	path := "/v1/chat/completions"
	if api == "messages" {
		path = "/v1/messages"
	}
	var history []map[string]string
	for turn := 1; turn <= turns; turn++ {
		history = append(history, map[string]string{"role": "user", "content": fmt.Sprintf("question %d", turn)})
		body, _ := json.Marshal(map[string]any{"model": "m", "stream": true, "max_tokens": 64, "messages": history})
		req, _ := http.NewRequest(http.MethodPost, base+path, strings.NewReader(string(body)))
		req.Header.Set("Content-Type", "application/json")
		if session != "" {
			req.Header.Set("X-Session-Id", session)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		answer, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			t.Fatalf("turn %d: %v", turn, err)
		}
		if resp.StatusCode != http.StatusOK || !strings.Contains(string(answer), "[DONE]") && !strings.Contains(string(answer), "message_stop") {
			t.Fatalf("%s turn %d: %s %v %s", base, turn, resp.Status, resp.Header, answer)
		}
		history = append(history, map[string]string{"role": "assistant", "content": strings.Repeat("a", turnTokens)})
	}
}

// turnFigures are what one itlproxy's /metrics says of the sessions'
// turns.
type turnFigures struct {
	ttftByTurn, medianByTurn map[string]uint64 // by turn band
	judged                   uint64            // streams compared with their session's baseline
	unjudged                 float64           // and those that could not be
}

func turnFiguresOf(t *testing.T, admin string) turnFigures {
	t.Helper()
	fs := scrapeAdmin(t, admin)
	f := turnFigures{ttftByTurn: map[string]uint64{}, medianByTurn: map[string]uint64{}}
	for _, band := range []string{"1", "2-4", "5-16", "17+"} {
		f.ttftByTurn[band], _ = fs.Histogram("itlproxy_time_to_first_token_by_turn_seconds", "turn", band)
		f.medianByTurn[band], _ = fs.Histogram("itlproxy_stream_median_gap_by_turn_seconds", "turn", band)
	}
	f.judged, _ = fs.Histogram("itlproxy_session_gap_ratio")
	f.unjudged = fs.Value("itlproxy_session_streams_unjudged_total")
	return f
}

// TestTurnsAcrossReplicas runs three itlproxy processes behind a
// round-robin balancer and one alone, and sends the same sessions to both
// (chat completions and Anthropic Messages, 18 turns each, with and
// without a session header): the by-turn histograms of the three, summed,
// equal the single process's and the true turn numbers, because each
// stream's turn is read from its request; no process of the three judges
// a session whose first turns it did not serve, and each says how many
// streams it left unjudged, where the single process judges every later
// turn.
func TestTurnsAcrossReplicas(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(turnUpstream))
	defer up.Close()
	env := map[string]string{"ITLPROXY_UPSTREAM_URL": up.URL}
	var replicas []*e2e.Process
	var targets []string
	for range 3 {
		p := e2e.Start(t, env)
		replicas = append(replicas, p)
		targets = append(targets, p.Proxy)
	}
	alone := e2e.Start(t, env)
	balancer := httptest.NewServer(roundRobin(targets))
	defer balancer.Close()

	const turns = 18
	sessions := 0
	for _, api := range []string{"chat", "messages"} {
		for _, header := range []bool{true, false} {
			session := ""
			if header {
				session = fmt.Sprintf("%s-session", api)
				sessions++
			}
			chatSession(t, balancer.URL, api, session, turns)
			chatSession(t, "http://"+alone.Proxy, api, session, turns)
		}
	}

	// Per conversation: turn 1, turns 2-4, 5-16, 17 and 18; four
	// conversations.
	want := map[string]uint64{"1": 4 * 1, "2-4": 4 * 3, "5-16": 4 * 12, "17+": 4 * 2}
	single := turnFiguresOf(t, alone.Admin)
	sum := turnFigures{ttftByTurn: map[string]uint64{}, medianByTurn: map[string]uint64{}}
	for i, p := range replicas {
		f := turnFiguresOf(t, p.Admin)
		t.Logf("replica %d: TTFT by turn %v, median gap by turn %v, %d judged, %v unjudged", i, f.ttftByTurn, f.medianByTurn, f.judged, f.unjudged)
		for band, n := range f.ttftByTurn {
			sum.ttftByTurn[band] += n
			sum.medianByTurn[band] += f.medianByTurn[band]
		}
		sum.judged += f.judged
		sum.unjudged += f.unjudged
		if f.judged != 0 {
			t.Errorf("replica %d judged %d streams against a baseline whose first turns another replica served", i, f.judged)
		}
	}
	t.Logf("alone: TTFT by turn %v, median gap by turn %v, %d judged, %v unjudged", single.ttftByTurn, single.medianByTurn, single.judged, single.unjudged)
	for band, n := range want {
		if single.ttftByTurn[band] != n || sum.ttftByTurn[band] != n {
			t.Errorf("TTFT by turn %s: %d alone, %d over the replicas; want %d", band, single.ttftByTurn[band], sum.ttftByTurn[band], n)
		}
		if single.medianByTurn[band] != n || sum.medianByTurn[band] != n {
			t.Errorf("median gap by turn %s: %d alone, %d over the replicas; want %d", band, single.medianByTurn[band], sum.medianByTurn[band], n)
		}
	}
	// Every session stream after the first is judged alone; behind the
	// balancer, none can be, and each is counted.
	later := uint64(sessions * (turns - 1))
	if single.judged != later || single.unjudged != 0 {
		t.Errorf("alone: %d judged, %v unjudged; want %d and 0", single.judged, single.unjudged, later)
	}
	if sum.unjudged != float64(later) {
		t.Errorf("replicas: %v streams unjudged, want %d", sum.unjudged, later)
	}
}
